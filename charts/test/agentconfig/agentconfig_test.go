// Package agentconfig checks the node agent's rendered configuration with the agent's
// own loader. It is apart from the scheduler checks because Volcano's framework
// (which imports "plugin") and go-nvml cannot be linked into one test binary.
package agentconfig

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/charts/test"
	dpconfig "github.com/tessera-gpu/tessera/deviceplugin/config"
)

// agentConfig loads the rendered device-plugin.yaml with the agent's own strict
// loader, exactly as the container would (--config and NODE_NAME).
func agentConfig(t *testing.T, r *charttest.Rendered) *dpconfig.Config {
	t.Helper()
	var cm corev1.ConfigMap
	r.Get(t, "ConfigMap", "gpu-tessera-vgpu-device-plugin-config", &cm)
	path := filepath.Join(t.TempDir(), "device-plugin.yaml")
	if err := os.WriteFile(path, []byte(cm.Data["device-plugin.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"NODE_NAME": "gpu-node-1"}
	cfg, err := dpconfig.Load([]string{"--config=" + path, "-v=2"}, func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		klogLike())
	if err != nil {
		t.Fatalf("the agent rejects the rendered config: %v\n%s", err, cm.Data["device-plugin.yaml"])
	}
	return cfg
}

// klogLike stands in for the klog flag set the agent's main passes (-v).
func klogLike() *flag.FlagSet {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	fs.String("v", "0", "")
	return fs
}

func TestTheAgentAcceptsTheRenderedConfig(t *testing.T) {
	cfg := agentConfig(t, charttest.MustRender(t, ""))
	if cfg.StateDir != "/var/lib/tessera" || cfg.DevicePluginDir != "/var/lib/kubelet/device-plugins" || cfg.KubeletPodsDir != "/var/lib/kubelet/pods" ||
		cfg.MetricsAddress != ":9394" || cfg.NodeName != "gpu-node-1" || cfg.SharesPerCard != 10 {
		t.Errorf("default agent config: %+v", cfg)
	}
	cfg = agentConfig(t, charttest.MustRender(t, "../testdata/custom-values.yaml"))
	if cfg.StateDir != "/data/tessera" || cfg.HookLibrary != "/opt/gpu/lib/libvgpu.so" || cfg.SharesPerCard != 4 || cfg.KubeletPodsDir != "/data/kubelet/pods" ||
		cfg.MetricsAddress != ":9500" || cfg.ResourceName != "example.com/vgpu" || !cfg.VolcanoCompat {
		t.Errorf("custom agent config: %+v", cfg)
	}
}

func TestTheAgentIsToldItsDaemonSetOnlyWhenItRemovesHostFiles(t *testing.T) {
	if got := agentConfig(t, charttest.MustRender(t, "")).UninstallDaemonSet; got != "volcano-system/gpu-tessera-vgpu-device-plugin" {
		t.Errorf("default uninstallDaemonSet %q, want the release's DaemonSet volcano-system/gpu-tessera-vgpu-device-plugin", got)
	}
	if got := agentConfig(t, charttest.MustRender(t, "../testdata/keep-host-files.yaml")).UninstallDaemonSet; got != "" {
		t.Errorf("uninstallDaemonSet %q with removeHostFilesOnUninstall: false, want empty", got)
	}
}

// The agent verifies assignments with the release's published keys and refuses unsigned
// ones, unless told to allow them while migrating.
func TestTheAgentVerifiesAssignmentsWithTheReleasesKeys(t *testing.T) {
	cfg := agentConfig(t, charttest.MustRender(t, ""))
	if cfg.AssignmentKeys != "volcano-system/gpu-tessera-assignment-keys" || cfg.UnsignedAssignments != dpconfig.UnsignedRefuse {
		t.Errorf("assignmentKeys %q unsignedAssignments %q", cfg.AssignmentKeys, cfg.UnsignedAssignments)
	}
	r, err := charttest.RenderValues(t, "devicePlugin:\n  config: {assignmentKeys: gpu-system/keys, unsignedAssignments: allow}\n")
	if err != nil {
		t.Fatal(err)
	}
	if cfg := agentConfig(t, r); cfg.AssignmentKeys != "gpu-system/keys" || cfg.UnsignedAssignments != dpconfig.UnsignedAllow {
		t.Errorf("assignmentKeys %q unsignedAssignments %q", cfg.AssignmentKeys, cfg.UnsignedAssignments)
	}
}

// The memory guard's settings reach the agent, and the agent accepts them.
func TestTheMemoryGuardIsOnAndConfigurable(t *testing.T) {
	cfg := agentConfig(t, charttest.MustRender(t, ""))
	if g := cfg.MemoryGuard; g.Mode != dpconfig.MemoryGuardEnforce || g.Interval.Duration != 5*time.Second || g.OverChecks != 2 ||
		g.ContextAllowance.String() != "768Mi" || g.CountedProcesses != 4 {
		t.Errorf("default memory guard %+v", g)
	}
	r, err := charttest.RenderValues(t, "devicePlugin:\n  config:\n    memoryGuard: {mode: report, interval: 30s, overChecks: 3, contextAllowance: 1Gi, countedProcesses: 1}\n")
	if err != nil {
		t.Fatal(err)
	}
	if g := agentConfig(t, r).MemoryGuard; g.Mode != dpconfig.MemoryGuardReport || g.Interval.Duration != 30*time.Second || g.OverChecks != 3 ||
		g.ContextAllowance.String() != "1Gi" || g.CountedProcesses != 1 {
		t.Errorf("custom memory guard %+v", g)
	}
	if _, err := charttest.RenderValues(t, "devicePlugin:\n  config:\n    memoryGuard: {mode: kill}\n"); err == nil || !strings.Contains(err.Error(), "mode") {
		t.Errorf("mode kill: %v, want a schema error naming mode", err)
	}
}

// The context reserve table reaches the agent as the chart lists it.
func TestTheContextReserveTableReachesTheAgent(t *testing.T) {
	cfg := agentConfig(t, charttest.MustRender(t, ""))
	if h, a := cfg.ContextReserve.MiB("NVIDIA H100 80GB HBM3"), cfg.ContextReserve.MiB("NVIDIA A100-SXM4-40GB"); h != 518 || a != 520 {
		t.Errorf("rendered reserves: H100 %d, A100 %d MiB, want 518 and 520", h, a)
	}
	r, err := charttest.RenderValues(t, "devicePlugin:\n  config:\n    contextReserve: {default: 0Mi, models: [{match: A100, reserve: 410Mi}]}\n")
	if err != nil {
		t.Fatal(err)
	}
	if c := agentConfig(t, r); c.ContextReserve.MiB("NVIDIA A100-SXM4-40GB") != 410 || c.ContextReserve.MiB("NVIDIA L4") != 0 {
		t.Errorf("custom reserves: %+v", c.ContextReserve)
	}
}
