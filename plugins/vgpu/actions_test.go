package vgpu

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/actions/backfill"
	"volcano.sh/volcano/pkg/scheduler/actions/enqueue"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins/predicates"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
)

// Regression tests for what Volcano's other actions did to vGPU tasks (issue 13):
// each builds the situation on Volcano's own framework and checks the invariant.

// onlyVGPUPod asks for nothing but vGPU resources: no CPU, no host memory.
func onlyVGPUPod(name, pg string, limits corev1.ResourceList) *corev1.Pod {
	p := util.BuildPod("ns", name, "", corev1.PodPending, limits, pg, nil, nil)
	p.Spec.Containers[0].Name = "main"
	p.Spec.Containers[0].Resources.Limits = limits
	return p
}

// A gang whose members ask only for vGPU resources is still a gang: backfill never
// places its members one by one, outside gang and queue share.
func TestVGPUOnlyGangIsAllOrNothingUnderBackfill(t *testing.T) {
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	for _, c := range []struct {
		name   string
		cards  int
		limits corev1.ResourceList
		want   int
		reason string
	}{
		{"two of four members fit: none is placed", 1, corev1.ResourceList{api.ResourceNumber: q(1), api.ResourceMemory: q(16384)}, 0, ""},
		{"all four fit: all are placed, with cards", 2, corev1.ResourceList{api.ResourceNumber: q(1), api.ResourceMemory: q(16384)}, 4, ""},
		// Volcano sizes these as BestEffort; the kubelet would hand them no card.
		{"card memory without a card count is refused", 2, corev1.ResourceList{api.ResourceMemory: q(16384)}, 0,
			`volcano.sh/vgpu-memory is 16384 without volcano.sh/vgpu-number`},
	} {
		t.Run(c.name, func(t *testing.T) {
			tc := &uthelper.TestCommonStruct{
				Nodes:     []*corev1.Node{gpuNode("n1", c.cards, "NVIDIA A100", 40960)},
				PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 4)},
				Queues:    queues(),
			}
			for i := 0; i < 4; i++ {
				tc.Pods = append(tc.Pods, onlyVGPUPod(fmt.Sprintf("w%d", i), "pg", c.limits))
			}
			ssn, _ := session(t, tc, true, nil, enqueue.New(), allocate.New(), backfill.New())
			placed, withCards := 0, len(taskAssignments(t, ssn))
			for _, job := range ssn.Jobs {
				for _, task := range job.Tasks {
					if task.NodeName != "" {
						placed++
					}
				}
			}
			if placed != c.want || withCards != c.want {
				t.Fatalf("%d members placed, %d with cards; want %d and %d (a gang is all or nothing, and never bound without cards): %s",
					placed, withCards, c.want, c.want, jobState(ssn, "pg"))
			}
			if c.reason != "" {
				if got := jobMessage(ssn); !strings.Contains(got, c.reason) {
					t.Fatalf("the job says %q, want %q", got, c.reason)
				}
			}
		})
	}
}

// An unbound pod that carries an assignment (Volcano wrote the session's copy back
// without binding it) does not keep it: it can neither be trusted nor travel on a
// later Binding.
func TestUnboundPodLosesAStaleAssignment(t *testing.T) {
	stale := vgpuPod("stale", "pg", 1, 35000, 30, nil)
	stale.Annotations[api.AnnotationAssignment] = `{"version":"v1","node":"n1","qos":"fixed-share","containers":[{"name":"main","cards":[{"uuid":"GPU-n1-0","memoryMiB":30000,"cores":30}]}]}`
	stale.Annotations[api.AnnotationHandoff] = api.HandoffPending
	tc := &uthelper.TestCommonStruct{
		// The only card is taken by a running pod: the stale pod cannot be placed now.
		Nodes:     []*corev1.Node{gpuNode("n1", 1, "NVIDIA A100", 40960)},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1), podGroup("pg-busy", 1)},
		Pods:      []*corev1.Pod{stale, runningOn("busy", "n1", api.QoSFixedShare, "GPU-n1-0")},
		Queues:    queues(),
	}
	ssn, p := session(t, tc, true, nil)
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			if task.Name != "stale" {
				continue
			}
			if task.NodeName != "" {
				t.Fatalf("the stale pod was placed on %s; the card is full", task.NodeName)
			}
			for _, k := range []string{api.AnnotationAssignment, api.AnnotationHandoff} {
				if v, ok := task.Pod.Annotations[k]; ok {
					t.Errorf("the unbound pod still carries %s=%s", k, v)
				}
			}
		}
	}
	// The running pod's cards are counted once: 10000 MiB of 40960.
	if mem, _, tenants := usedCards(p, "n1"); mem != 10000 || tenants != 1 {
		t.Fatalf("card holds %d MiB for %d tenants, want 10000 for 1", mem, tenants)
	}
}

