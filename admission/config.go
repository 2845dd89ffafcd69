// Package admission is Tessera's optional admission webhook: it routes vGPU pods made
// outside VolcanoJobs (Deployments, StatefulSets, KServe, Kubeflow jobs) to Volcano's
// scheduler and a queue, refuses malformed vGPU requests and annotations at create time
// with the scheduler's own message, and holds namespaces and queues to the QoS classes
// and card shares an administrator allows. It also gives each vGPU pod the
// memory-backed volume its containers keep their accounting regions on (region.go).
// With QueueGate on, it creates vGPU pods behind a scheduling gate that the scheduler
// lifts once their queue's card share admits them (gate.go).
// The decisions are pure functions of the pod, its namespace's default queue and the
// Config (decide.go); review.go is the thin adapter over admission/v1 AdmissionReview,
// tls.go the serving certificate.
package admission

import (
	"errors"
	"fmt"
	"os"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/tessera-gpu/tessera/api"
)

// ConfigVersion is the only version of the configuration file this build reads.
const ConfigVersion = "v1"

// Config is the webhook's configuration file (docs/admission.md documents every field).
type Config struct {
	// Version must be ConfigVersion.
	Version string `json:"version"`
	// SchedulerName is set on vGPU pods that name no scheduler or the default one.
	SchedulerName string `json:"schedulerName"`
	// SchedulerNames are the names of schedulers that place vGPU pods (Tessera's
	// vc-scheduler's --scheduler-name values); SchedulerName is always one of them. A
	// vGPU pod naming any other scheduler is refused: it would be bound without cards.
	SchedulerNames []string `json:"schedulerNames,omitempty"`
	// DefaultQueue is the queue of routed pods whose pod and namespace name none.
	DefaultQueue string `json:"defaultQueue"`
	// Resources are the extended resource names that mark a vGPU request; empty names
	// take Volcano's (the scheduler's vgpu.Resource* arguments must match).
	Resources Resources `json:"resources,omitempty"`
	// Limits restrict the QoS classes and card shares of vGPU pods.
	Limits []Limit `json:"limits,omitempty"`
	// QueueGate puts the scheduling gate QueueShareGate on every vGPU pod created, for
	// the scheduler to remove once the pod's queue has room in its card share (off by
	// default; docs/queues.md). A gated pod is not reported Unschedulable, so cluster
	// autoscalers add no node for a pod only its queue's share holds back.
	QueueGate bool `json:"queueGate,omitempty"`
	// DRAConversion rewrites the vGPU requests of pods in opted-in namespaces into
	// ResourceClaims of the DRA driver, so existing jobs run on DRA nodes unchanged
	// (off by default; draconvert.go, docs/dra.md).
	DRAConversion DRAConversion `json:"draConversion,omitempty"`
}

// Resources are the resource names of a vGPU request, as in the scheduler's arguments.
type Resources struct {
	Number           string `json:"number,omitempty"`
	Memory           string `json:"memory,omitempty"`
	MemoryPercentage string `json:"memoryPercentage,omitempty"`
	Cores            string `json:"cores,omitempty"`
}

// Limit is one administrator's rule. It applies to the vGPU pods of one namespace, of
// one queue, or (naming neither) of every namespace; a pod must pass every rule that
// applies to it. Unset fields allow anything.
type Limit struct {
	Namespace string `json:"namespace,omitempty"`
	Queue     string `json:"queue,omitempty"`
	// AllowedQoS lists the classes pods may ask for (tessera.io/qos; absent means
	// fixed-share); empty allows all three.
	AllowedQoS []api.QoSClass `json:"allowedQoS,omitempty"`
	// MaxCards bounds volcano.sh/vgpu-number per container.
	MaxCards int `json:"maxCards,omitempty"`
	// MaxCores bounds volcano.sh/vgpu-cores per card, 1..100. A container that sets no
	// cores (or 0) runs uncapped on its cards and counts as 100.
	MaxCores int `json:"maxCores,omitempty"`
	// MaxMemoryPercent bounds volcano.sh/vgpu-memory-percentage per card, 1..100; a
	// container that sets no memory asks for the whole card (100%).
	MaxMemoryPercent int `json:"maxMemoryPercent,omitempty"`
	// MaxMemoryMiB bounds volcano.sh/vgpu-memory per card. A limit in one unit cannot
	// be checked against a request in the other without knowing the card, so a rule
	// that sets only one of the two refuses requests written in the other.
	MaxMemoryMiB int64 `json:"maxMemoryMiB,omitempty"`
}

// scope names the pods a rule applies to, for messages.
func (l *Limit) scope() string {
	switch {
	case l.Namespace != "":
		return "namespace " + l.Namespace
	case l.Queue != "":
		return "queue " + l.Queue
	}
	return "the cluster"
}

// DefaultConfig is what an empty file means: route to "volcano" and queue "default",
// Volcano's resource names, no limits.
func DefaultConfig() Config {
	return Config{Version: ConfigVersion, SchedulerName: "volcano", DefaultQueue: "default",
		DRAConversion: DRAConversion{DeviceClassName: api.DRADriver, MinMemoryMiB: DefaultDRAMinMemoryMiB}}
}

