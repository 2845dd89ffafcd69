package vgpu

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	fakevc "volcano.sh/apis/pkg/client/clientset/versioned/fake"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins/util"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	vutil "volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
)

// volcanoJob is a VolcanoJob as a user submits it: one task of replicas pods whose
// container asks for cards × (memMiB, cores) in limits only (cards 0: CPU only), all
// of them its gang.
func volcanoJob(name, queue string, replicas int32, cards, memMiB, cores int64) *batchv1alpha1.Job {
	limits := corev1.ResourceList{}
	if cards > 0 {
		limits[api.ResourceNumber] = *resource.NewQuantity(cards, resource.DecimalSI)
		limits[api.ResourceMemory] = *resource.NewQuantity(memMiB, resource.DecimalSI)
		limits[api.ResourceCores] = *resource.NewQuantity(cores, resource.DecimalSI)
	}
	return &batchv1alpha1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: k8stypes.UID("uid-" + name)},
		Spec: batchv1alpha1.JobSpec{Queue: queue, MinAvailable: replicas, Tasks: []batchv1alpha1.TaskSpec{{Name: "worker", Replicas: replicas,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}, Limits: limits}}}}}}}},
		Status: batchv1alpha1.JobStatus{State: batchv1alpha1.JobState{Phase: batchv1alpha1.Pending}},
	}
}

// jobGroup is the PodGroup Volcano's job controller makes for a VolcanoJob: same name,
// the job as its controller, minMember the job's minAvailable.
func jobGroup(j *batchv1alpha1.Job, phase schedulingv1.PodGroupPhase) *schedulingv1.PodGroup {
	pg := vutil.BuildPodGroup(j.Name, j.Namespace, j.Spec.Queue, j.Spec.MinAvailable, nil, phase)
	pg.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(j, batchv1alpha1.SchemeGroupVersion.WithKind("Job"))}
	return pg
}

// jobPod is the pod the job controller creates for member i of j's task.
func jobPod(j *batchv1alpha1.Job, i int) *corev1.Pod {
	spec := j.Spec.Tasks[0]
	p := vgpuPod(fmt.Sprintf("%s-%s-%d", j.Name, spec.Name, i), j.Name, 0, 0, 0, nil)
	p.Spec.Containers[0].Resources = *spec.Template.Spec.Containers[0].Resources.DeepCopy()
	p.Annotations[batchv1alpha1.TaskSpecKey] = spec.Name
	return p
}

