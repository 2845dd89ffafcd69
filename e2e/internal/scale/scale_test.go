package scale

import (
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

func TestNodeCarriesBothAgentsFormatsOfTheSameCards(t *testing.T) {
	for _, i := range []int{0, 2, 999} {
		n, err := Node(i)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range Heartbeat(time.Now()) {
			n.Annotations[k] = v
		}
		inv, err := api.ReadNodeInventory(n, time.Now(), 90*time.Second)
		if err != nil || inv == nil {
			t.Fatalf("node %d: Tessera's inventory: %v", i, err)
		}
		reg, err := api.DecodeVolcanoNodeRegister(n.Annotations[api.VolcanoNodeRegister])
		if err != nil {
			t.Fatalf("node %d: HAMi registration: %v", i, err)
		}
		if len(inv.Cards) != CardsPerNode || len(reg) != CardsPerNode {
			t.Fatalf("node %d: %d inventory cards, %d registered, want %d", i, len(inv.Cards), len(reg), CardsPerNode)
		}
		numa := map[int]int{}
		for c, card := range inv.Cards {
			numa[card.NUMA]++
			if reg[c].UUID != card.UUID || reg[c].Type != card.Model || reg[c].MemoryMiB != card.MemoryMiB || reg[c].Mode != "hami-core" {
				t.Errorf("node %d card %d: registration %+v differs from inventory %+v", i, c, reg[c], card)
			}
		}
		if numa[0] != 4 || numa[1] != 4 {
			t.Errorf("node %d: NUMA nodes %v, want four cards on each of 0 and 1", i, numa)
		}
		if got := n.Status.Capacity[api.ResourceNumber]; got.Value() != CardsPerNode*SharesPerCard {
			t.Errorf("node %d: %s capacity %s", i, api.ResourceNumber, got.String())
		}
	}
	if NodeModel(2) != ModelH100 || NodeModel(0) != ModelA100 {
		t.Error("one node in three should carry H100s")
	}
}

func TestGenerateIsDeterministicAndMixed(t *testing.T) {
	a, b := Generate(3000, 7, 0.15), Generate(3000, 7, 0.15)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two workloads")
	}
	if reflect.DeepEqual(a, Generate(3000, 8, 0.15)) {
		t.Fatal("two seeds gave one workload")
	}
	var cpu, whole, multi, filtered, pct, mib int
	queues := map[string]int{}
	for _, j := range a {
		queues[j.Queue]++
		if j.Replicas < 1 || j.Replicas > 8 {
			t.Fatalf("%s: gang of %d", j.Name, j.Replicas)
		}
		switch {
		case j.CPUOnly:
			cpu++
		case j.Cards > 1:
			multi++
		case j.Cores == 100:
			whole++
		case j.MemPct > 0:
			pct++
		default:
			mib++
		}
		if j.TypeFilter != "" {
			filtered++
		}
		if !j.CPUOnly && (j.MemPct > 0) == (j.MemMiB > 0) {
			t.Fatalf("%s: memory both or neither in MiB (%d) and percent (%d)", j.Name, j.MemMiB, j.MemPct)
		}
	}
	for name, n := range map[string]int{"CPU-only": cpu, "whole-card": whole, "multi-card": multi, "type-filtered": filtered, "percent": pct, "MiB": mib} {
		if n < 100 {
			t.Errorf("%d %s jobs of 3000", n, name)
		}
	}
	if len(queues) != 3 {
		t.Errorf("queues %v", queues)
	}
}