// LoadConfig reads and checks the file at path; "" is the default configuration.
func LoadConfig(path string) (*Config, error) {
	if path == "" {
		c := DefaultConfig()
		return &c, c.Validate()
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes a configuration over the defaults, refusing unknown fields, and
// validates it.
func ParseConfig(b []byte) (*Config, error) {
	c := DefaultConfig()
	c.Version = ""
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", api.ErrInvalid, err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate reports every problem, each naming the field and its value as written.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("%w: %s: %v: want %s", api.ErrInvalid, field, v, want))
	}
	if c.Version != ConfigVersion {
		errs = append(errs, fmt.Errorf("%w: version: %q: this build reads %q", api.ErrUnsupportedVersion, c.Version, ConfigVersion))
	}
	if len(validation.IsDNS1123Subdomain(c.SchedulerName)) > 0 {
		bad("schedulerName", fmt.Sprintf("%q", c.SchedulerName), "a scheduler name (DNS subdomain)")
	}
	for i, n := range c.SchedulerNames {
		if len(validation.IsDNS1123Subdomain(n)) > 0 {
			bad(fmt.Sprintf("schedulerNames[%d]", i), fmt.Sprintf("%q", n), "a scheduler name (DNS subdomain)")
		}
	}
	if len(c.SchedulerNames) > 0 && !slices.Contains(c.SchedulerNames, c.SchedulerName) {
		bad("schedulerName", fmt.Sprintf("%q", c.SchedulerName), fmt.Sprintf("one of schedulerNames %v", c.SchedulerNames))
	}
	if len(validation.IsDNS1123Subdomain(c.DefaultQueue)) > 0 {
		bad("defaultQueue", fmt.Sprintf("%q", c.DefaultQueue), "a queue name (DNS subdomain)")
	}
	for _, r := range []struct{ field, name string }{{"resources.number", c.Resources.Number},
		{"resources.memory", c.Resources.Memory}, {"resources.memoryPercentage", c.Resources.MemoryPercentage},
		{"resources.cores", c.Resources.Cores}} {
		if r.name != "" && len(validation.IsQualifiedName(r.name)) > 0 {
			bad(r.field, fmt.Sprintf("%q", r.name), "an extended resource name such as volcano.sh/vgpu-number")
		}
	}
	for i := range c.Limits {
		errs = append(errs, c.Limits[i].validate(fmt.Sprintf("limits[%d]", i))...)
	}
	errs = append(errs, c.DRAConversion.validate("draConversion")...)
	return errors.Join(errs...)
}

func (l *Limit) validate(at string) []error {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("%w: %s.%s: %v: want %s", api.ErrInvalid, at, field, v, want))
	}
	if l.Namespace != "" && l.Queue != "" {
		errs = append(errs, fmt.Errorf("%w: %s: names namespace %q and queue %q: a rule applies to one namespace, one queue, or (naming neither) every pod",
			api.ErrInvalid, at, l.Namespace, l.Queue))
	}
	if l.Namespace != "" && len(validation.IsDNS1123Label(l.Namespace)) > 0 {
		bad("namespace", fmt.Sprintf("%q", l.Namespace), "a namespace name")
	}
	if l.Queue != "" && len(validation.IsDNS1123Subdomain(l.Queue)) > 0 {
		bad("queue", fmt.Sprintf("%q", l.Queue), "a queue name")
	}
	for j, q := range l.AllowedQoS {
		if _, err := api.ParseQoSClass(string(q)); err != nil || q == "" {
			bad(fmt.Sprintf("allowedQoS[%d]", j), fmt.Sprintf("%q", q), "best-effort, fixed-share or burst-share")
		}
	}
	if l.MaxCards < 0 || l.MaxCards > 64 {
		bad("maxCards", l.MaxCards, "1..64 (0 or unset: no limit)")
	}
	if l.MaxCores < 0 || l.MaxCores > 100 {
		bad("maxCores", l.MaxCores, "1..100 (0 or unset: no limit)")
	}
	if l.MaxMemoryPercent < 0 || l.MaxMemoryPercent > 100 {
		bad("maxMemoryPercent", l.MaxMemoryPercent, "1..100 (0 or unset: no limit)")
	}
	if l.MaxMemoryMiB < 0 {
		bad("maxMemoryMiB", l.MaxMemoryMiB, "a positive number of MiB (0 or unset: no limit)")
	}
	return errs
}

// ResourceNames are the configured names over Volcano's defaults.
func (c *Config) ResourceNames() api.ResourceNames {
	n := api.DefaultResourceNames()
	for _, f := range []struct {
		v  string
		to *corev1.ResourceName
	}{{c.Resources.Number, &n.Number}, {c.Resources.Memory, &n.Memory},
		{c.Resources.MemoryPercentage, &n.MemoryPercentage}, {c.Resources.Cores, &n.Cores}} {
		if f.v != "" {
			*f.to = corev1.ResourceName(f.v)
		}
	}
	return n
}

// acceptedSchedulers are the scheduler names a vGPU pod may carry.
func (c *Config) acceptedSchedulers() []string {
	if len(c.SchedulerNames) > 0 {
		return c.SchedulerNames
	}
	return []string{c.SchedulerName}
}
