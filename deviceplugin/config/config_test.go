package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tessera-gpu/tessera/api"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTheExampleFileHoldsTheDefaults(t *testing.T) {
	c, err := Load([]string{"--config", "../../config/device-plugin.yaml"}, env(map[string]string{"NODE_NAME": "n"}))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.NodeName = "n"
	if !reflect.DeepEqual(c, want) {
		t.Errorf("example file gives\n%+v\nwant the defaults\n%+v", c, want)
	}
}

func TestPrecedenceIsFlagThenEnvThenFile(t *testing.T) {
	file := writeFile(t, "version: v1\nnodeName: from-file\nsharesPerCard: 4\nheartbeatInterval: 7s\nvolcanoCompat: true\n")
	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		shares int
		beat   time.Duration
		node   string
	}{
		{"the file overrides the defaults", []string{"--config", file}, nil, 4, 7 * time.Second, "from-file"},
		{"the environment overrides the file", []string{"--config", file},
			map[string]string{"TESSERA_DP_SHARES_PER_CARD": "6", "NODE_NAME": "from-env"}, 6, 7 * time.Second, "from-env"},
		{"a flag overrides the environment", []string{"--config", file, "--shares-per-card=8", "--heartbeat-interval=1s"},
			map[string]string{"TESSERA_DP_SHARES_PER_CARD": "6"}, 8, time.Second, "from-file"},
		{"the config path may come from the environment", nil,
			map[string]string{"TESSERA_DP_CONFIG": file}, 4, 7 * time.Second, "from-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.args, env(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			if c.SharesPerCard != tt.shares || c.HeartbeatInterval.Duration != tt.beat || c.NodeName != tt.node || !c.VolcanoCompat {
				t.Errorf("got shares %d, heartbeat %v, node %q, compat %v; want %d, %v, %q, true",
					c.SharesPerCard, c.HeartbeatInterval.Duration, c.NodeName, c.VolcanoCompat, tt.shares, tt.beat, tt.node)
			}
		})
	}
}

