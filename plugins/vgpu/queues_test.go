package vgpu

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"volcano.sh/apis/pkg/apis/scheduling"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// contention builds two 4-card nodes (800 cores) and, per queue, one job of n tasks
// that each ask one card at 10% memory and 25 cores: compute runs out long before
// memory or slots, so Volcano's proportion (which sees only slots, CPU and memory)
// finds every queue satisfied.
func contention(n int, qs ...*schedulingv1.Queue) *uthelper.TestCommonStruct {
	tc := &uthelper.TestCommonStruct{
		Nodes:  []*corev1.Node{gpuNode("n1", 4, "NVIDIA A100", 40960), gpuNode("n2", 4, "NVIDIA A100", 40960)},
		Queues: qs,
	}
	for _, q := range qs {
		pg := "pg-" + q.Name
		tc.PodGroups = append(tc.PodGroups, util.BuildPodGroup(pg, "ns", q.Name, 1, nil, schedulingv1.PodGroupInqueue))
		for i := 0; i < n; i++ {
			tc.Pods = append(tc.Pods, vgpuPod(fmt.Sprintf("%s-%02d", q.Name, i), pg, 1, 4096, 25, nil))
		}
	}
	return tc
}

// placedPerQueue counts the tasks that got cards, by the queue of their job.
func placedPerQueue(t *testing.T, ssn *framework.Session) map[string]int {
	t.Helper()
	out := map[string]int{}
	for name := range taskAssignments(t, ssn) {
		out[name[:strings.LastIndex(name, "-")]]++
	}
	return out
}

func TestQueuesShareCardsByWeight(t *testing.T) {
	tc := contention(32, util.BuildQueue("heavy", 3, nil), util.BuildQueue("light", 1, nil))
	ssn, p := session(t, tc, true, nil)
	got := placedPerQueue(t, ssn)
	// 800 cores at 3:1 are 600 and 200: 24 and 8 tasks of 25 cores.
	if got["heavy"] != 24 || got["light"] != 8 {
		t.Errorf("placed per queue %v, want heavy 24 and light 8", got)
	}
	for _, n := range []string{"n1", "n2"} {
		if _, cores, _ := usedCards(p, n); cores != 400 {
			t.Errorf("node %s: %d cores assigned, want all 400", n, cores)
		}
	}
	// The refused tasks say why, in the words the pod's condition will carry.
	var reason string
	for _, job := range ssn.Jobs {
		for _, fe := range job.NodesFitErrors {
			if strings.Contains(fe.Error(), "queue light") {
				reason = fe.Error()
			}
		}
	}
	want := "vgpu: queue light is at its share of the cluster's cards (weight 1 of 4): cores 200 held + 25 asked > 200 deserved"
	if reason != want {
		t.Errorf("light's refused tasks say %q, want %q", reason, want)
	}
}

// TestQueueGuaranteeHoldsAboveItsWeight: a queue's spec.guarantee.resource for card
// cores is a floor under its weighted share. light (weight 1 of 4) is guaranteed 400
// of the 800 cores, so it gets 400 rather than its weighted 200, and heavy the rest.
func TestQueueGuaranteeHoldsAboveItsWeight(t *testing.T) {
	light := util.BuildQueue("light", 1, nil)
	light.Spec.Guarantee.Resource = corev1.ResourceList{api.ResourceCores: resource.MustParse("400")}
	tc := contention(32, util.BuildQueue("heavy", 3, nil), light)
	ssn, _ := session(t, tc, true, nil)
	got := placedPerQueue(t, ssn)
	if got["heavy"] != 16 || got["light"] != 16 {
		t.Errorf("placed per queue %v, want heavy 16 and light 16 (light guaranteed 400 of 800 cores)", got)
	}
}

