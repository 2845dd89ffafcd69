package agentconfig

import (
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/tessera-gpu/tessera/charts/test"
	dpconfig "github.com/tessera-gpu/tessera/deviceplugin/config"
)

// cardAPI reaches the agent's config; in dra mode the directories the agent serves its
// sockets in (draPluginDir/vgpu.tessera.io and draRegistrationDir, as the agent's loader
// reads them) are the ones the DaemonSet mounts.
func TestCardAPIReachesTheAgentAndItsSocketDirectoriesAreMounted(t *testing.T) {
	if cfg := agentConfig(t, charttest.MustRender(t, "")); cfg.CardAPI != dpconfig.CardAPIDevicePlugin {
		t.Errorf("default cardAPI %q, want %s", cfg.CardAPI, dpconfig.CardAPIDevicePlugin)
	}
	r, err := charttest.RenderValues(t, "devicePlugin:\n  config: {cardAPI: dra, draPluginDir: /data/kubelet/plugins, draRegistrationDir: /data/kubelet/plugins_registry}\n")
	if err != nil {
		t.Fatal(err)
	}
	cfg := agentConfig(t, r)
	if cfg.CardAPI != dpconfig.CardAPIDRA {
		t.Fatalf("cardAPI %q, want dra", cfg.CardAPI)
	}
	var ds appsv1.DaemonSet
	r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
	mounted := map[string]bool{}
	for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounted[m.MountPath] = !m.ReadOnly
	}
	for _, dir := range []string{filepath.Join(cfg.DRAPluginDir, "vgpu.tessera.io"), cfg.DRARegistrationDir, cfg.CDISpecDir} {
		if !mounted[dir] {
			t.Errorf("the agent serves or writes in %s, which the DaemonSet does not mount writable (mounts %v)", dir, mounted)
		}
	}
}
