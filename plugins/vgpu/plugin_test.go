package vgpu

import (
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/actions/enqueue"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/uthelper"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// session runs one scheduling cycle and returns the session (still open) and the
// vgpu plugin it built.
func session(t *testing.T, tc *uthelper.TestCommonStruct, withVGPU bool, args framework.Arguments, actions ...framework.Action) (*framework.Session, *vgpuPlugin) {
	t.Helper()
	testSched = NewScheduler()
	ssn, p := open(t, tc, tiers(withVGPU, args))
	if len(actions) == 0 {
		actions = []framework.Action{allocate.New()}
	}
	tc.Run(actions)
	return ssn, p
}

// open registers the plugins and opens a session on tc without running any action; it
// returns the session and the vgpu plugin it built. The in-flight store is the caller's.
func open(t *testing.T, tc *uthelper.TestCommonStruct, ts []conf.Tier) (*framework.Session, *vgpuPlugin) {
	t.Helper()
	var p *vgpuPlugin
	tc.Plugins = builders(&p)
	ssn := tc.RegisterSession(ts, nil)
	t.Cleanup(tc.Close)
	t.Cleanup(testSched.Close) // the VolcanoJob watch the session started
	return ssn, p
}

// taskAssignments returns each task's decoded assignment from the session's pods.
func taskAssignments(t *testing.T, ssn *framework.Session) map[string]*api.PodAssignment {
	t.Helper()
	out := map[string]*api.PodAssignment{}
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			s, ok := task.Pod.Annotations[api.AnnotationAssignment]
			if !ok {
				continue
			}
			a, err := api.DecodeAssignment(s)
			if err != nil {
				t.Fatalf("task %s carries a bad assignment: %v", task.Name, err)
			}
			if a.Node != task.NodeName {
				t.Fatalf("task %s bound to %s but assigned cards on %s", task.Name, task.NodeName, a.Node)
			}
			out[task.Name] = a
		}
	}
	return out
}

func usedCards(p *vgpuPlugin, node string) (mem int64, cores, tenants int) {
	p.ledger.EachCard(func(on string, c *placement.CardState) {
		if on == node {
			mem += c.Used.MemoryMiB
			cores += c.Used.Cores
			tenants += c.Used.Tenants
		}
	})
	return
}

func TestGangOfFourLandsAllOrNothing(t *testing.T) {
	tc := &uthelper.TestCommonStruct{
		Name:      "a 4-member gang of exclusive cards fills two 2-card nodes",
		Nodes:     []*corev1.Node{gpuNode("n1", 2, "NVIDIA A100", 40960), gpuNode("n2", 2, "NVIDIA A100", 40960)},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 4)},
		Pods: []*corev1.Pod{vgpuPod("w0", "pg", 1, 40960, 100, nil), vgpuPod("w1", "pg", 1, 40960, 100, nil),
			vgpuPod("w2", "pg", 1, 40960, 100, nil), vgpuPod("w3", "pg", 1, 40960, 100, nil)},
		Queues: queues(),
	}
	ssn, _ := session(t, tc, true, nil)
	got := taskAssignments(t, ssn)
	if len(got) != 4 {
		t.Fatalf("%d of 4 members got cards, want all", len(got))
	}
	seen := map[string]string{}
	for name, a := range got {
		for _, card := range a.Containers[0].Cards {
			if other, dup := seen[card.UUID]; dup {
				t.Fatalf("card %s given to both %s and %s", card.UUID, other, name)
			}
			seen[card.UUID] = name
		}
	}
	if testSched.inFlight.Len() != 4 {
		t.Fatalf("in-flight store holds %d assignments, want 4", testSched.inFlight.Len())
	}
}

func TestGangThatDoesNotFitLeavesEveryCardFree(t *testing.T) {
	tc := &uthelper.TestCommonStruct{
		Name:      "a 5-member exclusive gang on 4 cards",
		Nodes:     []*corev1.Node{gpuNode("n1", 2, "NVIDIA A100", 40960), gpuNode("n2", 2, "NVIDIA A100", 40960)},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 5)},
		Pods: []*corev1.Pod{vgpuPod("w0", "pg", 1, 1000, 100, nil), vgpuPod("w1", "pg", 1, 1000, 100, nil),
			vgpuPod("w2", "pg", 1, 1000, 100, nil), vgpuPod("w3", "pg", 1, 1000, 100, nil), vgpuPod("w4", "pg", 1, 1000, 100, nil)},
		Queues: queues(),
	}
	ssn, p := session(t, tc, true, nil)
	if got := taskAssignments(t, ssn); len(got) != 0 {
		t.Fatalf("%d members kept cards after the gang was discarded", len(got))
	}
	for _, n := range []string{"n1", "n2"} {
		if mem, cores, tenants := usedCards(p, n); mem+int64(cores+tenants) != 0 {
			t.Fatalf("node %s still books %d MiB, %d%% cores, %d tenants", n, mem, cores, tenants)
		}
	}
	if testSched.inFlight.Len() != 0 {
		t.Fatalf("in-flight store kept %d assignments of a discarded gang", testSched.inFlight.Len())
	}
}

