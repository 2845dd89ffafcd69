package agent

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/deviceplugin/cdi"
	"github.com/tessera-gpu/tessera/deviceplugin/config"
	"github.com/tessera-gpu/tessera/deviceplugin/uninstall"
)

// uninstallWait is how long a stopping agent waits for the deletion of its DaemonSet to
// reach it: Helm deletes the DaemonSet before its pods are stopped, but the kubelet's
// SIGTERM can come a moment before the watch event.
const uninstallWait = 2 * time.Second

// uninstaller watches the agent's DaemonSet when the config names it, on a context of its
// own that outlives the agent's (the deletion may arrive after SIGTERM).
type uninstaller struct {
	watch   *uninstall.Watch
	cancel  context.CancelFunc
	ctx     context.Context
	cfg     *config.Config
	kubelet uninstall.Lister
	// claims, in dra mode, counts the claims the DRA driver still has prepared: their
	// containers use files under the state directory, which then stay.
	claims func() int
}

func watchUninstall(ctx context.Context, cfg *config.Config, client kubernetes.Interface, kubelet uninstall.Lister) *uninstaller {
	if cfg.UninstallDaemonSet == "" {
		return &uninstaller{cancel: func() {}}
	}
	ns, name, _ := strings.Cut(cfg.UninstallDaemonSet, "/")
	u := &uninstaller{watch: &uninstall.Watch{Client: client, Namespace: ns, Name: name}, cfg: cfg, kubelet: kubelet}
	u.ctx, u.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		if err := u.watch.Run(u.ctx); err != nil && u.ctx.Err() == nil {
			klog.ErrorS(err, "Cannot watch the agent's DaemonSet; host files will stay when the agent stops")
		}
	}()
	return u
}

// stop ends the watch.
func (u *uninstaller) stop() { u.cancel() }

// removeIfUninstalled, called when the agent has stopped, removes the host files if the
// DaemonSet was deleted and the kubelet reports no pod holding the node's slots.
func (u *uninstaller) removeIfUninstalled() {
	if u.watch == nil || !u.watch.Gone(uninstallWait) {
		return
	}
	if u.claims != nil {
		if n := u.claims(); n > 0 {
			klog.InfoS("Uninstalled with DRA claims still prepared on the node: host files kept for them; remove them once they end (docs/install.md)",
				"claims", n, "hookLibrary", u.cfg.HookLibrary, "stateDir", u.cfg.StateDir)
			return
		}
	}
	rctx, done := context.WithTimeout(u.ctx, 10*time.Second)
	defer done()
	files := uninstall.Files{HookLibrary: u.cfg.HookLibrary, StateDir: u.cfg.StateDir}
	if u.cfg.CardHandoff != config.HandoffEnv {
		files.CDISpec = filepath.Join(u.cfg.CDISpecDir, cdi.FileName(cdi.HookKind))
	}
	switch err := uninstall.Remove(rctx, u.kubelet, u.cfg.ResourceName, files); {
	case errors.Is(err, uninstall.ErrInUse):
		klog.InfoS("Uninstalled with vGPU pods still on the node: host files kept for them; remove them once they end (docs/install.md)",
			"reason", err, "hookLibrary", files.HookLibrary, "stateDir", files.StateDir, "cdiSpec", files.CDISpec)
	case err != nil:
		klog.ErrorS(err, "Uninstalled: host files not removed", "hookLibrary", files.HookLibrary, "stateDir", files.StateDir)
	default:
		klog.InfoS("Uninstalled: host files removed (a read-only hook library is left to the chart's cleanup container), no pod held the node's vGPU slots", "hookLibrary", files.HookLibrary,
			"stateDir", files.StateDir, "cdiSpec", files.CDISpec)
	}
}
