// Package pluginargs holds the vgpu scheduler plugin's arguments as they are written
// in volcano-scheduler.conf: the typed Args with their documented defaults, one table
// of keys that reads and checks them, and the reader that finds them in a conf. It
// stands beside the contract so that the plugin and the CLI (which links no Volcano
// package) read the arguments alike.
package pluginargs

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// Plugin is the name of the plugin whose arguments these are.
const Plugin = "vgpu"

// Argument keys in volcano-scheduler.conf.
const (
	KeyNodePolicy             = "vgpu.NodePolicy"
	KeyCardPolicy             = "vgpu.CardPolicy"
	KeyWeight                 = "vgpu.Weight"
	KeyTopologyWeight         = "vgpu.TopologyWeight"
	KeyMemoryOversubscription = "vgpu.MemoryOversubscription"
	KeyHeartbeatTimeout       = "vgpu.HeartbeatTimeout"
	KeyVolcanoCompat          = "vgpu.VolcanoCompat"
	KeyPendingTTL             = "vgpu.PendingTTL"
	KeyQueueShare             = "vgpu.QueueShare"
	KeyDRAReclaim             = "vgpu.DRAReclaim"
	KeyResourceNumber         = "vgpu.ResourceNumber"
	KeyResourceMemory         = "vgpu.ResourceMemory"
	KeyResourceMemoryPercent  = "vgpu.ResourceMemoryPercentage"
	KeyResourceCores          = "vgpu.ResourceCores"
)

// Args are the plugin's typed arguments.
type Args struct {
	// NodePolicy scores nodes: binpack (default), spread or topology.
	NodePolicy api.Policy
	// CardPolicy chooses cards within a node: binpack (default), spread or topology.
	// Never idle-only: a pod asks for that itself (api.HoldsIdleOnly reads it there).
	CardPolicy api.Policy
	// Weight multiplies the node score; 0 turns node ordering off.
	Weight float64
	// TopologyWeight scales the 0..100 link quality of a pod's multi-card
	// containers, added to the node score on nodes that publish a link matrix
	// (default 1: a node whose cards are NVSwitch-linked outranks a PCIe node of
	// equal load). 0 makes node scores link-blind; cards are still link-aware.
	TopologyWeight float64
	// MemoryOversubscription scales schedulable card memory, 1.0..4.0 (default 1.0).
	MemoryOversubscription float64
	// HeartbeatTimeout after which a node agent counts as gone; 0 disables the check.
	HeartbeatTimeout time.Duration
	// VolcanoCompat also writes Volcano's vgpu-ids-new/devices-to-allocate annotations,
	// so that nodes still running the HAMi volcano device plugin honour the choice.
	VolcanoCompat bool
	// PendingTTL bounds how long an assignment not yet seen in the informer cache
	// keeps its cards booked.
	PendingTTL time.Duration
	// QueueShare divides the cluster's card memory and compute among the queues by
	// weight (and each queue's vgpu-memory/vgpu-cores capability), and holds every
	// queue's vGPU tasks to its share (default true).
	QueueShare bool
	// DRAReclaim lets the plugin evict, once per session, DRA pods of queues above
	// their card share for a pending pod whose claims of vgpu.tessera.io wait on full
	// DRA nodes while its queue is below its share (default true; needs QueueShare).
	// Volcano's own reclaim never does this for claims.
	DRAReclaim bool
	Resources  api.ResourceNames
}

// Defaults are the documented defaults.
func Defaults() Args {
	return Args{
		NodePolicy:             api.PolicyBinpack,
		CardPolicy:             api.PolicyBinpack,
		Weight:                 5,
		TopologyWeight:         1,
		MemoryOversubscription: 1,
		HeartbeatTimeout:       90 * time.Second,
		PendingTTL:             10 * time.Minute,
		QueueShare:             true,
		DRAReclaim:             true,
		Resources:              api.DefaultResourceNames(),
	}
}

// key is one argument: its name, what it accepts (said when a value is refused), and
// set, which reads a value into the Args and reports false for one it refuses.
type key struct {
	name string
	want string
	set  func(a *Args, v any) bool
}