func TestGangTooLargeForFreeCardsIsNotEnqueued(t *testing.T) {
	pg := podGroup("pg", 3)
	pg.Status.Phase = schedulingv1.PodGroupPending
	pg.Spec.MinResources = &corev1.ResourceList{}
	tc := &uthelper.TestCommonStruct{
		Name:      "three whole cards wanted, two exist",
		Nodes:     []*corev1.Node{gpuNode("n1", 2, "NVIDIA A100", 40960)},
		PodGroups: []*schedulingv1.PodGroup{pg},
		Pods: []*corev1.Pod{vgpuPod("w0", "pg", 1, 40960, 100, nil), vgpuPod("w1", "pg", 1, 40960, 100, nil),
			vgpuPod("w2", "pg", 1, 40960, 100, nil)},
		Queues: queues(),
	}
	ssn, _ := session(t, tc, true, nil, enqueue.New(), allocate.New())
	for _, job := range ssn.Jobs {
		if string(job.PodGroup.Status.Phase) != string(schedulingv1.PodGroupPending) {
			t.Fatalf("gang moved to %s, want it kept Pending", job.PodGroup.Status.Phase)
		}
		if !strings.Contains(job.JobFitErrors, "MiB of card memory needed by 3 members") {
			t.Fatalf("job fit error %q does not say why", job.JobFitErrors)
		}
	}
}

func TestCPUJobSchedulesAsIfTesseraWereAbsent(t *testing.T) {
	// Nodes of different sizes make nodeorder's choice deterministic.
	build := func() *uthelper.TestCommonStruct {
		big, small, gpu := cpuNode("c1"), cpuNode("c2"), gpuNode("g1", 2, "NVIDIA A100", 40960)
		big.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("100")
		small.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("10")
		gpu.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("40")
		return &uthelper.TestCommonStruct{
			Nodes:     []*corev1.Node{big, small, gpu},
			PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 3)},
			Pods:      []*corev1.Pod{cpuPod("a", "pg"), cpuPod("b", "pg"), cpuPod("c", "pg")},
			Queues:    queues(),
		}
	}
	place := func(with bool) map[string]string {
		ssn, p := session(t, build(), with, nil)
		out := map[string]string{}
		for _, job := range ssn.Jobs {
			for _, task := range job.Tasks {
				out[task.Name] = task.NodeName
				if _, ok := task.Pod.Annotations[api.AnnotationAssignment]; ok {
					t.Fatalf("CPU task %s got a vGPU assignment", task.Name)
				}
				if p == nil {
					continue
				}
				for _, node := range ssn.Nodes {
					if err := p.predicate(task, node); err != nil {
						t.Fatalf("vgpu predicate refused CPU task %s on %s: %v", task.Name, node.Name, err)
					}
					if s, err := p.nodeOrder(task, node); s != 0 || err != nil {
						t.Fatalf("vgpu scored CPU task %s on %s: %v, %v", task.Name, node.Name, s, err)
					}
				}
			}
		}
		return out
	}
	without, with := place(false), place(true)
	if len(with) != 3 || with["a"] == "" {
		t.Fatalf("CPU tasks not placed: %v", with)
	}
	for k := range without {
		if without[k] != with[k] {
			t.Fatalf("placement changed with Tessera: without %v, with %v", without, with)
		}
	}
}

func TestPoliciesChooseDifferentCards(t *testing.T) {
	// n1 card 0 is half used by a running pod; the new pod asks for a quarter card.
	running := vgpuPod("old", "pg0", 1, 20000, 50, nil)
	running.Spec.NodeName = "n1"
	running.Status.Phase = corev1.PodRunning
	running.Annotations[api.AnnotationAssignment] = `{"version":"v1","node":"n1","qos":"fixed-share","containers":[{"name":"main","cards":[{"uuid":"GPU-n1-0","memoryMiB":20000,"cores":50}]}]}`
	for _, tc := range []struct {
		name, policy, wantCard string
	}{
		{"binpack shares the busy card", "binpack", "GPU-n1-0"},
		{"spread takes the idle card", "spread", "GPU-n1-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			utc := &uthelper.TestCommonStruct{
				Nodes:     []*corev1.Node{gpuNode("n1", 2, "NVIDIA A100", 40960)},
				PodGroups: []*schedulingv1.PodGroup{podGroup("pg0", 1), podGroup("pg", 1)},
				Pods:      []*corev1.Pod{running.DeepCopy(), vgpuPod("new", "pg", 1, 10000, 25, map[string]string{api.AnnotationCardPolicy: tc.policy})},
				Queues:    queues(),
			}
			ssn, p := session(t, utc, true, nil)
			a := taskAssignments(t, ssn)["new"]
			if a == nil {
				t.Fatal("new pod was not placed")
			}
			if got := a.Containers[0].Cards[0].UUID; got != tc.wantCard {
				t.Fatalf("placed on %s, want %s", got, tc.wantCard)
			}
			if mem, _, _ := usedCards(p, "n1"); mem != 30000 {
				t.Fatalf("ledger books %d MiB on n1, want 30000 (running + new)", mem)
			}
		})
	}
}

