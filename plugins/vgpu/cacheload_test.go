package vgpu

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"volcano.sh/apis/pkg/apis/scheduling"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/framework"
	vutil "volcano.sh/volcano/pkg/scheduler/plugins/util"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
)

func TestFindCacheGaps(t *testing.T) {
	p := &vgpuPlugin{}
	p.args.Resources = api.DefaultResourceNames()
	held := runningOn("held", "n1", api.QoSFixedShare, "GPU-n1-0")
	missing := runningOn("missing", "n1", api.QoSFixedShare, "GPU-n1-1")
	// The pod of that name the cache holds is an earlier one, deleted since.
	recreated := runningOn("recreated", "n1", api.QoSFixedShare, "GPU-n1-2")
	earlier := recreated.DeepCopy()
	earlier.UID = "earlier-" + recreated.UID
	finished := runningOn("finished", "n1", api.QoSFixedShare, "GPU-n1-3")
	finished.Status.Phase = corev1.PodSucceeded
	unassigned := vgpuPod("unassigned", "pg-unassigned", 1, 1000, 10, nil)
	unassigned.Spec.NodeName = "n1"
	cpu := cpuPod("cpu", "pg-cpu")
	cpu.Spec.NodeName = "n1"
	pending := vgpuPod("pending", "pg-pending", 1, 1000, 10, nil)
	// On a node the session does not hold: one whose job is in the session without
	// it, one whose job is not in the session (another scheduler's), one whose job
	// holds it.
	away := runningOn("away", "n2", api.QoSFixedShare, "GPU-n2-0")
	foreign := runningOn("foreign", "n2", api.QoSFixedShare, "GPU-n2-1")
	awayHeld := runningOn("away-held", "n2", api.QoSFixedShare, "GPU-n2-2")

	n1 := vapi.NewNodeInfo(gpuNode("n1", 4, "NVIDIA A100", 40960))
	for _, pod := range []*corev1.Pod{held, earlier} {
		if err := n1.AddTask(vapi.NewTaskInfo(pod)); err != nil {
			t.Fatal(err)
		}
	}
	jobs := map[vapi.JobID]*vapi.JobInfo{}
	for _, pod := range []*corev1.Pod{away, awayHeld} {
		id := vapi.JobID(pod.Namespace + "/" + pod.Annotations[schedulingv1beta1.KubeGroupNameAnnotationKey])
		jobs[id] = vapi.NewJobInfo(id)
	}
	jobs[vapi.JobID("ns/pg-away-held")].AddTaskInfo(vapi.NewTaskInfo(awayHeld))
	jobs["ns/pg-missing"] = vapi.NewJobInfo("ns/pg-missing")

	pods := []*corev1.Pod{held, missing, recreated, finished, unassigned, cpu, pending, away, foreign, awayHeld}
	g := findCacheGaps(pods, map[string]*vapi.NodeInfo{"n1": n1}, jobs, p.holdsCards)
	if g.byNode["n1"] != 2 || len(g.byNode) != 1 {
		t.Errorf("byNode = %v, want n1: 2 (missing, recreated)", g.byNode)
	}
	if g.elsewhere != 1 {
		t.Errorf("elsewhere = %d, want 1 (away)", g.elsewhere)
	}
	if g.missing() != 3 {
		t.Errorf("missing = %d, want 3", g.missing())
	}
	if len(g.jobs) != 2 || !g.jobs["ns/pg-missing"] || !g.jobs["ns/pg-away"] {
		t.Errorf("jobs = %v, want the session's two that lack a pod: ns/pg-missing, ns/pg-away", g.jobs)
	}
}