// keys are every argument, in the order their errors are reported.
var keys = []key{
	{KeyNodePolicy, "binpack, spread or topology", policy(func(a *Args) *api.Policy { return &a.NodePolicy })},
	{KeyCardPolicy, "binpack, spread or topology", policy(func(a *Args) *api.Policy { return &a.CardPolicy })},
	{KeyWeight, "a number in 0..1000", number(0, 1000, func(a *Args) *float64 { return &a.Weight })},
	{KeyTopologyWeight, "a number in 0..10", number(0, 10, func(a *Args) *float64 { return &a.TopologyWeight })},
	{KeyMemoryOversubscription, "a number in 1.0..4.0", number(1, 4, func(a *Args) *float64 { return &a.MemoryOversubscription })},
	{KeyHeartbeatTimeout, `a duration such as "90s" (0 disables)`, duration(0, func(a *Args) *time.Duration { return &a.HeartbeatTimeout })},
	{KeyPendingTTL, `a duration of at least "1m"`, duration(time.Minute, func(a *Args) *time.Duration { return &a.PendingTTL })},
	{KeyVolcanoCompat, "true or false", boolean(func(a *Args) *bool { return &a.VolcanoCompat })},
	{KeyQueueShare, "true or false", boolean(func(a *Args) *bool { return &a.QueueShare })},
	{KeyDRAReclaim, "true or false", boolean(func(a *Args) *bool { return &a.DRAReclaim })},
	{KeyResourceNumber, "a resource name", resource(func(a *Args) *corev1.ResourceName { return &a.Resources.Number })},
	{KeyResourceMemory, "a resource name", resource(func(a *Args) *corev1.ResourceName { return &a.Resources.Memory })},
	{KeyResourceMemoryPercent, "a resource name", resource(func(a *Args) *corev1.ResourceName { return &a.Resources.MemoryPercentage })},
	{KeyResourceCores, "a resource name", resource(func(a *Args) *corev1.ResourceName { return &a.Resources.Cores })},
}

// Parse reads the arguments over the defaults. A refused value keeps that argument's
// default and is reported in the returned error, which joins every problem in the
// order of the keys, each naming the argument and its value as written: a typo never
// stops the scheduler.
func Parse(in map[string]any) (Args, error) {
	a := Defaults()
	var errs []error
	for _, k := range keys {
		if v, ok := in[k.name]; ok && !k.set(&a, v) {
			errs = append(errs, fmt.Errorf("%w: argument %s: %v (%T): want %s", api.ErrInvalid, k.name, v, v, k.want))
		}
	}
	return a, errors.Join(errs...)
}

func policy(field func(*Args) *api.Policy) func(*Args, any) bool {
	return func(a *Args, v any) bool {
		p, err := api.ParsePolicy(fmt.Sprint(v))
		if err == nil {
			*field(a) = p
		}
		return err == nil
	}
}

func number(lo, hi float64, field func(*Args) *float64) func(*Args, any) bool {
	return func(a *Args, v any) bool {
		f, ok := toFloat(v)
		ok = ok && f >= lo && f <= hi
		if ok {
			*field(a) = f
		}
		return ok
	}
}

func duration(least time.Duration, field func(*Args) *time.Duration) func(*Args, any) bool {
	return func(a *Args, v any) bool {
		d, ok := toDuration(v)
		ok = ok && d >= least
		if ok {
			*field(a) = d
		}
		return ok
	}
}

func boolean(field func(*Args) *bool) func(*Args, any) bool {
	return func(a *Args, v any) bool {
		b, ok := toBool(v)
		if ok {
			*field(a) = b
		}
		return ok
	}
}

func resource(field func(*Args) *corev1.ResourceName) func(*Args, any) bool {
	return func(a *Args, v any) bool {
		s, ok := v.(string)
		ok = ok && s != ""
		if ok {
			*field(a) = corev1.ResourceName(s)
		}
		return ok
	}
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	}
	return 0, false
}

func toDuration(v any) (time.Duration, bool) {
	switch x := v.(type) {
	case string:
		d, err := time.ParseDuration(x)
		return d, err == nil
	case int:
		if x == 0 {
			return 0, true
		}
	}
	return 0, false
}

func toBool(v any) (bool, bool) {
	switch x := v.(type) {
	case bool:
		return x, true
	case string:
		b, err := strconv.ParseBool(x)
		return b, err == nil
	}
	return false, false
}

// Request reads a pod's vGPU demand and options with these arguments' defaults,
// exactly as the plugin's predicate sees it (without the gang size, which needs the
// session). The CLI's explain command calls it.
func (a Args) Request(pod *corev1.Pod) (*placement.Request, error) {
	cs, err := a.Resources.ContainerRequests(pod)
	if err != nil {
		return nil, err
	}
	return a.RequestFor(cs, pod.Annotations)
}

// RequestFor is the placement request of containers cs of a pod with these annotations:
// its options, and the plugin's policies unless the pod overrides them.
func (a Args) RequestFor(cs []api.ContainerRequest, annotations map[string]string) (*placement.Request, error) {
	opts, err := api.ParsePodOptions(annotations)
	if err != nil {
		return nil, err
	}
	r := &placement.Request{Containers: cs, Options: opts, CardPolicy: a.CardPolicy, NodePolicy: a.NodePolicy,
		TopologyWeight: a.TopologyWeight}
	if opts.CardPolicy != "" {
		r.CardPolicy = opts.CardPolicy
	}
	if opts.NodePolicy != "" {
		r.NodePolicy = opts.NodePolicy
	}
	return r, nil
}