func TestFloorJobsAskForNoCards(t *testing.T) {
	j := JobSpec{Name: "j", Queue: "team-a", Replicas: 3, Cards: 2, MemPct: 50, Cores: 50, TypeFilter: "H100", CPUMilli: 500, HostMiB: 1024}
	with, without := j.VolcanoJob(true), j.VolcanoJob(false)
	lim := with.Spec.Tasks[0].Template.Spec.Containers[0].Resources.Limits
	if q := lim[api.ResourceNumber]; q.Value() != 2 || with.Spec.Tasks[0].Template.Annotations[api.NvidiaUseGPUType] != "H100" {
		t.Errorf("vGPU job: limits %v, annotations %v", lim, with.Spec.Tasks[0].Template.Annotations)
	}
	if n := len(without.Spec.Tasks[0].Template.Spec.Containers[0].Resources.Limits); n != 0 || len(without.Spec.Tasks[0].Template.Annotations) != 0 {
		t.Errorf("floor job keeps %d limits and annotations %v", n, without.Spec.Tasks[0].Template.Annotations)
	}
	if with.Spec.MinAvailable != 3 || with.Spec.Tasks[0].Replicas != 3 {
		t.Errorf("gang: minAvailable %d, replicas %d", with.Spec.MinAvailable, with.Spec.Tasks[0].Replicas)
	}
}

