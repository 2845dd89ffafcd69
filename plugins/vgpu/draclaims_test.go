package vgpu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins/predicates"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/plugins/vgpu/dracost"
)

// DRA nodes, claims and pods as the node agent's driver and the resourceclaim
// controller leave them; Volcano's predicates plugin allocates the pending claims with
// Kubernetes' own allocator.

const cardMiB = 40960

// draNode is a node whose agent serves its cards as DRA devices, with the slice it
// publishes: one whole-card device per card (card-<index>).
func draNode(name string, cards int) (*corev1.Node, *resourceapi.ResourceSlice) {
	n := gpuNode(name, cards, "NVIDIA A100", cardMiB)
	n.Annotations[api.AnnotationCardAPI] = api.CardAPIDRA
	var devs []resourceapi.Device
	for i := 0; i < cards; i++ {
		devs = append(devs, util.BuildDevice(fmt.Sprintf("card-%d", i), nil, nil))
	}
	s := util.BuildResourceSlice(name+"-slice", dracost.Driver, name,
		resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1}, devs)
	return n, s
}

func deviceClass(driver string) *resourceapi.DeviceClass {
	return util.BuildDeviceClass(driver, []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: fmt.Sprintf("device.driver == %q", driver)}}}, nil)
}

// wholeCardClaim is a pending claim for one card of class, with no capacity named.
func wholeCardClaim(name, class string) *resourceapi.ResourceClaim {
	c := util.BuildResourceClaim("ns", name, []resourceapi.DeviceRequest{
		util.BuildDeviceRequest("gpu", class, nil, nil, nil)}, nil, nil)
	c.UID = types.UID("claim-" + name) // the allocator tracks claims in flight by UID
	return c
}

// allocatedClaim is a claim the allocator gave a share of each named card on node,
// reserved for the pod holder.
func allocatedClaim(name, node string, holder types.UID, cards []string, memory, cores string) *resourceapi.ResourceClaim {
	c := wholeCardClaim(name, dracost.Class)
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, card := range cards {
		r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: dracost.Driver, Pool: node, Device: card}
		if memory != "" {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
				dracost.CapacityMemory: resource.MustParse(memory), dracost.CapacityCores: resource.MustParse(cores)}
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
	}
	if holder != "" {
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: string(holder), UID: holder}}
	}
	return c
}

// claimPod is a pod in group pg that uses the claim claimName; bound to node when set.
func claimPod(name, pg, node, claimName string) *corev1.Pod {
	phase := corev1.PodPending
	if node != "" {
		phase = corev1.PodRunning
	}
	p := util.BuildPodWithResourceClaim("ns", name, node, phase, corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}, pg, nil, nil,
		[]corev1.ResourceClaim{{Name: "gpu"}}, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claimName)}})
	p.Spec.Containers[0].Name = "main"
	return p
}

// draTiers are tiers(true, nil) with Volcano's DRA predicates on, as vc-scheduler runs
// them for DRA nodes.
func draTiers() []conf.Tier {
	ts := tiers(true, nil)
	for i, o := range ts[0].Plugins {
		if o.Name == predicates.PluginName {
			ts[0].Plugins[i].Arguments = framework.Arguments{predicates.DynamicResourceAllocationEnable: true}
		}
	}
	return ts
}

// draSession runs allocate on tc with the DRA predicates on.
func draSession(t *testing.T, tc *uthelper.TestCommonStruct) (*framework.Session, *vgpuPlugin) {
	t.Helper()
	testSched = NewScheduler()
	ssn, p := open(t, tc, draTiers())
	tc.Run([]framework.Action{allocate.New()})
	return ssn, p
}

func standing(t *testing.T, p *vgpuPlugin, queue string) fairshare.Amount {
	t.Helper()
	for _, q := range p.shares.Standings() {
		if q.Name == queue {
			return q.Allocated
		}
	}
	t.Fatalf("queue %s has no standing in the queue shares", queue)
	return fairshare.Amount{}
}

// boundPerQueue counts the placed tasks whose names start with prefix, by queue.
func boundPerQueue(ssn *framework.Session, prefix string) map[string]int {
	out := map[string]int{}
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			if strings.HasPrefix(task.Name, prefix) && task.NodeName != "" {
				out[string(job.Queue)]++
			}
		}
	}
	return out
}