// lagging runs one allocate session over a scheduler cache whose event handlers have
// not added a running pod the informer already listed (Volcano v1.14.1 schedules
// before they have: volcano-sh/volcano#5174). The running pod holds 30000 MiB of the
// node's only 40960-MiB card; a pending pod asks for 30000 MiB more. listed says
// whether the scheduler's pod informer holds the running pod (without it the plugin
// cannot see the gap: the control).
func lagging(t *testing.T, listed, caughtUp bool, setup ...func(*cache.SchedulerCache)) lagged {
	t.Helper()
	var out lagged
	testSched = NewScheduler()
	writes := &podGroupWrites{}
	sc := cache.NewCustomMockSchedulerCache("utmock-scheduler", util.NewFakeBinder(10), util.NewFakeEvictor(0), writes, nil, nil)
	sc.AddOrUpdateNode(gpuNode("n1", 1, "NVIDIA A100", 40960))
	sc.AddQueueV1beta1(util.BuildQueue("q1", 1, nil))
	running := runningOn("running", "n1", api.QoSFixedShare, "GPU-n1-0")
	running.UID = types.UID("uid-running")
	running.Annotations[api.AnnotationAssignment] = strings.Replace(running.Annotations[api.AnnotationAssignment],
		`"memoryMiB":10000`, `"memoryMiB":30000`, 1)
	// Its PodGroup as the scheduler before this one left it.
	pgRunning := podGroup("pg-running", 1)
	pgRunning.Status.Phase, pgRunning.Status.Running = schedulingv1beta1.PodGroupRunning, 1
	sc.AddPodGroupV1beta1(pgRunning)
	sc.AddPodGroupV1beta1(podGroup("pg-new", 1))
	sc.AddPod(vgpuPod("new", "pg-new", 1, 30000, 30, nil))
	if caughtUp {
		sc.AddPod(running)
	}
	for _, f := range setup {
		f(sc)
	}
	uthelper.RegisterPlugins(builders(&out.p))
	t.Cleanup(framework.CleanupPluginBuilders)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	sc.Run(stop) // starts the informers, with Volcano's handlers, over an empty API server
	if listed {
		// In the informer's store, not passed to Volcano's handlers: the lag.
		if err := sc.SharedInformerFactory().Core().V1().Pods().Informer().GetStore().Add(running); err != nil {
			t.Fatal(err)
		}
	}

	ssn := framework.OpenSession(sc, tiers(true, nil), nil)
	act := allocate.New()
	act.Initialize()
	act.Execute(ssn)
	act.UnInitialize()
	out.jobs = map[vapi.JobID]bool{}
	for id := range ssn.Jobs {
		out.jobs[id] = true
	}
	out.placed = taskAssignments(t, ssn)
	framework.CloseSession(ssn)
	out.writes = writes.byName
	return out
}

type lagged struct {
	placed map[string]*api.PodAssignment
	p      *vgpuPlugin
	// jobs are the session's jobs after it opened; writes, the PodGroup phases its
	// close wrote, by PodGroup name.
	jobs   map[vapi.JobID]bool
	writes map[string]scheduling.PodGroupPhase
}

// podGroupWrites records the PodGroup statuses a session writes.
type podGroupWrites struct {
	util.FakeStatusUpdater
	mu     sync.Mutex
	byName map[string]scheduling.PodGroupPhase
}

func (w *podGroupWrites) UpdatePodGroup(pg *vapi.PodGroup) (*vapi.PodGroup, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byName == nil {
		w.byName = map[string]scheduling.PodGroupPhase{}
	}
	w.byName[pg.Name] = pg.Status.Phase
	return pg, nil
}

func TestNodeWithPodsNotYetInTheCacheTakesNoVGPUTask(t *testing.T) {
	r := lagging(t, true, false)
	placed, p, jobs := r.placed, r.p, r.jobs
	if a := placed["new"]; a != nil {
		t.Fatalf("the new pod got %+v on a card whose running pod the cache had not loaded: double-booked", a)
	}
	if _, why := p.ledger.Answer("n1", 0, nil); !strings.Contains(why, "does not hold 1 of the node's running vGPU pods") {
		t.Errorf("n1's reason = %q, want the cache gap", why)
	}
	if p.cacheMissing != 1 {
		t.Errorf("cacheMissing = %d, want 1", p.cacheMissing)
	}
	if n := testutil.ToFloat64(p.metrics.notInCache); n != 1 {
		t.Errorf("tessera_scheduler_vgpu_pods_not_in_cache = %v, want 1", n)
	}
	// The running pod's job sat the session out: Volcano would have written its
	// PodGroup back from no members at the session's close.
	if jobs["ns/pg-running"] || !jobs["ns/pg-new"] {
		t.Errorf("session jobs = %v, want ns/pg-new without ns/pg-running", jobs)
	}
	if phase, written := r.writes["pg-running"]; written {
		t.Errorf("the running job's PodGroup was written back %s from a cache that lacked its pod", phase)
	}
}

func TestWithoutTheInformerTheLaggingCacheDoubleBooks(t *testing.T) {
	// The control for the test above: the window is real.
	r := lagging(t, false, false)
	if r.placed["new"] == nil {
		t.Fatal("expected the double booking the cache check prevents; the test above proves nothing")
	}
	// And Volcano writes the running job's PodGroup back Pending: it sees none of its members.
	if phase := r.writes["pg-running"]; phase != scheduling.PodGroupPending {
		t.Errorf("the running job's PodGroup was written %q, want the Pending the job's sitting out prevents", phase)
	}
}

func TestCaughtUpCacheIsNoGap(t *testing.T) {
	r := lagging(t, true, true)
	placed, p, jobs := r.placed, r.p, r.jobs
	if placed["new"] != nil {
		t.Fatal("the new pod was placed on a full card")
	}
	if _, unusable, _ := p.ledger.Counts(); p.cacheMissing != 0 || unusable != 0 {
		t.Errorf("cacheMissing = %d, unusable nodes = %d; the cache holds every pod", p.cacheMissing, unusable)
	}
	if mem, _, _ := usedCards(p, "n1"); mem != 30000 {
		t.Errorf("n1 holds %d MiB, want the running pod's 30000", mem)
	}
	if !jobs["ns/pg-running"] {
		t.Errorf("session jobs = %v, want ns/pg-running back", jobs)
	}
}

