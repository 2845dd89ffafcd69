package pluginargs

import (
	"errors"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      map[string]any
		check   func(Args) bool
		wantErr string
	}{
		{"defaults weigh link quality once", nil, func(a Args) bool { return a.TopologyWeight == 1 }, ""},
		{"the topology weight is read as a number", map[string]any{KeyTopologyWeight: "2.5"}, func(a Args) bool { return a.TopologyWeight == 2.5 }, ""},
		{"a topology weight out of range keeps the default", map[string]any{KeyTopologyWeight: 50}, func(a Args) bool { return a.TopologyWeight == 1 },
			"argument vgpu.TopologyWeight: 50 (int): want a number in 0..10"},
		{"topology is a card policy", map[string]any{KeyCardPolicy: "topology"}, func(a Args) bool { return a.CardPolicy == api.PolicyTopology }, ""},
		{"topology is a node policy", map[string]any{KeyNodePolicy: "topology"}, func(a Args) bool { return a.NodePolicy == api.PolicyTopology }, ""},
		{"queues share cards by weight by default", nil, func(a Args) bool { return a.QueueShare }, ""},
		{"queue sharing can be turned off", map[string]any{KeyQueueShare: "false"}, func(a Args) bool { return !a.QueueShare }, ""},
		{"a queue-share value that is not a bool keeps the default", map[string]any{KeyQueueShare: "sometimes"}, func(a Args) bool { return a.QueueShare },
			"argument vgpu.QueueShare: sometimes (string): want true or false"},
		{"claims are reclaimed for by default", nil, func(a Args) bool { return a.DRAReclaim }, ""},
		{"reclaiming for claims can be turned off", map[string]any{KeyDRAReclaim: false}, func(a Args) bool { return !a.DRAReclaim }, ""},
		{"a DRA-reclaim value that is not a bool keeps the default", map[string]any{KeyDRAReclaim: "never"}, func(a Args) bool { return a.DRAReclaim },
			"argument vgpu.DRAReclaim: never (string): want true or false"},
		{"an unknown policy names the choices", map[string]any{KeyNodePolicy: "pack"}, func(a Args) bool { return a.NodePolicy == api.PolicyBinpack },
			"want binpack, spread or topology"},
		// Every vGPU pod holding its cards alone would end sharing; and the book reads
		// idle-only off each placed pod's own annotation.
		{"idle-only is a pod's choice, not a default", map[string]any{KeyCardPolicy: "idle-only"}, func(a Args) bool { return a.CardPolicy == api.PolicyBinpack },
			"argument vgpu.CardPolicy: idle-only (string): want binpack, spread or topology"},
		{"a pending TTL under a minute keeps the default", map[string]any{KeyPendingTTL: "30s"}, func(a Args) bool { return a.PendingTTL == Defaults().PendingTTL },
			`argument vgpu.PendingTTL: 30s (string): want a duration of at least "1m"`},
		{"a zero heartbeat timeout turns the check off", map[string]any{KeyHeartbeatTimeout: 0}, func(a Args) bool { return a.HeartbeatTimeout == 0 }, ""},
		{"a resource can be renamed", map[string]any{KeyResourceCores: "example.com/cores"}, func(a Args) bool { return a.Resources.Cores == "example.com/cores" }, ""},
		{"an empty resource name keeps the default", map[string]any{KeyResourceMemory: ""}, func(a Args) bool { return a.Resources.Memory == api.DefaultResourceNames().Memory },
			"argument vgpu.ResourceMemory:  (string): want a resource name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Parse(tc.in)
			if !tc.check(a) {
				t.Fatalf("parsed %+v", a)
			}
			if (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestParseReportsEveryRefusalInKeyOrder(t *testing.T) {
	in := map[string]any{KeyResourceCores: 7, KeyResourceNumber: 3, KeyWeight: -1, KeyNodePolicy: "pack", KeyQueueShare: "maybe"}
	for range 20 { // map order must not leak into the message
		_, err := Parse(in)
		if !errors.Is(err, api.ErrInvalid) {
			t.Fatalf("error %v does not wrap api.ErrInvalid", err)
		}
		got := err.Error()
		last := -1
		for _, k := range []string{KeyNodePolicy, KeyWeight, KeyQueueShare, KeyResourceNumber, KeyResourceCores} {
			i := strings.Index(got, "argument "+k+":")
			if i < last {
				t.Fatalf("%s out of order in %q", k, got)
			}
			last = i
		}
	}
}

func TestFromConf(t *testing.T) {
	if _, err := FromConf("tiers: [{plugins: [{name: gang}]}]"); !errors.Is(err, ErrNotEnabled) {
		t.Errorf("a conf without vgpu: %v, want ErrNotEnabled", err)
	}
	a, err := FromConf("tiers: [{plugins: [{name: vgpu, arguments: {vgpu.Weight: -3, vgpu.CardPolicy: spread}}]}]")
	var bad *InvalidError
	if !errors.As(err, &bad) || a.Weight != 5 || a.CardPolicy != api.PolicySpread {
		t.Errorf("a bad argument among good ones: err %v, args %+v (want the default weight 5 and the spread card policy)", err, a)
	}
	if _, err := FromConf("tiers: ["); err == nil || errors.As(err, &bad) {
		t.Errorf("an unreadable conf: %v", err)
	}
}
