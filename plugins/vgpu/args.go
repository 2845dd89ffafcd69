package vgpu

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/api"
)

// Argument keys in volcano-scheduler.conf.
const (
	argNodePolicy       = "vgpu.NodePolicy"
	argCardPolicy       = "vgpu.CardPolicy"
	argWeight           = "vgpu.Weight"
	argTopologyWeight   = "vgpu.TopologyWeight"
	argOversubscription = "vgpu.MemoryOversubscription"
	argHeartbeatTimeout = "vgpu.HeartbeatTimeout"
	argVolcanoCompat    = "vgpu.VolcanoCompat"
	argPendingTTL       = "vgpu.PendingTTL"
	argQueueShare       = "vgpu.QueueShare"
	argResourceNumber   = "vgpu.ResourceNumber"
	argResourceMemory   = "vgpu.ResourceMemory"
	argResourceMemPct   = "vgpu.ResourceMemoryPercentage"
	argResourceCores    = "vgpu.ResourceCores"
)

// Args are the plugin's typed arguments.
type Args struct {
	// NodePolicy scores nodes: binpack (default), spread or topology.
	NodePolicy api.Policy
	// CardPolicy chooses cards within a node: binpack (default), spread or topology.
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
	Resources  api.ResourceNames
}

// DefaultArgs are the documented defaults.
func DefaultArgs() Args {
	return Args{
		NodePolicy:             api.PolicyBinpack,
		CardPolicy:             api.PolicyBinpack,
		Weight:                 5,
		TopologyWeight:         1,
		MemoryOversubscription: 1,
		HeartbeatTimeout:       90 * time.Second,
		PendingTTL:             10 * time.Minute,
		QueueShare:             true,
		Resources:              api.DefaultResourceNames(),
	}
}

// ParseArgs reads the arguments over the defaults. A bad value is reported in the
// returned error, which joins every problem with the argument's name, and that one
// argument keeps its default: a typo never stops the scheduler.
func ParseArgs(in framework.Arguments) (Args, error) {
	a := DefaultArgs()
	var errs []error
	bad := func(key string, v any, want string) {
		errs = append(errs, fmt.Errorf("%w: argument %s: %v (%T): want %s", api.ErrInvalid, key, v, v, want))
	}
	if v, ok := in[argNodePolicy]; ok {
		if p, err := api.ParsePolicy(fmt.Sprint(v)); err == nil {
			a.NodePolicy = p
		} else {
			bad(argNodePolicy, v, "binpack, spread or topology")
		}
	}
	if v, ok := in[argCardPolicy]; ok {
		if p, err := api.ParsePolicy(fmt.Sprint(v)); err == nil {
			a.CardPolicy = p
		} else {
			bad(argCardPolicy, v, "binpack, spread or topology")
		}
	}
	if v, ok := in[argWeight]; ok {
		if f, ok := toFloat(v); ok && f >= 0 && f <= 1000 {
			a.Weight = f
		} else {
			bad(argWeight, v, "a number in 0..1000")
		}
	}
	if v, ok := in[argTopologyWeight]; ok {
		if f, ok := toFloat(v); ok && f >= 0 && f <= 10 {
			a.TopologyWeight = f
		} else {
			bad(argTopologyWeight, v, "a number in 0..10")
		}
	}
	if v, ok := in[argOversubscription]; ok {
		if f, ok := toFloat(v); ok && f >= 1 && f <= 4 {
			a.MemoryOversubscription = f
		} else {
			bad(argOversubscription, v, "a number in 1.0..4.0")
		}
	}
	if v, ok := in[argHeartbeatTimeout]; ok {
		if d, ok := toDuration(v); ok && d >= 0 {
			a.HeartbeatTimeout = d
		} else {
			bad(argHeartbeatTimeout, v, `a duration such as "90s" (0 disables)`)
		}
	}
	if v, ok := in[argPendingTTL]; ok {
		if d, ok := toDuration(v); ok && d >= time.Minute {
			a.PendingTTL = d
		} else {
			bad(argPendingTTL, v, `a duration of at least "1m"`)
		}
	}
	if v, ok := in[argVolcanoCompat]; ok {
		if b, ok := toBool(v); ok {
			a.VolcanoCompat = b
		} else {
			bad(argVolcanoCompat, v, "true or false")
		}
	}
	if v, ok := in[argQueueShare]; ok {
		if b, ok := toBool(v); ok {
			a.QueueShare = b
		} else {
			bad(argQueueShare, v, "true or false")
		}
	}
	for key, dst := range map[string]*corev1.ResourceName{argResourceNumber: &a.Resources.Number,
		argResourceMemory: &a.Resources.Memory, argResourceMemPct: &a.Resources.MemoryPercentage, argResourceCores: &a.Resources.Cores} {
		if v, ok := in[key]; ok {
			if s, ok := v.(string); ok && s != "" {
				*dst = corev1.ResourceName(s)
			} else {
				bad(key, v, "a resource name")
			}
		}
	}
	return a, errors.Join(errs...)
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
