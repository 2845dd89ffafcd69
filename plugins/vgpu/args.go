package vgpu

import (
	"fmt"
	"sync"

	"k8s.io/klog/v2"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/pluginargs"
)

// argsMemo parses the plugin's arguments, which Volcano hands to every session's
// builder, and reports them (and any it refuses) once per change, not every session.
type argsMemo struct {
	// mu guards seen and args: New may be called from any goroutine.
	mu   sync.Mutex
	seen string
	args pluginargs.Args
}

func (m *argsMemo) parse(in framework.Arguments) pluginargs.Args {
	written := fmt.Sprint(map[string]any(in))
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == written {
		return m.args
	}
	args, err := pluginargs.Parse(in)
	if err != nil {
		klog.ErrorS(err, "Bad vgpu plugin arguments; using defaults for those", "plugin", PluginName)
	}
	klog.V(2).InfoS("vgpu plugin arguments", "plugin", PluginName, "args", fmt.Sprintf("%+v", args))
	m.seen, m.args = written, args
	return args
}
