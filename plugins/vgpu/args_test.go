package vgpu

import (
	"strings"
	"testing"

	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/api"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      framework.Arguments
		check   func(Args) bool
		wantErr string
	}{
		{"defaults weigh link quality once", nil, func(a Args) bool { return a.TopologyWeight == 1 }, ""},
		{"the topology weight is read as a number", framework.Arguments{argTopologyWeight: "2.5"}, func(a Args) bool { return a.TopologyWeight == 2.5 }, ""},
		{"a topology weight out of range keeps the default", framework.Arguments{argTopologyWeight: 50}, func(a Args) bool { return a.TopologyWeight == 1 },
			"argument vgpu.TopologyWeight: 50 (int): want a number in 0..10"},
		{"topology is a card policy", framework.Arguments{argCardPolicy: "topology"}, func(a Args) bool { return a.CardPolicy == api.PolicyTopology }, ""},
		{"topology is a node policy", framework.Arguments{argNodePolicy: "topology"}, func(a Args) bool { return a.NodePolicy == api.PolicyTopology }, ""},
		{"queues share cards by weight by default", nil, func(a Args) bool { return a.QueueShare }, ""},
		{"queue sharing can be turned off", framework.Arguments{argQueueShare: "false"}, func(a Args) bool { return !a.QueueShare }, ""},
		{"a queue-share value that is not a bool keeps the default", framework.Arguments{argQueueShare: "sometimes"}, func(a Args) bool { return a.QueueShare },
			"argument vgpu.QueueShare: sometimes (string): want true or false"},
		{"an unknown policy names the choices", framework.Arguments{argNodePolicy: "pack"}, func(a Args) bool { return a.NodePolicy == api.PolicyBinpack },
			"want binpack, spread or topology"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseArgs(tc.in)
			if !tc.check(a) {
				t.Fatalf("parsed %+v", a)
			}
			if (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}