// A bound pod whose assignment names another node than the one it is bound to
// (a stale copy written back, then bound elsewhere) is not trusted: the ledger takes
// this scheduler's in-flight assignment for it, and never books cards it does not hold.
func TestAssignmentForAnotherNodeIsIgnored(t *testing.T) {
	moved := runningOn("moved", "n1", api.QoSFixedShare, "GPU-n1-0")
	moved.Spec.NodeName = "n2"
	tc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{gpuNode("n1", 1, "NVIDIA A100", 40960), gpuNode("n2", 1, "NVIDIA A100", 40960)},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg-moved", 1)},
		Pods:      []*corev1.Pod{moved},
		Queues:    queues(),
	}
	testSched = NewScheduler()
	testSched.inFlight.Put(moved.UID, &api.PodAssignment{Version: api.AssignmentVersion, Node: "n2", QoS: api.QoSFixedShare,
		Containers: []api.ContainerAssignment{{Name: "main", Cards: []api.CardAssignment{{UUID: "GPU-n2-0", MemoryMiB: 12000, Cores: 30}}}}},
		time.Now())
	_, p := open(t, tc, tiers(true, nil))
	if _, kept := testSched.inFlight.Get(moved.UID); !kept {
		t.Error("the in-flight assignment was dropped although the pod's own names another node")
	}
	if mem, _, _ := usedCards(p, "n1"); mem != 0 {
		t.Errorf("node n1: %d MiB booked for a pod bound to n2", mem)
	}
	if mem, _, _ := usedCards(p, "n2"); mem != 12000 {
		t.Errorf("node n2: %d MiB booked, want the in-flight assignment's 12000", mem)
	}
}

// When preempt or reclaim discards a statement that evicted a vGPU task, the queue
// share is exactly as before: the queue is not refused tasks on free cards after it.
func TestDiscardedEvictionLeavesTheQueueShareAsItWas(t *testing.T) {
	tc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{gpuNode("n1", 2, "NVIDIA A100", 40960)},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg-victim", 1)},
		Pods:      []*corev1.Pod{runningOn("victim", "n1", api.QoSFixedShare, "GPU-n1-0")},
		Queues:    queues(),
	}
	testSched = NewScheduler()
	ssn, p := open(t, tc, tiers(true, nil))
	snapshot := func() string {
		var out string
		for _, q := range p.shares.Standings() {
			out += fmt.Sprintf("%s: allocated %s, request %s, deserved %s; ", q.Name, q.Allocated, q.Requested, q.Deserved)
		}
		return out
	}
	before := snapshot()
	var victim *vapi.TaskInfo
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			victim = task
		}
	}
	stmt := framework.NewStatement(ssn)
	if err := stmt.Evict(victim, "preempt"); err != nil {
		t.Fatal(err)
	}
	if snapshot() == before {
		t.Fatal("the eviction did not change the queue share at all")
	}
	stmt.Discard()
	if after := snapshot(); after != before {
		t.Fatalf("after a discarded eviction the queue share is\n  %s\nwant\n  %s", after, before)
	}
}

