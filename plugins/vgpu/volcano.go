package vgpu

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// How Volcano's own resource accounting sees the vGPU resources (a deliberate split):
//
//   - The slot count (volcano.sh/vgpu-number) is a real node resource: the node agent
//     advertises it and the kubelet admits pods against it. Volcano keeps counting it,
//     so its predicates, proportion and capacity see card slots like any other
//     extended resource, and a queue's capability on it holds.
//   - Card memory, memory percentage and cores are per-card quantities that no node
//     advertises. Counted by Volcano, every node would be short of them and every queue
//     overused (Volcano v1.14 no longer ignores them unless its own deviceshare VGPUEnable
//     is on). Tessera registers them on Volcano's ignored-device list; its vgpu plugin
//     fits them card by card and its queue share divides them among the queues.
//
// Volcano computes a task's resources once, when its pod enters the scheduler's cache,
// so the names must be registered before the cache starts: the default names at init,
// names configured in volcano-scheduler.conf by PrepareVolcano from the scheduler's main.
// A session that finds its configured names unregistered (the conf changed while the
// scheduler ran) registers them and says that pods cached before then keep the old view.

// volcanoIgnored lists the resources of names that Volcano must leave to Tessera.
func volcanoIgnored(names api.ResourceNames) []string {
	return []string{string(names.Memory), string(names.MemoryPercentage), string(names.Cores)}
}

// ignoreInVolcano registers names on Volcano's ignored-device list and returns those
// that were not there before.
func ignoreInVolcano(names api.ResourceNames) []string {
	want := volcanoIgnored(names)
	have := vapi.IgnoredDevicesList.List()
	var added []string
	for _, n := range want {
		if n != "" && !slices.Contains(have, n) {
			added = append(added, n)
		}
	}
	if len(added) > 0 {
		vapi.IgnoredDevicesList.AppendList(added)
	}
	return added
}

func init() {
	ignoreInVolcano(api.DefaultResourceNames())
}

// PrepareVolcano reads the scheduler configuration file the scheduler will load (its
// --scheduler-conf; empty for Volcano's built-in default) and registers the vgpu
// plugin's resource names with Volcano before the scheduler's cache starts. A file
// that cannot be read or parsed is an error; bad vgpu arguments are not (the plugin
// logs them and uses the defaults, as each session will).
func PrepareVolcano(confPath string) error {
	if confPath == "" {
		return nil
	}
	b, err := os.ReadFile(confPath)
	if err != nil {
		return fmt.Errorf("scheduler conf: %w", err)
	}
	args, err := pluginargs.FromConf(string(b))
	var bad *pluginargs.InvalidError
	switch {
	case err == nil:
	case errors.As(err, &bad):
		klog.ErrorS(err, "Bad vgpu plugin arguments; using defaults for those", "conf", confPath)
	case errors.Is(err, pluginargs.ErrNotEnabled):
		klog.InfoS("The scheduler conf does not enable the vgpu plugin; vGPU resources keep their default names", "conf", confPath)
		return nil
	default:
		return fmt.Errorf("scheduler conf %s: %w", confPath, err)
	}
	if added := ignoreInVolcano(args.Resources); len(added) > 0 {
		klog.InfoS("Volcano leaves these vGPU resources to Tessera", "resources", added)
	}
	return nil
}
