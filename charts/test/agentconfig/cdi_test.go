package agentconfig

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/tessera-gpu/tessera/charts/test"
	dpconfig "github.com/tessera-gpu/tessera/deviceplugin/config"
)

// cardHandoff reaches the agent's config, and outside env mode the DaemonSet mounts the
// spec directory the agent writes to (at the same path) and /etc/cdi read-only.
func TestCardHandoffReachesTheAgentAndMountsTheCDIDirectories(t *testing.T) {
	for _, tt := range []struct {
		values  string
		handoff string
		specDir string
	}{
		{"", dpconfig.HandoffEnv, ""},
		{"../testdata/cdi-values.yaml", dpconfig.HandoffCDI, "/run/cdi"},
	} {
		r := charttest.MustRender(t, tt.values)
		cfg := agentConfig(t, r)
		if cfg.CardHandoff != tt.handoff || cfg.SlotTopology != dpconfig.SlotTopologyNone {
			t.Errorf("%q: cardHandoff %q slotTopology %q", tt.values, cfg.CardHandoff, cfg.SlotTopology)
		}
		var ds appsv1.DaemonSet
		r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
		hostPaths := map[string]string{}
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.HostPath != nil {
				hostPaths[v.Name] = v.HostPath.Path
			}
		}
		mounts := map[string]string{}
		readOnly := map[string]bool{}
		for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
			mounts[m.Name], readOnly[m.Name] = m.MountPath, m.ReadOnly
		}
		if tt.specDir == "" {
			if _, ok := hostPaths["cdi-specs"]; ok {
				t.Errorf("env mode mounts a CDI spec directory: %v", hostPaths)
			}
			continue
		}
		if cfg.CDISpecDir != tt.specDir || cfg.CDICardKind != "management.example.com/gpu" {
			t.Errorf("cdiSpecDir %q cdiCardKind %q", cfg.CDISpecDir, cfg.CDICardKind)
		}
		if hostPaths["cdi-specs"] != tt.specDir || mounts["cdi-specs"] != tt.specDir || readOnly["cdi-specs"] {
			t.Errorf("spec directory: host %q mounted at %q read-only %t, want %s read-write at the same path",
				hostPaths["cdi-specs"], mounts["cdi-specs"], readOnly["cdi-specs"], tt.specDir)
		}
		if hostPaths["cdi-static-specs"] != "/etc/cdi" || mounts["cdi-static-specs"] != "/etc/cdi" || !readOnly["cdi-static-specs"] {
			t.Errorf("/etc/cdi: host %q mounted at %q read-only %t", hostPaths["cdi-static-specs"], mounts["cdi-static-specs"], readOnly["cdi-static-specs"])
		}
	}
}

// The schema refuses a misspelt handoff, slot topology or CDI kind, naming the value.
func TestTheSchemaRefusesBadCardHandoffValues(t *testing.T) {
	for _, c := range []struct{ values, want string }{
		{"devicePlugin:\n  config: {cardHandoff: CDI}\n", "cardHandoff"},
		{"devicePlugin:\n  config: {slotTopology: single-numa-node}\n", "slotTopology"},
		{"devicePlugin:\n  config: {cdiCardKind: nvidia.com}\n", "cdiCardKind"},
		{"devicePlugin:\n  config: {cdiSpecDir: run/cdi}\n", "cdiSpecDir"},
	} {
		if _, err := charttest.RenderValues(t, c.values); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("values %q: err = %v, want a schema error naming %s", c.values, err, c.want)
		}
	}
	if _, err := charttest.RenderValues(t, "devicePlugin:\n  config: {cardHandoff: both, slotTopology: numa, cdiCardKind: k8s.device-plugin.nvidia.com/gpu}\n"); err != nil {
		t.Errorf("valid values refused: %v", err)
	}
}