// A gang whose members are partly pipelined is whole: job validity counts them.
func TestPipelinedMembersCountForTheGang(t *testing.T) {
	tc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{gpuNode("n1", 2, "NVIDIA A100", 40960), gpuNode("n2", 2, "NVIDIA A100", 40960)},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 4)},
		Queues:    queues(),
	}
	for i := 0; i < 4; i++ {
		tc.Pods = append(tc.Pods, vgpuPod(fmt.Sprintf("w%d", i), "pg", 1, 40960, 100, nil))
	}
	testSched = NewScheduler()
	// Without the predicates plugin: its reserve step needs the state of a predicate
	// run, which pipelining by hand does not have.
	ts := tiers(true, nil)
	var kept []conf.PluginOption
	for _, o := range ts[0].Plugins {
		if o.Name != predicates.PluginName {
			kept = append(kept, o)
		}
	}
	ts[0].Plugins = kept
	ssn, p := open(t, tc, ts)
	var job *vapi.JobInfo
	for _, j := range ssn.Jobs {
		job = j
	}
	stmt := framework.NewStatement(ssn)
	n := 0
	for _, task := range job.TaskStatusIndex[vapi.Pending] {
		if n == 2 {
			break
		}
		if err := stmt.Pipeline(task, "n2", false); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if got := len(job.TaskStatusIndex[vapi.Pipelined]); got != 2 {
		t.Fatalf("%d members pipelined, want 2", got)
	}
	if vr := p.jobValid(job); vr != nil && !vr.Pass {
		t.Fatalf("a gang of 2 pipelined and 2 placeable members of 4 is reported invalid: %s", vr.Message)
	}
}

// A queue whose weighted share is smaller than its task does not leave cards idle:
// either it places that task from below its share, or another queue borrows the
// cards it cannot use (issue 13: 100 cores sat idle with both queues pending).
func TestQueueShareSmallerThanATaskLeavesNoCardIdle(t *testing.T) {
	tc := &uthelper.TestCommonStruct{
		Nodes:  []*corev1.Node{gpuNode("n1", 4, "NVIDIA A100", 40960)},
		Queues: []*schedulingv1.Queue{util.BuildQueue("big", 3, nil), util.BuildQueue("small", 1, nil)},
	}
	for i := 0; i < 4; i++ {
		pg := fmt.Sprintf("big-%d", i)
		tc.PodGroups = append(tc.PodGroups, util.BuildPodGroup(pg, "ns", "big", 1, nil, schedulingv1.PodGroupInqueue))
		tc.Pods = append(tc.Pods, vgpuPod(pg, pg, 1, 40960, 100, nil))
	}
	tc.PodGroups = append(tc.PodGroups, util.BuildPodGroup("small-0", "ns", "small", 1, nil, schedulingv1.PodGroupInqueue))
	tc.Pods = append(tc.Pods, vgpuPod("small-0", "small-0", 2, 40960, 100, nil))
	ssn, p := session(t, tc, true, nil)
	if _, cores, _ := usedCards(p, "n1"); cores != 400 {
		t.Fatalf("%d of 400 card cores assigned with vGPU tasks of both queues pending; placed %v", cores, placedPerQueue(t, ssn))
	}
	t.Logf("placed per queue: %v", placedPerQueue(t, ssn))
}

// enqueue admits a gang only if its queue could ever hold its minimum within the
// queue's capability for card cores or memory.
func TestGangBeyondItsQueueCapabilityIsNotEnqueued(t *testing.T) {
	capped := util.BuildQueue("capped", 1, corev1.ResourceList{api.ResourceCores: resource.MustParse("100")})
	pg := util.BuildPodGroup("pg", "ns", "capped", 2, nil, schedulingv1.PodGroupPending)
	// Volcano asks the enqueue plugins only about PodGroups with minResources, which
	// its job controller always sets.
	pg.Spec.MinResources = &corev1.ResourceList{}
	tc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{gpuNode("n1", 4, "NVIDIA A100", 40960)},
		Queues:    []*schedulingv1.Queue{capped},
		PodGroups: []*schedulingv1.PodGroup{pg},
		Pods:      []*corev1.Pod{vgpuPod("w0", "pg", 1, 8192, 75, nil), vgpuPod("w1", "pg", 1, 8192, 75, nil)},
	}
	ssn, _ := session(t, tc, true, nil, enqueue.New(), allocate.New())
	want := "queue capped's capability of 100% of card cores is less than the 150% its 2 members need"
	for _, job := range ssn.Jobs {
		if string(job.PodGroup.Status.Phase) != string(schedulingv1.PodGroupPending) {
			t.Errorf("the gang went %s; its queue can never hold it", job.PodGroup.Status.Phase)
		}
		if !strings.Contains(job.JobFitErrors, want) {
			t.Errorf("the gang says %q, want %q", job.JobFitErrors, want)
		}
	}
}