func TestLowerBound(t *testing.T) {
	for _, c := range []struct {
		name       string
		cores, mib float64
		want       int
	}{
		{"cores decide", 250, CardMiB, 3},
		{"memory decides", 10, 2.5 * CardMiB, 3},
		{"exact fits need no extra card", 400, 4 * CardMiB, 4},
		{"nothing needs no card", 0, 0, 0},
	} {
		if got := LowerBound(c.cores, c.mib); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

func pod(name string, ann string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{api.AnnotationAssignment: ann}},
		Spec: corev1.PodSpec{NodeName: "gpu-0000", Containers: []corev1.Container{{Name: "main"}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

func assignment(t *testing.T, cards ...api.CardAssignment) string {
	t.Helper()
	s, err := api.EncodeAssignment(&api.PodAssignment{Node: "gpu-0000", QoS: api.DefaultQoS,
		Containers: []api.ContainerAssignment{{Name: "main", Cards: cards}}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCardsFindsOvercommit(t *testing.T) {
	u0, u1 := CardUUID(0, 0), CardUUID(0, 1)
	pods := []*corev1.Pod{
		pod("a", assignment(t, api.CardAssignment{UUID: u0, MemoryMiB: 40960, Cores: 50})),
		pod("b", assignment(t, api.CardAssignment{UUID: u0, MemoryMiB: 40960, Cores: 60})),
		pod("c", assignment(t, api.CardAssignment{UUID: u1, MemoryMiB: CardMiB, Cores: 100})),
	}
	done := pod("d", assignment(t, api.CardAssignment{UUID: u1, MemoryMiB: 1024, Cores: 10}))
	done.Status.Phase = corev1.PodSucceeded
	pods = append(pods, done)
	load, perQueue, missing, err := Cards(pods, &api.Decoders{}, func(p *corev1.Pod) string { return "q-" + p.Name })
	if err != nil {
		t.Fatal(err)
	}
	if len(load) != 2 || missing != 0 || perQueue["q-b"].Cores != 60 {
		t.Fatalf("load %v, missing %d, per queue %v", load, missing, perQueue)
	}
	bad := Overcommitted(load)
	if len(bad) != 1 || !strings.Contains(bad[0], u0) || !strings.Contains(bad[0], "110% cores") {
		t.Errorf("over-committed: %v (want card 0 at 110%% cores, not the whole card whose sharer finished)", bad)
	}
}

func TestSharesFollowWeightedMaxMin(t *testing.T) {
	demand := map[string]fairshare.Amount{"team-a": {Cores: 1000}, "team-b": {Cores: 1000}, "team-c": {Cores: 100}}
	got := Shares(fairshare.Amount{MemoryMiB: 1e9, Cores: 1200}, demand, map[string]fairshare.Amount{"team-a": {Cores: 400}})
	// team-c asks for less than its part and gets it; a and b share the 1,100 left 1:2.
	want := []float64{1100.0 / 3, 2200.0 / 3, 100}
	for i, q := range got {
		if math.Abs(q.Fair-want[i]) > 1e-6 {
			t.Errorf("%s: fair %.1f, want %.1f", q.Queue, q.Fair, want[i])
		}
	}
	if got[0].Held != 400 || got[0].Demand != 1000 {
		t.Errorf("team-a: %+v", got[0])
	}
}

func TestHistogramQuantiles(t *testing.T) {
	text := `# TYPE volcano_e2e_scheduling_latency_milliseconds histogram
volcano_e2e_scheduling_latency_milliseconds_bucket{le="5"} 10
volcano_e2e_scheduling_latency_milliseconds_bucket{le="10"} 10
volcano_e2e_scheduling_latency_milliseconds_bucket{le="20"} 30
volcano_e2e_scheduling_latency_milliseconds_bucket{le="+Inf"} 40
volcano_e2e_scheduling_latency_milliseconds_sum 900
volcano_e2e_scheduling_latency_milliseconds_count 40
volcano_other_bucket{le="5"} 99
`
	h, err := ParseHistogram(strings.NewReader(text), sessionMetric)
	if err != nil {
		t.Fatal(err)
	}
	before := Histogram{Buckets: map[float64]float64{5: 10, 10: 10, 20: 10, math.Inf(1): 10}, Sum: 20, Count: 10}
	s := h.Since(before)
	if s.Count != 30 || s.Sum != 880 {
		t.Fatalf("since: count %v sum %v", s.Count, s.Sum)
	}
	// 20 of the 30 new sessions are in (10, 20], 10 above 20.
	if q := s.Quantile(0.5); math.Abs(q-17.5) > 1e-9 {
		t.Errorf("p50 %.2f, want 17.5", q)
	}
	if q := s.Quantile(0.99); q != 20 {
		t.Errorf("p99 in +Inf gives the top finite bound: %.2f", q)
	}
	if Percentile([]float64{1, 2, 3, 4}, 0.5) != 2 || Percentile(nil, 0.5) != 0 {
		t.Error("nearest-rank percentile")
	}
}

func TestCPUTimeAndMemoryOfThisProcess(t *testing.T) {
	end := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(end) {
	}
	cpu, err := CPUTime(selfPID())
	if err != nil || cpu <= 0 {
		t.Fatalf("cpu %v, err %v", cpu, err)
	}
	rss, peak, err := Memory(selfPID())
	if err != nil || rss <= 0 || peak < rss {
		t.Fatalf("rss %.1f peak %.1f err %v", rss, peak, err)
	}
}

func selfPID() int { return os.Getpid() }

func TestQueueGapIsInPointsOfTheCluster(t *testing.T) {
	qs := []QueueShare{{Demand: 600, Held: 150, Fair: 200}, {Demand: 600, Held: 420, Fair: 400}, {Demand: 600, Held: 600, Fair: 600}}
	gap, contention := QueueGap(qs, 1200)
	if math.Abs(gap-50.0/12) > 1e-9 || contention != 1.5 {
		t.Fatalf("gap %.3f pp, contention %.2f; want %.3f pp, 1.50", gap, contention, 50.0/12)
	}
	if gap, contention := QueueGap(nil, 0); gap != 0 || contention != 0 {
		t.Fatalf("empty cluster: %v %v", gap, contention)
	}
}

// An idle-only pod's queue is charged its card whole, as the scheduler charges it.
func TestCardsChargesIdleOnlyPodsWholeCards(t *testing.T) {
	p := pod("tiny", assignment(t, api.CardAssignment{UUID: CardUUID(0, 0), MemoryMiB: 1, Cores: 1}))
	shared := pod("shared", assignment(t, api.CardAssignment{UUID: CardUUID(0, 1), MemoryMiB: 1, Cores: 1}))
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[api.AnnotationCardPolicy] = string(api.PolicyIdleOnly)
	_, perQueue, _, err := Cards([]*corev1.Pod{p, shared}, &api.Decoders{}, func(p *corev1.Pod) string { return "q-" + p.Name })
	if err != nil {
		t.Fatal(err)
	}
	if got := perQueue["q-tiny"]; got.MemoryMiB != CardMiB || got.Cores != 100 {
		t.Errorf("the idle-only pod's queue is charged %v, want a whole card (%d MiB, 100 cores)", got, CardMiB)
	}
	if got := perQueue["q-shared"]; got.MemoryMiB != 1 || got.Cores != 1 {
		t.Errorf("the shared pod's queue is charged %v, want what it was assigned", got)
	}
}