func TestBadConfigurationIsRejectedNamingTheField(t *testing.T) {
	tests := []struct {
		name string
		file string
		args []string
		want []string
	}{
		{"an unknown field is rejected", "version: v1\nnodeName: n\nsharesPerKard: 3\n", nil, []string{"sharesPerKard"}},
		{"an unknown version is rejected before the fields", "version: v2\nnodeName: n\nnewThing: 1\n", nil, []string{`version "v2"`}},
		{"a missing version is rejected", "nodeName: n\n", nil, []string{`version ""`}},
		{"every invalid value is reported at once", "version: v1\nnodeName: n\nsharesPerCard: 0\npreload: magic\nstateDir: relative\n", nil,
			[]string{"sharesPerCard: 0", `preload: "magic"`, `stateDir: "relative"`}},
		{"a malformed flag value names the flag", "version: v1\nnodeName: n\n", []string{"--heartbeat-interval=soon"}, []string{"--heartbeat-interval"}},
		{"a missing node name is reported", "version: v1\n", nil, []string{"nodeName: empty"}},
		{"an unknown card handoff names the field and the choices", "version: v1\nnodeName: n\ncardHandoff: CDI\n", nil,
			[]string{`cardHandoff: "CDI", want env, cdi or both`}},
		{"a card kind that is not vendor/class is reported", "version: v1\nnodeName: n\ncdiCardKind: nvidia.com\n", nil,
			[]string{`cdiCardKind: kind "nvidia.com" is not vendor/class`}},
		{"the agent's own CDI kind cannot name the cards", "version: v1\nnodeName: n\ncdiCardKind: tessera.io/vgpu\n", nil,
			[]string{`cdiCardKind: "tessera.io/vgpu" is the agent's own kind`}},
		{"a relative CDI spec directory is reported", "version: v1\nnodeName: n\n", []string{"--cdi-spec-dir=cdi"}, []string{`cdiSpecDir: "cdi"`}},
		{"an unknown slot topology names the field", "version: v1\nnodeName: n\n", []string{"--slot-topology=single-numa-node"},
			[]string{`slotTopology: "single-numa-node", want none or numa`}},
		{"an uninstall DaemonSet without its namespace is reported", "version: v1\nnodeName: n\nuninstallDaemonSet: tessera-agent\n", nil,
			[]string{`uninstallDaemonSet: "tessera-agent"`}},
		{"an uninstall DaemonSet flag with an empty name is reported", "version: v1\nnodeName: n\n", []string{"--uninstall-daemonset=gpu/"},
			[]string{`uninstallDaemonSet: "gpu/"`}},
		{"a container directory other than vgpu-core's fixed one is refused, saying why", "version: v1\nnodeName: n\ncontainerDir: /opt/tessera\n", nil,
			[]string{`containerDir: "/opt/tessera" must be /var/run/tessera: vgpu-core reads its limits only from /var/run/tessera/limits.env`}},
		{"a container directory flag is checked as well", "version: v1\nnodeName: n\n", []string{"--container-dir=/run/tessera"},
			[]string{`containerDir: "/run/tessera" must be /var/run/tessera`}},
		{"a relative kubelet pods directory is refused", "version: v1\nnodeName: n\nkubeletPodsDir: var/lib/kubelet/pods\n", nil,
			[]string{`kubeletPodsDir: "var/lib/kubelet/pods" is not an absolute path`}},
		{"an unknown memory guard mode is named with its choices", "version: v1\nnodeName: n\nmemoryGuard:\n  mode: kill\n", nil,
			[]string{`memoryGuard.mode: "kill", want off, report or enforce`}},
		{"the memory guard's numbers are bounded", "version: v1\nnodeName: n\nmemoryGuard:\n  mode: report\n  interval: 100ms\n  overChecks: 0\n  contextAllowance: 20Gi\n  countedProcesses: -1\n", nil,
			[]string{"memoryGuard.interval: 100ms, want 1s..10m", "memoryGuard.overChecks: 0, want 1..100", "memoryGuard.contextAllowance: 20Gi, want 0..16Gi",
				"memoryGuard.countedProcesses: -1, want 0..64"}},
		{"an unknown card API names the field, the value as written and the choices", "version: v1\nnodeName: n\ncardAPI: DRA\n", nil,
			[]string{`cardAPI: "DRA", want device-plugin or dra`}},
		{"a card API flag is checked as well", "version: v1\nnodeName: n\n", []string{"--card-api=both"},
			[]string{`cardAPI: "both", want device-plugin or dra`}},
		{"relative DRA socket directories are refused", "version: v1\nnodeName: n\ndraPluginDir: var/lib/kubelet/plugins\n",
			[]string{"--dra-registration-dir=plugins_registry"},
			[]string{`draPluginDir: "var/lib/kubelet/plugins" is not an absolute path`, `draRegistrationDir: "plugins_registry" is not an absolute path`}},
		{"the memory guard flag is checked as well", "version: v1\nnodeName: n\n", []string{"--memory-guard=on"},
			[]string{`memoryGuard.mode: "on"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(append([]string{"--config", writeFile(t, tt.file)}, tt.args...), env(nil))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// Old files name containerDir (its one valid value): they load. The kubelet's pods
// directory, where the agent reads region volumes, comes from every source.
func TestContainerDirAndKubeletPodsDir(t *testing.T) {
	for _, tt := range []struct {
		name string
		file string
		args []string
		env  map[string]string
		want string
	}{
		{"an old file with containerDir loads, with the default pods directory", "version: v1\nnodeName: n\ncontainerDir: /var/run/tessera/\n", nil, nil, "/var/lib/kubelet/pods"},
		{"the file names it", "version: v1\nnodeName: n\nkubeletPodsDir: /var/lib/k0s/kubelet/pods\n", nil, nil, "/var/lib/k0s/kubelet/pods"},
		{"the environment names it", "version: v1\nnodeName: n\n", nil, map[string]string{"TESSERA_DP_KUBELET_PODS_DIR": "/data/kubelet/pods"}, "/data/kubelet/pods"},
		{"a flag names it", "version: v1\nnodeName: n\n", []string{"--kubelet-pods-dir=/x/pods"}, nil, "/x/pods"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(append([]string{"--config", writeFile(t, tt.file)}, tt.args...), env(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			if c.KubeletPodsDir != tt.want {
				t.Errorf("kubeletPodsDir = %q, want %q", c.KubeletPodsDir, tt.want)
			}
		})
	}
}

func TestHelpIsNotAConfigurationError(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		_, err := Load([]string{arg}, func(string) (string, bool) { return "", false })
		if !errors.Is(err, pflag.ErrHelp) || errors.Is(err, ErrInvalid) {
			t.Errorf("Load(%s) = %v, want pflag.ErrHelp and not ErrInvalid", arg, err)
		}
	}
	if u := Usage(); !strings.Contains(u, "--config") || !strings.Contains(u, "--node-name") {
		t.Errorf("Usage() lacks --config or --node-name:\n%s", u)
	}
}

func TestCardHandoffAndSlotTopologyComeFromEverySource(t *testing.T) {
	file := writeFile(t, "version: v1\nnodeName: n\ncardHandoff: both\ncdiCardKind: k8s.device-plugin.nvidia.com/gpu\n")
	c, err := Load([]string{"--config", file, "--slot-topology=numa"}, env(map[string]string{"TESSERA_DP_CDI_SPEC_DIR": "/etc/cdi"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.CardHandoff != HandoffBoth || c.CDICardKind != "k8s.device-plugin.nvidia.com/gpu" || c.CDISpecDir != "/etc/cdi" || c.SlotTopology != SlotTopologyNUMA {
		t.Errorf("got handoff %q kind %q dir %q topology %q", c.CardHandoff, c.CDICardKind, c.CDISpecDir, c.SlotTopology)
	}
}

// A card's CUDA context reserve comes from the first model entry its name contains, else
// the default, rounded up to MiB.
func TestContextReserveByModel(t *testing.T) {
	r := ContextReserve{Default: resource.MustParse("520Mi"), Models: []ModelReserve{
		{Match: "H100", Reserve: resource.MustParse("518Mi")}, {Match: "a100", Reserve: resource.MustParse("400Mi")},
		{Match: "A100-SXM4-80GB", Reserve: resource.MustParse("1Gi")}, {Match: "L4", Reserve: resource.MustParse("300000Ki")}}}
	for model, want := range map[string]int64{
		"NVIDIA H100 80GB HBM3":   518,
		"NVIDIA A100-SXM4-80GB":   400, // the first match wins
		"NVIDIA L40S":             293, // "L4" is in "L40S": entries are tried in order, so put longer names first
		"NVIDIA GeForce RTX 4090": 520,
		"":                        520,
	} {
		if got := r.MiB(model); got != want {
			t.Errorf("MiB(%q) = %d, want %d", model, got, want)
		}
	}
	if got := DefaultContextReserve().MiB("NVIDIA H100 PCIe"); got != 518 {
		t.Errorf("default table: H100 %d MiB, want the measured 518", got)
	}
}

// The agent publishes each card's reserve beside the inventory, by the same table that
// writes limits.env; the discovered cards are not changed.
func TestContextReserveIsStampedOnEachCard(t *testing.T) {
	found := []api.Card{{UUID: "GPU-h", Model: "NVIDIA H100 80GB HBM3"}, {UUID: "GPU-a", Model: "NVIDIA A30"}}
	got := DefaultContextReserve().OnCards(found)
	if got[0].ContextReserveMiB != 518 || got[1].ContextReserveMiB != 520 {
		t.Errorf("reserves %d and %d MiB, want 518 (H100, measured) and 520 (the default)", got[0].ContextReserveMiB, got[1].ContextReserveMiB)
	}
	if found[0].ContextReserveMiB != 0 {
		t.Error("OnCards changed the cards it was given")
	}
	if off := (ContextReserve{}).OnCards(found); off[0].ContextReserveMiB != 0 {
		t.Errorf("a reserve configured off publishes %d MiB, want 0 (the annotation is left off)", off[0].ContextReserveMiB)
	}
}

func TestContextReserveIsBounded(t *testing.T) {
	_, err := Load([]string{"--config", writeFile(t, "version: v1\nnodeName: n\ncontextReserve:\n  default: 5Gi\n  models:\n  - {match: \"\", reserve: 1Mi}\n  - {match: A30, reserve: -1Mi}\n")}, env(nil))
	for _, want := range []string{"contextReserve.default: 5Gi, want 0..4Gi", "contextReserve.models[0].match: empty", "contextReserve.models[1].reserve: -1Mi"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to name %q", err, want)
		}
	}
}

// The card API and the DRA driver's socket directories come from the file, the
// environment and flags like every other field, with the kubelet's directories as
// defaults.
func TestCardAPIAndDRADirectoriesComeFromEverySource(t *testing.T) {
	for _, tt := range []struct {
		name               string
		file               string
		args               []string
		env                map[string]string
		api, plugins, regs string
	}{
		{"the defaults are the device plugin and the kubelet's directories", "version: v1\nnodeName: n\n", nil, nil,
			CardAPIDevicePlugin, "/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry"},
		{"the file turns DRA on", "version: v1\nnodeName: n\ncardAPI: dra\ndraPluginDir: /data/kubelet/plugins\n", nil, nil,
			CardAPIDRA, "/data/kubelet/plugins", "/var/lib/kubelet/plugins_registry"},
		{"the environment overrides the file", "version: v1\nnodeName: n\ncardAPI: dra\n", nil,
			map[string]string{"TESSERA_DP_CARD_API": "device-plugin", "TESSERA_DP_DRA_REGISTRATION_DIR": "/data/kubelet/plugins_registry"},
			CardAPIDevicePlugin, "/var/lib/kubelet/plugins", "/data/kubelet/plugins_registry"},
		{"a flag overrides the environment", "version: v1\nnodeName: n\n", []string{"--card-api=dra", "--dra-plugin-dir=/x/plugins"},
			map[string]string{"TESSERA_DP_CARD_API": "device-plugin"}, CardAPIDRA, "/x/plugins", "/var/lib/kubelet/plugins_registry"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(append([]string{"--config", writeFile(t, tt.file)}, tt.args...), env(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			if c.CardAPI != tt.api || c.DRAPluginDir != tt.plugins || c.DRARegistrationDir != tt.regs {
				t.Errorf("cardAPI %q draPluginDir %q draRegistrationDir %q, want %q %q %q",
					c.CardAPI, c.DRAPluginDir, c.DRARegistrationDir, tt.api, tt.plugins, tt.regs)
			}
		})
	}
}
