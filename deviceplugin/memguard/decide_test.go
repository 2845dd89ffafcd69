package memguard

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

const (
	mib  = uint64(1) << 20
	gib  = uint64(1) << 30
	podB = types.UID("11111111-2222-4333-8444-555555555555")
	podC = types.UID("99999999-2222-4333-8444-555555555555")
)

func TestJudge(t *testing.T) {
	policy := Policy{ContextAllowance: 512 * mib, CountedProcesses: 2}
	limits := map[types.UID]map[string]uint64{
		podA: {"GPU-0": 4 * gib},
		podB: {"GPU-0": 2 * gib, "GPU-1": 2 * gib},
	}
	cases := []struct {
		name        string
		cards       []Card
		wantVictims map[Key][]int
		unmanaged   map[string]uint64
		unknown     int
	}{
		{name: "within the limit and the allowance",
			cards: []Card{{UUID: "GPU-0", Processes: []Process{{PID: 10, UsedBytes: 4*gib + 500*mib, Pod: podA}}}}},
		{name: "over by more than one context: the one process goes",
			cards:       []Card{{UUID: "GPU-0", Processes: []Process{{PID: 10, UsedBytes: 5 * gib, Pod: podA}}}},
			wantVictims: map[Key][]int{{podA, "GPU-0"}: {10}}},
		{name: "largest first, fewest that bring it back",
			cards: []Card{{UUID: "GPU-0", Processes: []Process{
				{PID: 10, UsedBytes: 1 * gib, Pod: podA}, {PID: 11, UsedBytes: 3 * gib, Pod: podA}, {PID: 12, UsedBytes: 2 * gib, Pod: podA}}}},
			wantVictims: map[Key][]int{{podA, "GPU-0"}: {11}}},
		{name: "more processes do not widen the margin past the cap",
			cards: []Card{{UUID: "GPU-0", Processes: []Process{
				{PID: 20, UsedBytes: 1400 * mib, Pod: podB}, {PID: 21, UsedBytes: 1400 * mib, Pod: podB},
				{PID: 22, UsedBytes: 1400 * mib, Pod: podB}, {PID: 23, UsedBytes: 1400 * mib, Pod: podB}}}},
			// 5600 MiB against 2048 + 2 × 512 = 3072 (four processes, two counted): two must
			// go, as one leaves 4200.
			wantVictims: map[Key][]int{{podB, "GPU-0"}: {20, 21}}},
		{name: "a card the pod was not given allows nothing, not even a context",
			cards:       []Card{{UUID: "GPU-1", Processes: []Process{{PID: 30, UsedBytes: 300 * mib, Pod: podA}}}},
			wantVictims: map[Key][]int{{podA, "GPU-1"}: {30}}},
		{name: "pods without an assignment here and host processes are reported, never stopped",
			cards:     []Card{{UUID: "GPU-0", Processes: []Process{{PID: 40, UsedBytes: 70 * gib, Pod: podC}, {PID: 41, UsedBytes: 1 * gib}}}},
			unmanaged: map[string]uint64{"GPU-0": 71 * gib}},
		{name: "memory NVML cannot tell is never judged",
			cards:   []Card{{UUID: "GPU-0", Processes: []Process{{PID: 10, UsedBytes: NotAvailable, Pod: podA}}}},
			unknown: 1},
		{name: "one pod over on one card, its neighbour within",
			cards: []Card{{UUID: "GPU-0", Processes: []Process{{PID: 10, UsedBytes: 9 * gib, Pod: podA}, {PID: 20, UsedBytes: 2 * gib, Pod: podB}}},
				{UUID: "GPU-1", Processes: []Process{{PID: 21, UsedBytes: 2 * gib, Pod: podB}}}},
			wantVictims: map[Key][]int{{podA, "GPU-0"}: {10}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := Judge(c.cards, limits, policy)
			got := map[Key][]int{}
			for _, e := range j.Excesses {
				for _, v := range e.Victims {
					got[e.Key] = append(got[e.Key], v.PID)
				}
				if e.Used <= e.Allowed {
					t.Errorf("%v: an excess within its allowance: used %d, allowed %d", e.Key, e.Used, e.Allowed)
				}
			}
			if len(got) == 0 {
				got = nil
			}
			if !reflect.DeepEqual(got, c.wantVictims) {
				t.Errorf("victims %v, want %v", got, c.wantVictims)
			}
			if c.unmanaged == nil {
				c.unmanaged = map[string]uint64{}
			}
			if !reflect.DeepEqual(j.Unmanaged, c.unmanaged) {
				t.Errorf("unmanaged %v, want %v", j.Unmanaged, c.unmanaged)
			}
			if j.Unknown != c.unknown {
				t.Errorf("unknown %d, want %d", j.Unknown, c.unknown)
			}
		})
	}
}

// TestJudgeVictimsBringThePodBack is the invariant over random loads: after the victims go,
// the pod is within its allowance, and without the last victim it would not be.
func TestJudgeVictimsBringThePodBack(t *testing.T) {
	policy := Policy{ContextAllowance: 512 * mib, CountedProcesses: 3}
	seed := uint64(1)
	next := func(n uint64) uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return (seed >> 33) % n }
	for round := 0; round < 2000; round++ {
		limit := (1 + next(16)) * gib
		var procs []Process
		for i := 0; i < 1+int(next(8)); i++ {
			procs = append(procs, Process{PID: 100 + i, UsedBytes: next(8*gib) + 1, Pod: podA})
		}
		j := Judge([]Card{{UUID: "GPU-0", Processes: procs}}, map[types.UID]map[string]uint64{podA: {"GPU-0": limit}}, policy)
		var used uint64
		for _, p := range procs {
			used += p.UsedBytes
		}
		if used <= policy.Allowed(limit, len(procs)) {
			if len(j.Excesses) != 0 {
				t.Fatalf("round %d: within allowance but judged over", round)
			}
			continue
		}
		if len(j.Excesses) != 1 {
			t.Fatalf("round %d: over (%d > %d) but not judged", round, used, policy.Allowed(limit, len(procs)))
		}
		v := j.Excesses[0].Victims
		left := used
		for _, p := range v {
			left -= p.UsedBytes
		}
		if left > policy.Allowed(limit, len(procs)-len(v)) {
			t.Fatalf("round %d: after %d victims the pod still holds %d", round, len(v), left)
		}
		last := v[len(v)-1]
		if left+last.UsedBytes <= policy.Allowed(limit, len(procs)-len(v)+1) {
			t.Fatalf("round %d: the last victim %d was not needed", round, last.PID)
		}
	}
}
