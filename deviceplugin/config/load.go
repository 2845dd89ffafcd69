package config

import (
	"errors"
	goflag "flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// EnvPrefix starts every environment variable the agent reads (besides NODE_NAME).
const EnvPrefix = "TESSERA_DP_"

// field is one setting reachable from a flag and an environment variable.
type field struct {
	flag  string
	usage string
	set   func(c *Config, v string) error
}

func str(p func(c *Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *p(c) = v; return nil }
}

func dur(p func(c *Config) *metav1.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		*p(c) = metav1.Duration{Duration: d}
		return err
	}
}

var fields = []field{
	{"node-name", "node this agent runs on (also NODE_NAME)", str(func(c *Config) *string { return &c.NodeName })},
	{"kubeconfig", "kubeconfig path; empty means in-cluster", str(func(c *Config) *string { return &c.Kubeconfig })},
	{"resource-name", "extended resource advertised to the kubelet", str(func(c *Config) *string { return &c.ResourceName })},
	{"shares-per-card", "kubelet slots (containers at once) per card", func(c *Config, v string) (err error) {
		c.SharesPerCard, err = strconv.Atoi(v)
		return err
	}},
	{"device-plugin-dir", "kubelet device plugin directory", str(func(c *Config) *string { return &c.DevicePluginDir })},
	{"plugin-socket", "socket file name inside the device plugin directory", str(func(c *Config) *string { return &c.PluginSocket })},
	{"pod-resources-socket", "kubelet PodResources socket", str(func(c *Config) *string { return &c.PodResourcesSocket })},
	{"kubelet-pods-dir", "kubelet's pods directory, where the agent reads each container's region volume", str(func(c *Config) *string { return &c.KubeletPodsDir })},
	{"state-dir", "host directory for per-container directories", str(func(c *Config) *string { return &c.StateDir })},
	{"hook-library", "host path of libvgpu.so", str(func(c *Config) *string { return &c.HookLibrary })},
	{"preload", "how the hook library is preloaded: ld-so-preload or env", str(func(c *Config) *string { return &c.Preload })},
	{"container-dir", "where the container finds its limits file and region; must be " + ContainerPath, str(func(c *Config) *string { return &c.ContainerDir })},
	{"vgpu-log-level", "vgpu-core log level: error, warn, info or debug", str(func(c *Config) *string { return &c.VGPULogLevel })},
	{"heartbeat-interval", "node heartbeat annotation interval", dur(func(c *Config) *metav1.Duration { return &c.HeartbeatInterval })},
	{"mig-repartition", "let the scheduler re-partition this node's idle MIG cards (tessera.io/mig-plan)", func(c *Config, v string) (err error) {
		c.MIGRepartition, err = strconv.ParseBool(v)
		return err
	}},
	{"volcano-compat", "also write volcano.sh/node-vgpu-register", func(c *Config, v string) (err error) {
		c.VolcanoCompat, err = strconv.ParseBool(v)
		return err
	}},
	{"metrics-address", "Prometheus listen address; empty disables", str(func(c *Config) *string { return &c.MetricsAddress })},
	{"identify-timeout", "how long to wait for the informer to show a pod the kubelet admits", dur(func(c *Config) *metav1.Duration { return &c.IdentifyTimeout })},
	{"gc-interval", "how often directories of gone pods are looked for", dur(func(c *Config) *metav1.Duration { return &c.GCInterval })},
	{"gc-grace-period", "how long a pod must be gone before its directories are removed", dur(func(c *Config) *metav1.Duration { return &c.GCGracePeriod })},
	{"health-check-interval", "how often every card is queried", dur(func(c *Config) *metav1.Duration { return &c.Health.CheckInterval })},
	{"health-recover-after", "quiet time after a fatal event before a card is healthy again", dur(func(c *Config) *metav1.Duration { return &c.Health.RecoverAfter })},
	{"uninstall-daemonset", "namespace/name of the agent's DaemonSet: once it is deleted, host files are removed at exit if no pod holds the node's slots", str(func(c *Config) *string { return &c.UninstallDaemonSet })},
	{"assignment-keys", "namespace/name of the ConfigMap of the scheduler's assignment verification keys; empty: signatures not checked", str(func(c *Config) *string { return &c.AssignmentKeys })},
	{"unsigned-assignments", "with assignment-keys set, what to do with an unsigned assignment: refuse, or allow (while migrating from Volcano's deviceshare)", str(func(c *Config) *string { return &c.UnsignedAssignments })},
	{"memory-guard", "the node-side memory guard: off, report or enforce (needs the host's pid namespace)", str(func(c *Config) *string { return &c.MemoryGuard.Mode })},
	{"memory-guard-interval", "time between two memory guard checks of every card", dur(func(c *Config) *metav1.Duration { return &c.MemoryGuard.Interval })},
	{"other-gpu-plugins", "beside another GPU device plugin on the node: refuse (serve nothing) or share", str(func(c *Config) *string { return &c.OtherGPUPlugins })},
	{"card-handoff", "how cards reach a container: env (NVIDIA_VISIBLE_DEVICES), cdi (CDI devices) or both", str(func(c *Config) *string { return &c.CardHandoff })},
	{"cdi-card-kind", "CDI kind whose devices, named by card UUID, are the cards", str(func(c *Config) *string { return &c.CDICardKind })},
	{"cdi-spec-dir", "where the agent writes its CDI spec for the hook library", str(func(c *Config) *string { return &c.CDISpecDir })},
	{"card-api", "how the kubelet gets the cards: device-plugin (vGPU slots) or dra (the DRA driver vgpu.tessera.io); never both on one node", str(func(c *Config) *string { return &c.CardAPI })},
	{"dra-plugin-dir", "kubelet's DRA plugin directory; with card-api dra the driver's socket is in its vgpu.tessera.io subdirectory", str(func(c *Config) *string { return &c.DRAPluginDir })},
	{"dra-registration-dir", "kubelet's plugin registration directory (card-api dra)", str(func(c *Config) *string { return &c.DRARegistrationDir })},
	{"slot-topology", "NUMA nodes on the kubelet's slots: none or numa", str(func(c *Config) *string { return &c.SlotTopology })},
	{"health-fatal-xids", "comma-separated XIDs that mark a card unhealthy", func(c *Config, v string) error {
		c.Health.FatalXIDs = nil
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			x, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return err
			}
			c.Health.FatalXIDs = append(c.Health.FatalXIDs, x)
		}
		return nil
	}},
}