// TestQueueWeightsWithoutTesseraShare is the control: the same workload with the
// queue share turned off splits by Volcano's queue order alone, which alternates
// between queues it deems equally satisfied.
func TestQueueWeightsWithoutTesseraShare(t *testing.T) {
	tc := contention(32, util.BuildQueue("heavy", 3, nil), util.BuildQueue("light", 1, nil))
	ssn, _ := session(t, tc, true, framework.Arguments{pluginargs.KeyQueueShare: false})
	got := placedPerQueue(t, ssn)
	if got["heavy"]+got["light"] != 32 || got["heavy"] == 24 {
		t.Errorf("without the queue share placed %v; the control expects all 32 slots used and not the 24:8 split", got)
	}
	t.Logf("without Tessera's queue share: %v", got)
}

func TestQueueCapabilityCapsCardResources(t *testing.T) {
	light := util.BuildQueue("light", 1, corev1.ResourceList{api.ResourceCores: resource.MustParse("100")})
	tc := contention(32, util.BuildQueue("heavy", 1, nil), light)
	ssn, _ := session(t, tc, true, nil)
	got := placedPerQueue(t, ssn)
	// light may hold 100 cores (4 tasks); heavy, of equal weight, takes what light
	// cannot: 700 cores.
	if got["heavy"] != 28 || got["light"] != 4 {
		t.Errorf("placed per queue %v, want heavy 28 and light 4", got)
	}
}

func TestQueueWithoutContentionGetsEverything(t *testing.T) {
	tc := contention(40, util.BuildQueue("heavy", 3, nil), util.BuildQueue("light", 1, nil))
	// Only light has work: it may use the whole cluster.
	var pods []*corev1.Pod
	for _, p := range tc.Pods {
		if strings.HasPrefix(p.Name, "light-") {
			pods = append(pods, p)
		}
	}
	tc.Pods = pods
	ssn, _ := session(t, tc, true, nil)
	if got := placedPerQueue(t, ssn); got["light"] != 32 {
		t.Errorf("placed %v, want light to fill all 32 places", got)
	}
}

func TestQueueShareIgnoresCPUTasks(t *testing.T) {
	tc := contention(32, util.BuildQueue("heavy", 3, nil), util.BuildQueue("light", 1, nil))
	tc.PodGroups = append(tc.PodGroups, util.BuildPodGroup("pg-cpu", "ns", "light", 1, nil, schedulingv1.PodGroupInqueue))
	for i := 0; i < 10; i++ {
		tc.Pods = append(tc.Pods, cpuPod(fmt.Sprintf("cpu-%d", i), "pg-cpu"))
	}
	ssn, _ := session(t, tc, true, nil)
	bound := 0
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			if strings.HasPrefix(task.Name, "cpu-") && task.NodeName != "" {
				bound++
			}
		}
	}
	if bound != 10 {
		t.Errorf("%d of 10 CPU tasks in the vGPU-saturated light queue placed, want all", bound)
	}
	if got := placedPerQueue(t, ssn); got["heavy"] != 24 || got["light"] != 8 {
		t.Errorf("placed per queue %v, want heavy 24 and light 8", got)
	}
}