// watchJobs starts the test scheduler's VolcanoJob watch on a fake client holding
// jobs and waits until it has them all.
func watchJobs(t *testing.T, jobs ...*batchv1alpha1.Job) {
	t.Helper()
	objs := make([]runtime.Object, len(jobs))
	for i, j := range jobs {
		objs[i] = j
	}
	testSched.templates.start(fakevc.NewSimpleClientset(objs...))
	t.Cleanup(testSched.Close)
	deadline := time.Now().Add(10 * time.Second)
	for testSched.templates.count() != len(jobs) {
		if time.Now().After(deadline) {
			t.Fatalf("the VolcanoJob watch holds %d of %d jobs after 10 s", testSched.templates.count(), len(jobs))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two queues of equal weight on 800 card cores. Early's job has its 32 pods of 25
// cores; late's VolcanoJob of the same size is still Pending, so the job controller
// has created none of its pods. Counting only pods, early would deserve every card
// and take them all (gangs it cannot give back); counting late's templates, each
// queue deserves 400 cores, and early places 16 tasks.
func TestUnseenMembersCountTowardTheQueueShares(t *testing.T) {
	for _, tt := range []struct {
		name        string
		watch       bool
		wantEarly   int
		wantLateAsk float64
	}{
		{"pods only (no VolcanoJob watch)", false, 32, 0},
		{"templates of members not yet created", true, 16, 800},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := contention(32, vutil.BuildQueue("early", 1, nil))
			tc.Queues = append(tc.Queues, vutil.BuildQueue("late", 1, nil))
			late := volcanoJob("late", "late", 32, 1, 4096, 25)
			cpu := volcanoJob("late-cpu", "late", 4, 0, 0, 0)
			bad := volcanoJob("late-bad", "late", 2, 1, 4096, 25)
			bad.Spec.Tasks[0].Template.Annotations = map[string]string{api.AnnotationCardPolicy: "sideways"}
			for _, j := range []*batchv1alpha1.Job{late, cpu, bad} {
				tc.PodGroups = append(tc.PodGroups, jobGroup(j, schedulingv1.PodGroupPending))
			}
			testSched = NewScheduler()
			if tt.watch {
				watchJobs(t, late, cpu, bad)
			}
			ssn, p := open(t, tc, tiers(true, nil))
			lateAsk := 0.0
			for _, q := range p.shares.Standings() {
				if q.Name == "late" {
					lateAsk = q.Requested.Cores
				}
			}
			if lateAsk != tt.wantLateAsk {
				t.Errorf("queue late asks for %v card cores, want %v (32 × 25 from the template; the CPU-only and the unreadable job add nothing)",
					lateAsk, tt.wantLateAsk)
			}
			tc.Run([]framework.Action{allocate.New()})
			if got := placedPerQueue(t, ssn)["early"]; got != tt.wantEarly {
				t.Errorf("early placed %d tasks, want %d", got, tt.wantEarly)
			}
		})
	}
}

// Members are counted once: a job whose controller has created some of its pods
// asks, beyond them, only for the members still missing; a job whose PodGroup runs
// asks for nothing from its templates.
func TestUnseenMembersAreTheMissingOnes(t *testing.T) {
	testSched = NewScheduler()
	half := volcanoJob("half", "q1", 4, 1, 4096, 25)
	running := volcanoJob("running", "q1", 4, 1, 4096, 25)
	watchJobs(t, half, running)
	tc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{gpuNode("n1", 4, "NVIDIA A100", 40960)},
		Queues:    queues(),
		PodGroups: []*schedulingv1.PodGroup{jobGroup(half, schedulingv1.PodGroupInqueue), jobGroup(running, schedulingv1.PodGroupRunning)},
		Pods:      []*corev1.Pod{jobPod(half, 0), jobPod(half, 1)},
	}
	ssn, p := open(t, tc, tiers(true, nil))
	for _, job := range ssn.Jobs {
		got := len(p.unseen(job).vgpu)
		want := map[string]int{"half": 2, "running": 0}[job.Name]
		if got != want {
			t.Errorf("job %s: %d unseen vGPU members, want %d", job.Name, got, want)
		}
	}
	if got := requested(p, "q1").Cores; got != 100 {
		t.Errorf("queue q1 asks for %v card cores, want 100 (two pods and two missing members of 25)", got)
	}
}

// Enqueue judges a VolcanoJob by its templates before its pods exist: a gang that
// cannot fit in the free cards stays out, with the reason on its PodGroup, and a
// CPU-only job is left to the other plugins.
func TestEnqueueJudgesAVolcanoJobByItsTemplates(t *testing.T) {
	testSched = NewScheduler()
	big := volcanoJob("big", "q1", 6, 1, 40960, 100) // six whole cards, four in the cluster
	small := volcanoJob("small", "q1", 2, 1, 4096, 25)
	cpu := volcanoJob("cpu", "q1", 8, 0, 0, 0)
	watchJobs(t, big, small, cpu)
	tc := &uthelper.TestCommonStruct{
		Nodes:  []*corev1.Node{gpuNode("n1", 4, "NVIDIA A100", 40960)},
		Queues: queues(),
		PodGroups: []*schedulingv1.PodGroup{jobGroup(big, schedulingv1.PodGroupPending), jobGroup(small, schedulingv1.PodGroupPending),
			jobGroup(cpu, schedulingv1.PodGroupPending)},
	}
	ssn, p := open(t, tc, tiers(true, nil))
	want := map[string]int{"big": util.Reject, "small": util.Abstain, "cpu": util.Abstain}
	for _, job := range ssn.Jobs {
		if got := p.jobEnqueueable(job); got != want[job.Name] {
			t.Errorf("job %s: enqueueable %d, want %d", job.Name, got, want[job.Name])
		}
	}
	// Volcano's gang plugin reports only jobs with pods: the plugin writes the reason.
	p.reportPodless(ssn)
	const wantMsg = "vgpu: the gang can never fit: 245760 MiB of card memory needed by 6 members, 163840 MiB in the whole cluster"
	for _, job := range ssn.Jobs {
		var got string
		for _, c := range job.PodGroup.Status.Conditions {
			if c.Type == "Unschedulable" && c.Status == corev1.ConditionTrue {
				got = c.Message
			}
		}
		if job.Name == "big" && got != wantMsg {
			t.Errorf("job big's PodGroup says %q, want %q", got, wantMsg)
		}
		if job.Name != "big" && got != "" {
			t.Errorf("job %s's PodGroup says %q; it was not refused", job.Name, got)
		}
	}
}

