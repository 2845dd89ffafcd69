package vgpu

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
	"github.com/tessera-gpu/tessera/plugins/vgpu/dracost"
)

func TestSessionPublishesCardUsageAndPendingReasons(t *testing.T) {
	placed := vgpuPod("a", "fits", 1, 10000, 30, nil)
	placed.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Minute))
	utc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{gpuNode("m1", 2, "NVIDIA A100", 40960)},
		PodGroups: []*schedulingv1.PodGroup{podGroup("fits", 1), podGroup("t4only", 1), podGroup("bad", 1)},
		Pods: []*corev1.Pod{
			placed,
			vgpuPod("b", "t4only", 1, 1000, 10, map[string]string{api.AnnotationGPUTypeInclude: "T4"}),
			vgpuPod("c", "bad", 1, 1000, 10, map[string]string{api.AnnotationQoS: "gold"}),
		},
		Queues: queues(),
	}
	ssn, p := session(t, utc, true, nil)
	p.publishMetrics(ssn)
	m := p.metrics
	used := testutil.ToFloat64(m.cardMemory.WithLabelValues("m1", "0", "GPU-m1-0")) +
		testutil.ToFloat64(m.cardMemory.WithLabelValues("m1", "1", "GPU-m1-1"))
	if used != 10000*mib {
		t.Fatalf("card memory gauges sum to %v bytes, want 10000 MiB", used)
	}
	cores := testutil.ToFloat64(m.cardCores.WithLabelValues("m1", "0", "GPU-m1-0")) +
		testutil.ToFloat64(m.cardCores.WithLabelValues("m1", "1", "GPU-m1-1"))
	if cores != 0.3 {
		t.Fatalf("card cores gauges sum to %v, want a ratio of 0.3", cores)
	}
	if got := testutil.ToFloat64(m.cardCapacity.WithLabelValues("m1", "0", "GPU-m1-0")); got != 40960*mib {
		t.Fatalf("capacity gauge %v, want 40960 MiB in bytes", got)
	}
	var latency dto.Metric
	if err := m.placement.Write(&latency); err != nil || latency.GetHistogram().GetSampleCount() != 1 ||
		latency.GetHistogram().GetSampleSum() < 59 {
		t.Fatalf("placement latency: %v samples summing to %v s (%v), want one of about 60 s for the task that got its cards",
			latency.GetHistogram().GetSampleCount(), latency.GetHistogram().GetSampleSum(), err)
	}
	if got := testutil.ToFloat64(m.pending.WithLabelValues("excluded by GPU type annotation")); got != 1 {
		t.Fatalf("pending by type filter = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.pending.WithLabelValues(book.PendingInvalid)); got != 1 {
		t.Fatalf("pending invalid = %v, want 1", got)
	}
	if testutil.CollectAndCount(m.pluginSeconds) != 3 {
		t.Fatalf("plugin time counters missing")
	}
}

// The metrics belong to their Scheduler: registered on the registerer it was given,
// and two Schedulers (tests build one per case) never collide.
func TestSchedulerMetricsAreRegisteredWhereTold(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := NewSchedulerWithMetrics(reg)
	s.metrics.pending.WithLabelValues(book.PendingInvalid).Set(2)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	for _, want := range []string{"tessera_scheduler_vgpu_tasks_pending", "tessera_scheduler_plugin_seconds_total"} {
		if !slices.Contains(names, want) {
			t.Errorf("registry has %v, want %s", names, want)
		}
	}
	_ = NewScheduler()
	_ = NewScheduler() // unregistered: no duplicate-registration panic
}

func TestPlacementLatencyIgnoresPodsWithoutACreationTime(t *testing.T) {
	m := newMetrics(nil)
	now := time.Unix(1700000000, 0)
	m.placed(time.Time{}, now)
	m.placed(now.Add(time.Second), now) // a clock behind the API server's
	m.placed(now.Add(-2*time.Second), now)
	var latency dto.Metric
	if err := m.placement.Write(&latency); err != nil {
		t.Fatal(err)
	}
	if h := latency.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 2 {
		t.Fatalf("%d samples summing to %v, want the one 2 s wait", h.GetSampleCount(), h.GetSampleSum())
	}
}

