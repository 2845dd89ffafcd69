package vgpu

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/actions/enqueue"
	"volcano.sh/volcano/pkg/scheduler/actions/reclaim"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins/proportion"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"
)

// The claim reclaimer (drareclaim.go) over Volcano's own reclaim and allocate actions,
// session after session, on fullDRANode: queue a holds the 4 cards of the DRA node
// through claims, queue b (same weight) waits with two whole-card claims.

// reclaimState is what the cluster holds between sessions: a's pods gone (with their
// claims), a's pods being deleted, b's pods running on a card.
type reclaimState struct {
	gone        map[string]bool
	terminating map[string]bool
	bOn         map[string]string // b's pod -> the card its claim was allocated
	// podGone: a's pods gone whose claims are still allocated (the resourceclaim
	// controller has not released them yet).
	podGone map[string]bool
	// bMin is b's gang minimum (fullDRANode's 1 when 0).
	bMin int32
}

// scenario is fullDRANode as st leaves it.
func (st reclaimState) scenario() *uthelper.TestCommonStruct {
	tc := fullDRANode()
	var pods []*corev1.Pod
	for _, p := range tc.Pods {
		if st.gone[p.Name] || st.podGone[p.Name] {
			continue
		}
		if _, ok := st.bOn[p.Name]; ok {
			p = claimPod(p.Name, "pg-b", "dra", p.Name)
		}
		if st.terminating[p.Name] {
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		pods = append(pods, p)
	}
	var claims []*resourceapi.ResourceClaim
	for _, c := range tc.ResourceClaims {
		if st.gone[c.Name] {
			continue
		}
		if card, ok := st.bOn[c.Name]; ok {
			c = allocatedClaim(c.Name, "dra", podUID(pods, c.Name), []string{card}, "", "")
		}
		claims = append(claims, c)
	}
	tc.Pods, tc.ResourceClaims = pods, claims
	if st.bMin > 0 {
		tc.PodGroups[1].Spec.MinMember = st.bMin
	}
	return tc
}

func podUID(pods []*corev1.Pod, name string) types.UID {
	for _, p := range pods {
		if p.Name == name {
			return p.UID
		}
	}
	return ""
}

// session opens one session of st with the reclaimer on and runs reclaim and
// allocate; it checks the session evicted exactly want (namespace/name).
func (st reclaimState) session(t *testing.T, want ...string) (*framework.Session, *vgpuPlugin) {
	t.Helper()
	tc := st.scenario()
	ssn, p := openDRASession(t, tc, true)
	tc.Run([]framework.Action{reclaim.New(), allocate.New()})
	tc.ExpectEvictNum, tc.ExpectEvicted = len(want), want
	if err := tc.CheckEvict(0); err != nil {
		t.Fatalf("evictions: %v", err)
	}
	return ssn, p
}

// TestTheReclaimerTakesCardsBackForClaims: b, below its card share (2 of the 4 cards),
// gets them back from a, above it, one victim per session and only once the last
// victim is gone: a's DRA pod a-0 is evicted (never the CPU-only pod on the node);
// while it terminates nothing more goes and b still waits; once it is gone with its
// claim, allocate gives b-0 the freed card; then a-1 goes for b-1, and once it is gone
// b-1 runs; at its share, b evicts nothing more.
func TestTheReclaimerTakesCardsBackForClaims(t *testing.T) {
	st := reclaimState{gone: map[string]bool{}, terminating: map[string]bool{}, bOn: map[string]string{}}

	ssn, p := st.session(t, "ns/a-0")
	if a0 := taskNamed(ssn, "a-0"); a0.Status != vapi.Releasing {
		t.Errorf("a-0 is %s in the session that evicted it, want Releasing", a0.Status)
	}
	if !p.shares.AboveShare("a") {
		t.Errorf("queue a is not above its card share: the premise fails")
	}
	if got := boundPerQueue(ssn, "b-"); got["b"] != 0 {
		t.Errorf("b placed %v while a-0's claim still holds its card", got)
	}

	st.terminating["a-0"] = true
	ssn, _ = st.session(t) // earlier victim still going: nothing new
	if got := boundPerQueue(ssn, "b-"); got["b"] != 0 {
		t.Errorf("b placed %v while a-0 terminates", got)
	}

	st.gone["a-0"] = true
	ssn, _ = st.session(t) // b-0 fits the freed card as it stands: no eviction, allocate places it
	placed := ""
	for _, name := range []string{"b-0", "b-1"} {
		if task := taskNamed(ssn, name); task.NodeName == "dra" && task.Status != vapi.Pending {
			placed = name
		}
	}
	if placed == "" {
		t.Fatalf("no b pod was placed on the card a-0 freed: %v", boundPerQueue(ssn, "b-"))
	}

	st.bOn[placed] = "card-0"
	st.session(t, "ns/a-1") // b holds 1 of its 2 cards: still below its share

	st.gone["a-1"] = true
	ssn, _ = st.session(t)
	if got := boundPerQueue(ssn, "b-"); got["b"] != 2 {
		t.Fatalf("b placed %v, want both its pods once a-1 is gone", got)
	}
	other := "b-0"
	if placed == "b-0" {
		other = "b-1"
	}
	st.bOn[other] = "card-1"
	_, p = st.session(t) // b at its share: nothing more
	if a, b := standing(t, p, "a"), standing(t, p, "b"); a != b || a.MemoryMiB != 2*cardMiB {
		t.Errorf("queues hold a %v and b %v, want two whole cards each", a, b)
	}
}

// TestTheReclaimerServesAGangItsMinimum: b's gang of two claims needs both cards in
// one session's allocation, so the reclaimer frees two at once.
func TestTheReclaimerServesAGangItsMinimum(t *testing.T) {
	st := reclaimState{bMin: 2}
	st.session(t, "ns/a-0", "ns/a-1")
	st = reclaimState{gone: map[string]bool{"a-0": true, "a-1": true}, bMin: 2}
	ssn, _ := st.session(t)
	if got := boundPerQueue(ssn, "b-"); got["b"] != 2 {
		t.Fatalf("b placed %v, want its gang of two on the freed cards", got)
	}
}

// TestTheReclaimerLeavesAlone: what the reclaimer never evicts for, or never evicts.
func TestTheReclaimerLeavesAlone(t *testing.T) {
	t.Run("with vgpu.DRAReclaim false", func(t *testing.T) {
		tc := fullDRANode()
		ssn, _ := openDRASession(t, tc, false)
		tc.Run([]framework.Action{reclaim.New(), allocate.New()})
		tc.ExpectEvictNum = 0
		if err := tc.CheckEvict(0); err != nil {
			t.Fatal(err)
		}
		if b0 := taskNamed(ssn, "b-0"); b0.Status != vapi.Pending {
			t.Errorf("b-0 is %s, want Pending", b0.Status)
		}
	})
	t.Run("a queue at its card share", func(t *testing.T) {
		// b of weight 1 against a of weight 3: b deserves 1 card and holds it.
		st := reclaimState{gone: map[string]bool{"a-0": true}, bOn: map[string]string{"b-0": "card-0"}}
		tc := st.scenario()
		tc.Queues[0] = util.BuildQueue("a", 3, nil)
		ssn, p := openDRASession(t, tc, true)
		tc.Run([]framework.Action{reclaim.New(), allocate.New()})
		tc.ExpectEvictNum = 0
		if err := tc.CheckEvict(0); err != nil {
			t.Fatal(err)
		}
		if p.preemptive(ssn.Queues["b"], taskNamed(ssn, "b-1")) {
			t.Errorf("b may reclaim for b-1: the premise (b at its share) fails")
		}
	})
	t.Run("CPU-only and device-plugin pods", func(t *testing.T) {
		// a's DRA pods are at their gang's minimum; a's other job, with spare members,
		// runs a CPU-only pod on the DRA node and a device-plugin pod on a GPU node.
		tc := fullDRANode()
		tc.PodGroups[0].Spec.MinMember = 4
		tc.Nodes = append(tc.Nodes, gpuNode("gpu", 1, "NVIDIA A100", cardMiB))
		tc.PodGroups = append(tc.PodGroups, util.BuildPodGroup("pg-x", "ns", "a", 1, nil, schedulingv1.PodGroupRunning))
		dp := holding("dp", "gpu", "GPU-gpu-0", 100, 0)
		dp.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-x"
		for _, pod := range tc.Pods {
			if pod.Name == "a-cpu" {
				pod.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-x"
			}
		}
		tc.Pods = append(tc.Pods, dp, runningCPU("x-cpu", "dra"))
		tc.Pods[len(tc.Pods)-1].Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-x"
		ssn, p := openDRASession(t, tc, true)
		if !p.shares.AboveShare("a") || !p.preemptive(ssn.Queues["b"], taskNamed(ssn, "b-0")) {
			t.Fatalf("the premise fails: a above its share %v, b may reclaim %v", p.shares.AboveShare("a"),
				p.preemptive(ssn.Queues["b"], taskNamed(ssn, "b-0")))
		}
		tc.Run([]framework.Action{reclaim.New(), allocate.New()})
		tc.ExpectEvictNum = 0
		if err := tc.CheckEvict(0); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an earlier victim terminating", func(t *testing.T) {
		// b's gang needs two cards: a-0's, being freed, is one; the other waits.
		st := reclaimState{terminating: map[string]bool{"a-0": true}, bMin: 2}
		st.session(t)
	})
	t.Run("an earlier victim's claim still allocated", func(t *testing.T) {
		st := reclaimState{podGone: map[string]bool{"a-0": true}, bMin: 2}
		st.session(t)
	})
	t.Run("a gang member whose claims fit as the cards stand", func(t *testing.T) {
		st := reclaimState{gone: map[string]bool{"a-3": true}}
		st.session(t) // b-0 fits card-3: allocate's to place, not the reclaimer's
	})
}

// TestTheReclaimerWaitsForTheQueuePluginsToOpen: fullDRANode, where the reclaimer
// evicts a-0 for b, with a's second job pending (a minimum set, as Volcano's job
// controller sets it) so that enqueue asks proportion about queue a after the
// eviction. In the chart's layout (vgpu in the first tier) proportion opens after the
// eviction and counts a-0 as Releasing: enqueue runs. Where vgpu opens after
// proportion (a conf with vgpu in the last tier), an eviction at vgpu's open takes
// a-0 off proportion's allocated but not off its elastic, and enqueue panics in
// Volcano's resource arithmetic ("resource is not sufficient"): the reclaimer must
// evict nothing there.
func TestTheReclaimerWaitsForTheQueuePluginsToOpen(t *testing.T) {
	vgpuLast := draEvictTiers(true)
	vgpuLast[1].Plugins = append(vgpuLast[1].Plugins, vgpuLast[0].Plugins[3])
	vgpuLast[0].Plugins = vgpuLast[0].Plugins[:3]
	for _, c := range []struct {
		name    string
		tiers   []conf.Tier
		first   string
		evicted []string
	}{
		{"vgpu opening first", draEvictTiers(true), "", []string{"ns/a-0"}},
		{"proportion opening first", vgpuLast, proportion.PluginName, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := queuePluginOpenedBefore(c.tiers); got != c.first {
				t.Fatalf("queuePluginOpenedBefore = %q, want %q", got, c.first)
			}
			tc := fullDRANode()
			pg := util.BuildPodGroup("pg-a2", "ns", "a", 1, nil, schedulingv1.PodGroupPending)
			pg.Spec.MinResources = &corev1.ResourceList{}
			tc.PodGroups = append(tc.PodGroups, pg)
			tc.Pods = append(tc.Pods, cpuPod("a2-0", "pg-a2"))
			testSched = NewScheduler()
			var p *vgpuPlugin
			tc.Plugins = evictBuilders(&p)
			tc.RegisterSession(c.tiers, nil)
			t.Cleanup(tc.Close)
			t.Cleanup(testSched.Close)
			tc.Run([]framework.Action{enqueue.New(), allocate.New()}) // panicked before the check
			tc.ExpectEvictNum, tc.ExpectEvicted = len(c.evicted), c.evicted
			if err := tc.CheckEvict(0); err != nil {
				t.Fatalf("evictions: %v", err)
			}
		})
	}
}