func envName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Load builds the configuration from defaults, the file (--config or TESSERA_DP_CONFIG),
// the environment and the flags in args, then validates it. Flags of extra (klog's,
// for instance) are accepted and set as well.
// With -h or --help it returns pflag.ErrHelp and prints nothing: the caller prints Usage.
func Load(args []string, getenv func(string) (string, bool), extra ...*goflag.FlagSet) (*Config, error) {
	fs, configPath, values := flagSet(extra)
	if err := fs.Parse(args); errors.Is(err, pflag.ErrHelp) {
		return nil, err
	} else if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	c := Default()
	path := *configPath
	if v, ok := getenv(EnvPrefix + "CONFIG"); ok && !fs.Changed("config") {
		path = v
	}
	if path != "" {
		if err := loadFile(c, path); err != nil {
			return nil, err
		}
	}
	if v, ok := getenv("NODE_NAME"); ok {
		c.NodeName = v
	}
	for _, f := range fields {
		if v, ok := getenv(envName(f.flag)); ok {
			if err := f.set(c, v); err != nil {
				return nil, fmt.Errorf("%w: env %s=%q: %v", ErrInvalid, envName(f.flag), v, err)
			}
		}
	}
	for i, f := range fields {
		if fs.Changed(f.flag) {
			if err := f.set(c, *values[i]); err != nil {
				return nil, fmt.Errorf("%w: flag --%s=%q: %v", ErrInvalid, f.flag, *values[i], err)
			}
		}
	}
	return c, c.Validate()
}

// Usage is the agent's flag summary (with the flags of extra), for --help.
func Usage(extra ...*goflag.FlagSet) string {
	fs, _, _ := flagSet(extra)
	return "Usage: vgpu-device-plugin [flags]\n\nFlags (each also settable by its environment variable or the --config file):\n" + fs.FlagUsages()
}

func flagSet(extra []*goflag.FlagSet) (fs *pflag.FlagSet, configPath *string, values []*string) {
	fs = pflag.NewFlagSet("vgpu-device-plugin", pflag.ContinueOnError)
	fs.Usage = func() {} // Load's caller reports errors and prints Usage on --help
	for _, x := range extra {
		fs.AddGoFlagSet(x)
	}
	configPath = fs.String("config", "", "versioned config file (env "+EnvPrefix+"CONFIG)")
	values = make([]*string, len(fields))
	for i, f := range fields {
		values[i] = fs.String(f.flag, "", f.usage+" (env "+envName(f.flag)+")")
	}
	return fs, configPath, values
}

// loadFile overlays the file on c. The version is checked first, so a newer file is
// reported as such rather than as unknown fields.
func loadFile(c *Config, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: read %s: %v", ErrInvalid, path, err)
	}
	var head struct {
		Version string `json:"version"`
	}
	if err := yaml.Unmarshal(b, &head); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, path, err)
	}
	if head.Version != Version {
		return fmt.Errorf("%w: %s: version %q, this build reads %q", ErrInvalid, path, head.Version, Version)
	}
	if err := yaml.UnmarshalStrict(b, c); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, path, err)
	}
	return nil
}