func TestDRAClaimCountsInItsQueueShare(t *testing.T) {
	dra, slice := draNode("dra", 2)
	holder := claimPod("holder", "pg-light", "dra", "holder-gpu")
	tc := &uthelper.TestCommonStruct{
		Nodes:          []*corev1.Node{dra},
		ResourceSlices: []*resourceapi.ResourceSlice{slice},
		DeviceClasses:  []*resourceapi.DeviceClass{deviceClass(dracost.Driver)},
		ResourceClaims: []*resourceapi.ResourceClaim{
			allocatedClaim("holder-gpu", "dra", holder.UID, []string{"card-1"}, "10Gi", "30")},
		Queues:    []*schedulingv1.Queue{util.BuildQueue("light", 1, nil)},
		PodGroups: []*schedulingv1.PodGroup{util.BuildPodGroup("pg-light", "ns", "light", 1, nil, schedulingv1.PodGroupRunning)},
		Pods:      []*corev1.Pod{holder},
	}
	ssn, p := draSession(t, tc)
	if got, want := standing(t, p, "light"), (fairshare.Amount{MemoryMiB: 10240, Cores: 30}); got != want {
		t.Errorf("queue light holds %v, want its claim's %v", got, want)
	}
	if mem, cores, tenants := usedCards(p, "dra"); mem != 10240 || cores != 30 || tenants != 1 {
		t.Errorf("card book shows %d MiB, %d cores, %d tenants used on node dra, want the claim's 10240, 30, 1", mem, cores, tenants)
	}
	if total, _ := p.ledger.CardTotals(); total != (fairshare.Amount{MemoryMiB: 2 * cardMiB, Cores: 200}) {
		t.Errorf("the queue shares divide %v, want the DRA node's two cards", total)
	}
	p.publishMetrics(ssn)
	if got := testutil.ToFloat64(p.metrics.cardMemory.WithLabelValues("dra", "1", "GPU-dra-1")); got != 10240*mib {
		t.Errorf("tessera_scheduler_card_allocated_memory_bytes of the claim's card reads %v, want 10240 MiB", got)
	}
	if got := testutil.ToFloat64(p.metrics.queueMemory.WithLabelValues("light", "allocated")); got != 10240*mib {
		t.Errorf("tessera_scheduler_queue_vgpu_memory_bytes{queue=light,kind=allocated} reads %v, want 10240 MiB", got)
	}
}

// TestDRAAndDevicePluginQueuesSplitByWeight: heavy (weight 3) asks for whole cards
// through the device plugin and through claims, light (weight 1) through claims only,
// both for more than the 8 cards of a 2-card device-plugin node and a 6-card DRA node.
// One ledger gives heavy 6 cards and light 2: 3:1 of card memory.
func TestDRAAndDevicePluginQueuesSplitByWeight(t *testing.T) {
	dra, slice := draNode("dra", 6)
	tc := &uthelper.TestCommonStruct{
		Nodes:          []*corev1.Node{gpuNode("dp", 2, "NVIDIA A100", cardMiB), dra},
		ResourceSlices: []*resourceapi.ResourceSlice{slice},
		DeviceClasses:  []*resourceapi.DeviceClass{deviceClass(dracost.Driver)},
		Queues:         []*schedulingv1.Queue{util.BuildQueue("heavy", 3, nil), util.BuildQueue("light", 1, nil)},
	}
	for _, pg := range []struct{ name, queue string }{{"pg-heavy-dp", "heavy"}, {"pg-heavy-dra", "heavy"}, {"pg-light-dra", "light"}} {
		tc.PodGroups = append(tc.PodGroups, util.BuildPodGroup(pg.name, "ns", pg.queue, 1, nil, schedulingv1.PodGroupInqueue))
	}
	for i := 0; i < 8; i++ {
		tc.Pods = append(tc.Pods, vgpuPod(fmt.Sprintf("dp-heavy-%d", i), "pg-heavy-dp", 1, cardMiB, 100, nil))
		for _, q := range []string{"heavy", "light"} {
			name := fmt.Sprintf("dra-%s-%d", q, i)
			tc.ResourceClaims = append(tc.ResourceClaims, wholeCardClaim(name, dracost.Class))
			tc.Pods = append(tc.Pods, claimPod(name, "pg-"+q+"-dra", "", name))
		}
	}
	ssn, p := draSession(t, tc)
	dp, claims := boundPerQueue(ssn, "dp-"), boundPerQueue(ssn, "dra-")
	if dp["heavy"] != 2 || claims["heavy"] != 4 || claims["light"] != 2 {
		t.Errorf("placed device-plugin %v and DRA %v, want heavy 2 + 4 cards and light 2 (3:1 of 8 cards)", dp, claims)
	}
	heavy, light := standing(t, p, "heavy"), standing(t, p, "light")
	if heavy.MemoryMiB != 3*light.MemoryMiB || light.MemoryMiB != 2*cardMiB {
		t.Errorf("queues hold heavy %v and light %v of card memory, want 3:1 with light at 2 cards", heavy, light)
	}
}