// TestQueueSharesBookkeeping places and releases tasks at random and checks that each
// queue's holdings stay the sum of its charges and that admit never lets a queue past
// its deserved share, as the share is recomputed after every change.
func TestQueueSharesBookkeeping(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	s := newQueueShares(fairshare.Amount{MemoryMiB: 327680, Cores: 800}, 40960)
	for i, w := range []int32{3, 1, 2} {
		q := &vapi.QueueInfo{UID: vapi.QueueID(fmt.Sprint("q", i)), Name: fmt.Sprint("q", i), Weight: w}
		s.queue(q, pluginargs.Defaults()).request = fairshare.Amount{MemoryMiB: float64(r.Intn(400000)), Cores: float64(r.Intn(1200))}
	}
	s.divide()
	placed := map[vapi.TaskID]bool{}
	for step := 0; step < 5000; step++ {
		id := vapi.TaskID(fmt.Sprint("t", r.Intn(200)))
		if placed[id] {
			c := s.charged[id]
			before := *s.queues[c.queue]
			evicted := r.Intn(2) == 0
			s.release(id, evicted)
			if evicted && r.Intn(2) == 0 {
				// preempt or reclaim discards the statement that evicted it
				if !s.restore(id) {
					t.Fatalf("step %d: the eviction of %s cannot be restored", step, id)
				}
				after := s.queues[c.queue]
				if d, e := after.allocated.Sub(before.allocated), after.request.Sub(before.request); math.Abs(d.MemoryMiB)+math.Abs(d.Cores)+
					math.Abs(e.MemoryMiB)+math.Abs(e.Cores) > 1e-6 {
					t.Fatalf("step %d: a discarded eviction left %s holding %v asking %v, before %v and %v", step, c.queue,
						after.allocated, after.request, before.allocated, before.request)
				}
				continue
			}
			delete(placed, id)
		} else {
			q := s.order[r.Intn(len(s.order))]
			asked := fairshare.Amount{MemoryMiB: float64(1 + r.Intn(20000)), Cores: float64(r.Intn(101))}
			held := fairshare.Amount{MemoryMiB: asked.MemoryMiB * (0.5 + r.Float64()), Cores: asked.Cores}
			before := s.queues[q].allocated
			spare := s.spare(q)
			if ok, _ := s.admit(q, asked); ok {
				// Within its share, one task past it from below, or borrowing only what
				// no other queue may claim.
				deserved := s.queues[q].deserved
				if !before.Add(asked).Within(deserved) && !fairshare.Below(before, deserved, asked) && !asked.Within(spare) {
					t.Fatalf("step %d: admitted %v to %s holding %v, deserved %v, spare %v", step, asked, q, before,
						s.queues[q].deserved, spare)
				}
				s.place(id, q, held, asked)
				placed[id] = true
			}
		}
		sums := map[vapi.QueueID]fairshare.Amount{}
		for _, c := range s.charged {
			sums[c.queue] = sums[c.queue].Add(c.held)
		}
		for id, q := range s.queues {
			d := q.allocated.Sub(sums[id])
			if math.Abs(d.MemoryMiB) > 1e-6 || math.Abs(d.Cores) > 1e-6 {
				t.Fatalf("step %d: %s holds %v, its charges sum to %v", step, id, q.allocated, sums[id])
			}
		}
	}
}

// TestQueueOrderFollowsTheCardShare: of two queues of the same priority that both ask
// for cards, the one holding the smaller part of its card share goes first (in its
// most-served dimension); a queue of another priority, or one without vGPU demand,
// is left to proportion's order.
func TestQueueOrderFollowsTheCardShare(t *testing.T) {
	s := newQueueShares(fairshare.Amount{MemoryMiB: 1000, Cores: 400}, 40960)
	info := func(name string, prio int32) *vapi.QueueInfo {
		q := &scheduling.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: scheduling.QueueSpec{Weight: 1, Priority: prio}}
		return &vapi.QueueInfo{UID: vapi.QueueID(name), Name: name, Queue: q}
	}
	set := func(name string, held, deserved fairshare.Amount) {
		s.queues[vapi.QueueID(name)] = &queueShare{name: name, allocated: held, deserved: deserved, request: deserved.Add(held)}
	}
	set("cores-heavy", fairshare.Amount{MemoryMiB: 100, Cores: 150}, fairshare.Amount{MemoryMiB: 500, Cores: 200}) // 75 % served
	set("memory-heavy", fairshare.Amount{MemoryMiB: 400, Cores: 50}, fairshare.Amount{MemoryMiB: 500, Cores: 200}) // 80 %
	set("light", fairshare.Amount{MemoryMiB: 50, Cores: 20}, fairshare.Amount{MemoryMiB: 500, Cores: 200})         // 10 %
	s.queues["cpu-only"] = &queueShare{name: "cpu-only"}
	for _, tt := range []struct {
		l, r *vapi.QueueInfo
		want int
	}{
		{info("light", 0), info("cores-heavy", 0), -1},
		{info("memory-heavy", 0), info("cores-heavy", 0), 1},
		{info("cores-heavy", 0), info("cores-heavy", 0), 0},
		{info("light", 0), info("cores-heavy", 5), 0},
		{info("cpu-only", 0), info("light", 0), 0},
	} {
		if got := s.compare(tt.l, tt.r); got != tt.want {
			t.Errorf("compare(%s, %s) = %d, want %d", tt.l.Name, tt.r.Name, got, tt.want)
		}
	}
}
