package api

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
)

// session reads every key once through get, as a scheduling session reads every
// running pod's assignment, and returns how many it had to decode.
func session(keys []string, get func(string, func(string) (int, error)) (int, error)) int {
	decodes := 0
	dec := func(s string) (int, error) { decodes++; return strconv.Atoi(s[1:]) }
	for _, k := range keys {
		if v, err := get(k, dec); err != nil || "k"+strconv.Itoa(v) != k {
			panic(fmt.Sprintf("get %s = %d, %v", k, v, err))
		}
	}
	return decodes
}

func keys(n, from int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "k" + strconv.Itoa(from+i)
	}
	return out
}

// A working set larger than any fixed bound is decoded once, not once per session;
// what a session no longer reads is gone two sweeps later.
func TestDecodeCacheKeepsWhatEachSessionReads(t *testing.T) {
	var c decodeCache[int]
	set := keys(60000, 0) // 7,500 nodes x 8 pods: past the old 20,000-entry wipe
	if n := session(set, c.get); n != len(set) {
		t.Fatalf("first session decoded %d, want %d", n, len(set))
	}
	for i := 0; i < 3; i++ {
		c.sweep()
		if n := session(set, c.get); n != 0 {
			t.Fatalf("session %d decoded %d again, want 0", i+2, n)
		}
	}
	// Half the pods finish and as many new ones start.
	next := append(append([]string{}, set[30000:]...), keys(30000, 60000)...)
	c.sweep()
	if n := session(next, c.get); n != 30000 {
		t.Errorf("after churn decoded %d, want the 30,000 new ones", n)
	}
	c.sweep()
	session(next, c.get)
	if got := c.len(); got != len(next) {
		t.Errorf("cache holds %d entries for a working set of %d", got, len(next))
	}
	c.sweep() // ends the period that read them: kept
	c.sweep() // ends a period without reads: gone
	if got := c.len(); got != 0 {
		t.Errorf("a sweep after a period without reads leaves %d entries, want 0", got)
	}
}

// Without sweeps (a caller outside the scheduler) the cache stays under its bound.
func TestDecodeCacheIsBoundedWithoutSweeps(t *testing.T) {
	var c decodeCache[int]
	session(keys(maxEntries+1000, 0), c.get)
	if got := c.len(); got > maxEntries {
		t.Errorf("cache holds %d entries, bound %d", got, maxEntries)
	}
}

func TestDecodeCacheUnderParallelReaders(t *testing.T) {
	var c decodeCache[int]
	set := keys(5000, 0)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() { defer wg.Done(); session(set, c.get) }()
	}
	wg.Wait()
	c.sweep()
	if n := session(set, c.get); n != 0 {
		t.Errorf("after parallel sessions decoded %d, want 0", n)
	}
}

// wipeCache is the policy before sweeping, kept here as the benchmark's baseline:
// emptied whenever it passes 20,000 entries.
type wipeCache[T any] struct{ m map[string]T }

func (c *wipeCache[T]) get(s string, decode func(string) (T, error)) (T, error) {
	if v, ok := c.m[s]; ok {
		return v, nil
	}
	v, err := decode(s)
	if c.m == nil || len(c.m) > 20000 {
		c.m = map[string]T{}
	}
	c.m[s] = v
	return v, err
}

// BenchmarkDecodeCacheSessions: one session's reads of every running pod's real
// tessera.io/assignment (8 pods per node) once the cache is warm, with the
// wipe-at-20,000 baseline and the swept cache side by side, at 1,000 to 10,000 nodes.
func BenchmarkDecodeCacheSessions(b *testing.B) {
	for _, nodes := range []int{1000, 2500, 5000, 10000} {
		set := make([]string, 8*nodes)
		for i := range set {
			enc, err := EncodeAssignment(&PodAssignment{Version: AssignmentVersion, Node: fmt.Sprintf("node-%d", i/8), QoS: QoSFixedShare,
				Containers: []ContainerAssignment{{Name: "main", Cards: []CardAssignment{{UUID: fmt.Sprintf("GPU-%d-%d", i/8, i%8), MemoryMiB: 10240, Cores: 25}}}}})
			if err != nil {
				b.Fatal(err)
			}
			set[i] = enc
		}
		run := func(get func(string, func(string) (*PodAssignment, error)) (*PodAssignment, error)) int {
			decodes := 0
			dec := func(s string) (*PodAssignment, error) { decodes++; return DecodeAssignment(s) }
			for _, s := range set {
				if _, err := get(s, dec); err != nil {
					b.Fatal(err)
				}
			}
			return decodes
		}
		b.Run(fmt.Sprintf("nodes=%d/wipe-at-20000", nodes), func(b *testing.B) {
			c := &wipeCache[*PodAssignment]{}
			run(c.get)
			total := 0
			for i := 0; i < b.N; i++ {
				total += run(c.get)
			}
			b.ReportMetric(float64(total)/float64(b.N), "decodes/session")
		})
		b.Run(fmt.Sprintf("nodes=%d/swept", nodes), func(b *testing.B) {
			var c decodeCache[*PodAssignment]
			run(c.get)
			total := 0
			for i := 0; i < b.N; i++ {
				c.sweep()
				total += run(c.get)
			}
			b.ReportMetric(float64(total)/float64(b.N), "decodes/session")
		})
	}
}

// len is how many decoded values the cache holds.
func (c *decodeCache[T]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