// heldScenario: light (weight 1) already holds 2 whole cards of a 4-card DRA node
// through claims, heavy (weight 3) asks for more than every card of a 4-card
// device-plugin node and for the DRA node's cards too; light's share of the 8 cards is 2.
// Light also has a DRA pod pending, a CPU pod, and a pod whose claim is another driver's.
func heldScenario() *uthelper.TestCommonStruct {
	dra, slice := draNode("dra", 4)
	other := util.BuildResourceSlice("dra-other", "gpu.example.com", "dra",
		resourceapi.ResourcePool{Name: "dra-other", Generation: 1, ResourceSliceCount: 1},
		[]resourceapi.Device{util.BuildDevice("other-0", nil, nil)})
	tc := &uthelper.TestCommonStruct{
		Nodes:          []*corev1.Node{gpuNode("dp", 4, "NVIDIA A100", cardMiB), dra},
		ResourceSlices: []*resourceapi.ResourceSlice{slice, other},
		DeviceClasses:  []*resourceapi.DeviceClass{deviceClass(dracost.Driver), deviceClass("gpu.example.com")},
		Queues:         []*schedulingv1.Queue{util.BuildQueue("heavy", 3, nil), util.BuildQueue("light", 1, nil)},
		PodGroups: []*schedulingv1.PodGroup{
			util.BuildPodGroup("pg-heavy", "ns", "heavy", 1, nil, schedulingv1.PodGroupInqueue),
			util.BuildPodGroup("pg-heavy-dra", "ns", "heavy", 1, nil, schedulingv1.PodGroupInqueue),
			util.BuildPodGroup("pg-light-run", "ns", "light", 1, nil, schedulingv1.PodGroupRunning),
			util.BuildPodGroup("pg-light", "ns", "light", 1, nil, schedulingv1.PodGroupInqueue),
			util.BuildPodGroup("pg-light-cpu", "ns", "light", 1, nil, schedulingv1.PodGroupInqueue),
			util.BuildPodGroup("pg-light-other", "ns", "light", 1, nil, schedulingv1.PodGroupInqueue),
		},
	}
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("run-%d", i)
		pod := claimPod(name, "pg-light-run", "dra", name)
		tc.Pods = append(tc.Pods, pod)
		tc.ResourceClaims = append(tc.ResourceClaims, allocatedClaim(name, "dra", pod.UID, []string{fmt.Sprintf("card-%d", i)}, "", ""))
	}
	for i := 0; i < 6; i++ {
		tc.Pods = append(tc.Pods, vgpuPod(fmt.Sprintf("dp-heavy-%d", i), "pg-heavy", 1, cardMiB, 100, nil))
	}
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("dra-heavy-%d", i)
		tc.ResourceClaims = append(tc.ResourceClaims, wholeCardClaim(name, dracost.Class))
		tc.Pods = append(tc.Pods, claimPod(name, "pg-heavy-dra", "", name))
	}
	tc.ResourceClaims = append(tc.ResourceClaims, wholeCardClaim("more", dracost.Class), wholeCardClaim("other", "gpu.example.com"))
	tc.Pods = append(tc.Pods, claimPod("more", "pg-light", "", "more"), cpuPod("cpu", "pg-light-cpu"),
		claimPod("other", "pg-light-other", "", "other"))
	return tc
}

func TestDRAPodBeyondItsQueueShareIsHeld(t *testing.T) {
	ssn, p := draSession(t, heldScenario())
	if got := standing(t, p, "light"); got != (fairshare.Amount{MemoryMiB: 2 * cardMiB, Cores: 200}) {
		t.Fatalf("queue light holds %v, want its two whole-card claims", got)
	}
	var more *vapi.TaskInfo
	var reason string
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			if task.Name == "more" {
				more = task
				if fe, ok := job.NodesFitErrors[task.UID]; ok {
					reason = fe.Error()
				}
			}
		}
	}
	if more == nil || more.NodeName != "" {
		t.Fatalf("light's DRA pod beyond its share was placed (%+v)", more)
	}
	want := "vgpu: queue light is at its share of the cluster's cards (weight 1 of 4): " +
		"card memory 81920 MiB held + 40960 MiB asked > 81920 MiB deserved; cores 200 held + 100 asked > 200 deserved"
	if reason != want {
		t.Errorf("the held DRA pod says %q, want %q", reason, want)
	}
	if dp, claims := boundPerQueue(ssn, "dp-"), boundPerQueue(ssn, "dra-"); dp["heavy"] != 4 || claims["heavy"] != 2 {
		t.Errorf("heavy placed %d device-plugin and %d DRA pods, want all 4 cards of node dp and the DRA node's 2 free ones",
			dp["heavy"], claims["heavy"])
	}
}

