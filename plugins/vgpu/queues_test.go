package vgpu

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
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