// While the cache lacks a bound vGPU pod, the queue shares and the free cards are not
// known: the plugin evicts nothing and keeps no gang out on them.
func TestLoadingCacheEvictsNothingAndRefusesNoGang(t *testing.T) {
	p := lagging(t, true, false).p
	if p.cacheMissing == 0 {
		t.Fatal("the session saw no gap")
	}
	// Two cards, when the cluster has one: refused on any complete view.
	big := vgpuPod("big", "pg-big", 2, 1000, 10, nil)
	job := vapi.NewJobInfo("ns/pg-big", vapi.NewTaskInfo(big))
	job.MinAvailable = 1
	job.Queue = "q1"
	if got := p.jobEnqueueable(job); got != vutil.Abstain {
		t.Errorf("jobEnqueueable = %d, want Abstain (%d) while the cache loads", got, vutil.Abstain)
	}
	if res := p.jobValid(job); res != nil {
		t.Errorf("jobValid = %+v, want nil while the cache loads", res)
	}
	victim := vapi.NewTaskInfo(runningOn("victim", "n1", api.QoSFixedShare, "GPU-n1-0"))
	if set, vote := p.victims(vapi.NewTaskInfo(vgpuPod("evictor", "pg-e", 1, 1000, 10, nil)), []*vapi.TaskInfo{victim}); len(set) != 0 || vote != vutil.Permit {
		t.Errorf("victims = %v, %d; want none, Permit", set, vote)
	}

	p.cacheMissing = 0 // the control: the same gang on the same ledger, the cache complete
	if got := p.jobEnqueueable(job); got != vutil.Reject {
		t.Errorf("control: jobEnqueueable = %d, want Reject (%d)", got, vutil.Reject)
	}
}

// BenchmarkFindCacheGaps is the check's cost each session at the 1,000-node scale
// run's size: 8,000 bound vGPU pods on 1,000 nodes plus 1,238 CPU-only pods, every
// one in the cache (the steady state, when the check finds nothing).
//
//	go test -run '^$' -bench FindCacheGaps ./plugins/vgpu
func BenchmarkFindCacheGaps(b *testing.B) {
	p := &vgpuPlugin{}
	p.args.Resources = api.DefaultResourceNames()
	nodes := map[string]*vapi.NodeInfo{}
	var pods []*corev1.Pod
	for n := 0; n < 1000; n++ {
		name := fmt.Sprintf("gpu-%04d", n)
		ni := vapi.NewNodeInfo(gpuNode(name, 8, "NVIDIA A100", 81920))
		for c := 0; c < 8; c++ {
			pod := runningOn(fmt.Sprintf("p-%d-%d", n, c), name, api.QoSFixedShare, fmt.Sprintf("GPU-%s-%d", name, c))
			pod.UID = types.UID(pod.Name)
			pods = append(pods, pod)
			if err := ni.AddTask(vapi.NewTaskInfo(pod)); err != nil {
				b.Fatal(err)
			}
		}
		nodes[name] = ni
	}
	for i := 0; i < 1238; i++ {
		pod := cpuPod(fmt.Sprintf("cpu-%d", i), "pg-cpu")
		pod.Spec.NodeName = fmt.Sprintf("gpu-%04d", i%1000)
		pods = append(pods, pod)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if g := findCacheGaps(pods, nodes, nil, p.holdsCards); g.missing() != 0 {
			b.Fatalf("found %d missing", g.missing())
		}
	}
}

// A job sitting out is not gone: the in-flight assignment of its member this scheduler
// has just bound (in the cache, its annotation not yet back) stays, or the next session
// would book that member's cards again.
func TestJobSittingOutKeepsItsInFlightAssignment(t *testing.T) {
	flying := vgpuPod("flying", "pg-running", 1, 8000, 20, nil)
	flying.UID = "uid-flying"
	flying.Spec.NodeName = "n1"
	flying.Status.Phase = corev1.PodRunning
	r := lagging(t, true, false, func(sc *cache.SchedulerCache) {
		sc.AddPod(flying)
		testSched.inFlight.Put(flying.UID, &api.PodAssignment{Version: api.AssignmentVersion, Node: "n1", QoS: api.QoSFixedShare,
			Containers: []api.ContainerAssignment{{Name: "main", Cards: []api.CardAssignment{{UUID: "GPU-n1-0", MemoryMiB: 8000, Cores: 20}}}}},
			time.Now())
	})
	if r.jobs["ns/pg-running"] {
		t.Fatal("the job lacking its running pod did not sit the session out")
	}
	if _, kept := testSched.inFlight.Get(flying.UID); !kept {
		t.Error("the in-flight assignment of a member of a job sitting out was dropped")
	}
}