// The card gauges are kept between sessions: a card's values follow its usage, and
// the series of a card no longer seen (its node gone) is dropped, not left stale.
func TestCardGaugesFollowTheCardsSessionToSession(t *testing.T) {
	m := newMetrics(nil)
	cards := map[string][]placement.CardState{
		"a": {{Card: api.Card{UUID: "GPU-a-0", Index: 0}, CapacityMiB: 1000, Used: placement.Usage{MemoryMiB: 100, Cores: 10, Tenants: 1}}},
		"b": {{Card: api.Card{UUID: "GPU-b-0", Index: 0}, CapacityMiB: 1000}, {Card: api.Card{UUID: "GPU-b-1", Index: 1}, CapacityMiB: 1000}},
	}
	each := func(fn func(string, *placement.CardState)) {
		for node, cs := range cards {
			for i := range cs {
				fn(node, &cs[i])
			}
		}
	}
	m.publishCards(each)
	if n := testutil.CollectAndCount(m.cardMemory); n != 3 {
		t.Fatalf("%d card memory series, want 3", n)
	}
	cards["a"][0].Used = placement.Usage{MemoryMiB: 300, Cores: 50, Tenants: 2}
	delete(cards, "b")
	m.publishCards(each)
	for _, v := range []*prometheus.GaugeVec{m.cardMemory, m.cardCapacity, m.cardCores, m.cardTenants} {
		if n := testutil.CollectAndCount(v); n != 1 {
			t.Errorf("%d series after node b left, want 1", n)
		}
	}
	if got := testutil.ToFloat64(m.cardMemory.WithLabelValues("a", "0", "GPU-a-0")); got != 300*mib {
		t.Errorf("card memory %v, want the second session's 300 MiB", got)
	}
	if got := testutil.ToFloat64(m.cardTenants.WithLabelValues("a", "0", "GPU-a-0")); got != 2 {
		t.Errorf("tenants %v, want 2", got)
	}
}

// The DRA claim results a session leaves out are exported per reason, as the last
// session counted them: the scene of TestMalformedDRAClaimResultIsSkippedWithAReason
// (one unknown device, one bad capacity) reads 1 and 1 and zero for the other three
// reasons; a session after the claims are gone reads zero for all five.
func TestSkippedClaimResultsAreExportedPerSession(t *testing.T) {
	reg := prometheus.NewRegistry()
	testSched = NewSchedulerWithMetrics(reg)
	scene := func(withBad bool) *uthelper.TestCommonStruct {
		dra, slice := draNode("dra", 2)
		good := claimPod("good", "pg-light", "dra", "good")
		tc := &uthelper.TestCommonStruct{
			Nodes:          []*corev1.Node{dra},
			ResourceSlices: []*resourceapi.ResourceSlice{slice},
			DeviceClasses:  []*resourceapi.DeviceClass{deviceClass(dracost.Driver)},
			ResourceClaims: []*resourceapi.ResourceClaim{allocatedClaim("good", "dra", good.UID, []string{"card-0"}, "4Gi", "20")},
			Queues:         []*schedulingv1.Queue{util.BuildQueue("light", 1, nil)},
			PodGroups:      []*schedulingv1.PodGroup{util.BuildPodGroup("pg-light", "ns", "light", 1, nil, schedulingv1.PodGroupRunning)},
			Pods:           []*corev1.Pod{good},
		}
		if withBad {
			ghost, odd := claimPod("ghost", "pg-light", "dra", "ghost"), claimPod("odd", "pg-light", "dra", "odd")
			tc.Pods = append(tc.Pods, ghost, odd)
			tc.ResourceClaims = append(tc.ResourceClaims,
				allocatedClaim("ghost", "dra", ghost.UID, []string{"card-9"}, "4Gi", "20"),
				allocatedClaim("odd", "dra", odd.UID, []string{"card-1"}, "1.5Mi", "20"))
		}
		return tc
	}
	for _, tc := range []struct {
		withBad bool
		want    map[string]float64
	}{
		{true, map[string]float64{"unknown node": 0, "unknown device": 1, "admin access": 0, "card twice": 0, "bad capacity": 1}},
		{false, map[string]float64{"unknown node": 0, "unknown device": 0, "admin access": 0, "card twice": 0, "bad capacity": 0}},
	} {
		ssn, p := open(t, scene(tc.withBad), draTiers())
		p.publishMetrics(ssn)
		got := map[string]float64{}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != "tessera_scheduler_dra_claim_results_skipped" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" {
						got[l.GetValue()] = m.GetGauge().GetValue()
					}
				}
			}
		}
		if !maps.Equal(got, tc.want) {
			t.Errorf("with the malformed claims %v: the registry reads %v, want %v", tc.withBad, got, tc.want)
		}
	}
}