func TestNodePolicyChangesPlacement(t *testing.T) {
	running := vgpuPod("old", "pg0", 1, 20000, 50, nil)
	running.Spec.NodeName = "busy"
	running.Status.Phase = corev1.PodRunning
	running.Annotations[api.AnnotationAssignment] = `{"version":"v1","node":"busy","qos":"fixed-share","containers":[{"name":"main","cards":[{"uuid":"GPU-busy-0","memoryMiB":20000,"cores":50}]}]}`
	for policy, want := range map[string]string{"binpack": "busy", "spread": "idle"} {
		t.Run(policy+" sends the pod to the "+want+" node", func(t *testing.T) {
			utc := &uthelper.TestCommonStruct{
				Nodes:     []*corev1.Node{gpuNode("busy", 2, "NVIDIA A100", 40960), gpuNode("idle", 2, "NVIDIA A100", 40960)},
				PodGroups: []*schedulingv1.PodGroup{podGroup("pg0", 1), podGroup("pg", 1)},
				Pods:      []*corev1.Pod{running.DeepCopy(), vgpuPod("new", "pg", 1, 10000, 25, nil)},
				Queues:    queues(),
			}
			ssn, _ := session(t, utc, true, framework.Arguments{pluginargs.KeyNodePolicy: policy})
			if a := taskAssignments(t, ssn)["new"]; a == nil || a.Node != want {
				t.Fatalf("placed on %+v, want node %s", a, want)
			}
		})
	}
}

func TestFiltersAndBadAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ann      map[string]string
		wantNode string // empty: unschedulable
		wantErr  string
	}{
		{"a type include picks the matching model", map[string]string{api.AnnotationGPUTypeInclude: "h100"}, "h", ""},
		{"Volcano's nvidia.com/use-gputype is honoured too", map[string]string{api.NvidiaUseGPUType: "A100"}, "a", ""},
		{"a type exclude removes a model", map[string]string{api.AnnotationGPUTypeExclude: "A100"}, "h", ""},
		{"a UUID include pins the card", map[string]string{api.AnnotationGPUUUIDInclude: "GPU-h-1"}, "h", ""},
		{"a UUID exclude of every card leaves nothing", map[string]string{api.AnnotationGPUUUIDExclude: "GPU-a-0,GPU-h-0,GPU-a-1,GPU-h-1"}, "", "excluded by UUID annotation"},
		{"an unknown card policy is named in the reason", map[string]string{api.AnnotationCardPolicy: "tightest"}, "", `annotation tessera.io/card-policy: invalid: policy "tightest"`},
		{"an unknown QoS class is named in the reason", map[string]string{api.AnnotationQoS: "gold"}, "", "annotation tessera.io/qos"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			utc := &uthelper.TestCommonStruct{
				Nodes:     []*corev1.Node{gpuNode("a", 2, "NVIDIA A100-SXM4-40GB", 40960), gpuNode("h", 2, "NVIDIA H100 80GB HBM3", 81559)},
				PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1)},
				Pods:      []*corev1.Pod{vgpuPod("p", "pg", 1, 1000, 10, tc.ann)},
				Queues:    queues(),
			}
			ssn, _ := session(t, utc, true, nil)
			a := taskAssignments(t, ssn)["p"]
			if tc.wantNode != "" {
				if a == nil || a.Node != tc.wantNode {
					t.Fatalf("placed on %+v, want node %s", a, tc.wantNode)
				}
				if uuid := tc.ann[api.AnnotationGPUUUIDInclude]; uuid != "" && a.Containers[0].Cards[0].UUID != uuid {
					t.Fatalf("placed on card %s, want %s", a.Containers[0].Cards[0].UUID, uuid)
				}
				return
			}
			if a != nil {
				t.Fatalf("placed on %+v, want unschedulable", a)
			}
			if msg := jobMessage(ssn); !strings.Contains(msg, tc.wantErr) {
				t.Fatalf("reason %q does not contain %q", msg, tc.wantErr)
			}
		})
	}
}

// jobMessage is what the gang plugin would write on the PodGroup.
func jobMessage(ssn *framework.Session) string {
	var msgs []string
	for _, job := range ssn.Jobs {
		msgs = append(msgs, job.FitError())
		for _, fe := range job.NodesFitErrors {
			msgs = append(msgs, fe.Error())
		}
	}
	sort.Strings(msgs)
	return strings.Join(msgs, " | ")
}