func TestCPUAndOtherDriversPodsAreNotHeldByTheCardShare(t *testing.T) {
	ssn, p := draSession(t, heldScenario())
	for _, name := range []string{"cpu", "other"} {
		placed := false
		for _, job := range ssn.Jobs {
			for _, task := range job.Tasks {
				if task.Name == name {
					placed = task.NodeName != ""
					if _, counted := p.shares.ClaimCost(task.UID); counted {
						t.Errorf("pod %s counts in the card share", name)
					}
				}
			}
		}
		if !placed {
			t.Errorf("pod %s of queue light, which is beyond its card share, was not placed", name)
		}
	}
}

func TestMalformedDRAClaimResultIsSkippedWithAReason(t *testing.T) {
	dra, slice := draNode("dra", 2)
	good := claimPod("good", "pg-light", "dra", "good")
	ghost := claimPod("ghost", "pg-light", "dra", "ghost")
	odd := claimPod("odd", "pg-light", "dra", "odd")
	tc := &uthelper.TestCommonStruct{
		Nodes:          []*corev1.Node{dra},
		ResourceSlices: []*resourceapi.ResourceSlice{slice},
		DeviceClasses:  []*resourceapi.DeviceClass{deviceClass(dracost.Driver)},
		ResourceClaims: []*resourceapi.ResourceClaim{
			allocatedClaim("good", "dra", good.UID, []string{"card-0"}, "4Gi", "20"),
			allocatedClaim("ghost", "dra", ghost.UID, []string{"card-9"}, "4Gi", "20"),
			allocatedClaim("odd", "dra", odd.UID, []string{"card-1"}, "1.5Mi", "20"),
		},
		Queues:    []*schedulingv1.Queue{util.BuildQueue("light", 1, nil)},
		PodGroups: []*schedulingv1.PodGroup{util.BuildPodGroup("pg-light", "ns", "light", 1, nil, schedulingv1.PodGroupRunning)},
		Pods:      []*corev1.Pod{good, ghost, odd},
	}
	_, p := draSession(t, tc)
	skipped := p.ledger.ClaimsSkipped()
	if skipped[dracost.ReasonUnknownDevice] != 1 || skipped[dracost.ReasonBadCapacity] != 1 || len(skipped) != 2 {
		t.Errorf("skipped %v, want one unknown device and one bad capacity", skipped)
	}
	if got := standing(t, p, "light"); got != (fairshare.Amount{MemoryMiB: 4096, Cores: 20}) {
		t.Errorf("queue light holds %v, want only the well-formed claim's 4096 MiB and 20 cores", got)
	}
	if mem, cores, _ := usedCards(p, "dra"); mem != 4096 || cores != 20 {
		t.Errorf("card book shows %d MiB and %d cores used, want the well-formed claim's only", mem, cores)
	}
}

// TestClaimsBeyondTheDRANodesDoNotKeepAQueueOffOtherCards: heavy (weight 3) asks for
// more whole cards through claims than the 2-card DRA node has, light (weight 1) for
// more than the 4-card device-plugin node through the device plugin. Heavy's claims can
// reach 2 cards only, so light is owed the other 4, not a quarter of all 6.
func TestClaimsBeyondTheDRANodesDoNotKeepAQueueOffOtherCards(t *testing.T) {
	dra, slice := draNode("dra", 2)
	tc := &uthelper.TestCommonStruct{
		Nodes:          []*corev1.Node{gpuNode("dp", 4, "NVIDIA A100", cardMiB), dra},
		ResourceSlices: []*resourceapi.ResourceSlice{slice},
		DeviceClasses:  []*resourceapi.DeviceClass{deviceClass(dracost.Driver)},
		Queues:         []*schedulingv1.Queue{util.BuildQueue("heavy", 3, nil), util.BuildQueue("light", 1, nil)},
		PodGroups: []*schedulingv1.PodGroup{
			util.BuildPodGroup("pg-heavy", "ns", "heavy", 1, nil, schedulingv1.PodGroupInqueue),
			util.BuildPodGroup("pg-light", "ns", "light", 1, nil, schedulingv1.PodGroupInqueue),
		},
	}
	for i := 0; i < 8; i++ {
		name := fmt.Sprintf("dra-heavy-%d", i)
		tc.ResourceClaims = append(tc.ResourceClaims, wholeCardClaim(name, dracost.Class))
		tc.Pods = append(tc.Pods, claimPod(name, "pg-heavy", "", name), vgpuPod(fmt.Sprintf("dp-light-%d", i), "pg-light", 1, cardMiB, 100, nil))
	}
	ssn, _ := draSession(t, tc)
	if dp, claims := boundPerQueue(ssn, "dp-"), boundPerQueue(ssn, "dra-"); claims["heavy"] != 2 || dp["light"] != 4 {
		t.Errorf("placed DRA %v and device-plugin %v, want heavy on both DRA cards and light on all 4 device-plugin cards", claims, dp)
	}
}