// Every node is cordoned (drained for maintenance). A gang that fits the cluster's
// cards waits for them to be free; it is not told it can never fit, as it was when
// cordoned nodes' cards did not count as the cluster's.
func TestEnqueueOnACordonedClusterWaitsForCards(t *testing.T) {
	testSched = NewScheduler()
	gang := volcanoJob("gang", "q1", 2, 1, 4096, 25)
	watchJobs(t, gang)
	node := gpuNode("n1", 4, "NVIDIA A100", 40960)
	node.Spec.Unschedulable = true
	tc := &uthelper.TestCommonStruct{Nodes: []*corev1.Node{node}, Queues: queues(),
		PodGroups: []*schedulingv1.PodGroup{jobGroup(gang, schedulingv1.PodGroupPending)}}
	ssn, p := open(t, tc, tiers(true, nil))
	for _, job := range ssn.Jobs {
		if got := p.jobEnqueueable(job); got != util.Reject {
			t.Fatalf("enqueueable %d on a cluster whose every card is cordoned, want %d", got, util.Reject)
		}
		const want = "vgpu: 2 card shares needed by 2 members, 0 free in the cluster"
		if job.JobFitErrors != want {
			t.Errorf("refused with %q, want %q", job.JobFitErrors, want)
		}
	}
}

// Every card is held by low-priority pods of the queue. A VolcanoJob of higher priority
// is enqueued all the same, so that preempt can free cards for its pods once they
// exist; one of the same priority as the holders stays out until cards are free.
func TestEnqueueAdmitsAVolcanoJobThatMayPreempt(t *testing.T) {
	testSched = NewScheduler()
	high := volcanoJob("high", "q1", 2, 1, 40960, 100)
	same := volcanoJob("same", "q1", 2, 1, 40960, 100)
	watchJobs(t, high, same)
	tc := &uthelper.TestCommonStruct{
		Nodes:    []*corev1.Node{gpuNode("n1", 4, "NVIDIA A100", 40960)},
		Queues:   queues(),
		PriClass: []*schedv1.PriorityClass{vutil.BuildPriorityClass("low", 10), vutil.BuildPriorityClass("high", 1000)},
	}
	for _, j := range []*batchv1alpha1.Job{high, same} {
		pg := jobGroup(j, schedulingv1.PodGroupPending)
		pg.Spec.PriorityClassName = map[string]string{"high": "high", "same": "low"}[j.Name]
		tc.PodGroups = append(tc.PodGroups, pg)
	}
	tc.PodGroups = append(tc.PodGroups, prioGroup("pg-low", "low"))
	for i := 0; i < 4; i++ {
		p := holding(fmt.Sprintf("low-%d", i), "n1", fmt.Sprintf("GPU-n1-%d", i), 100, 10)
		p.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-low"
		tc.Pods = append(tc.Pods, p)
	}
	ssn, p := open(t, tc, evictTiers())
	want := map[string]int{"high": util.Abstain, "same": util.Reject}
	for _, job := range ssn.Jobs {
		if w, ok := want[job.Name]; ok {
			if got := p.jobEnqueueable(job); got != w {
				t.Errorf("job %s (priority %d): enqueueable %d, want %d", job.Name, job.Priority, got, w)
			}
		}
	}
}
