package vgpu

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/utils/ptr"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins/predicates"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/plugins/vgpu/dracost"
)

// The DRA session benchmark: one workload placed three ways in one run.
const (
	draBenchNodes = 50
	draBenchTasks = 200
)

// draBenchAsk is what the i-th task of the DRA benchmark asks of one card: one task in
// five a whole card, one in five half a card, the rest a quarter.
func draBenchAsk(i int) (memMiB, cores int64) {
	switch i % 5 {
	case 0:
		return 20000, 50
	case 1:
		return benchCardMiB, 100
	default:
		return 10000, 25
	}
}

// BenchmarkSessionDRA measures one scheduling session (open, allocate, close) placing
// the same 200 tasks (gangs of four, each task one card: whole, half or a quarter) on 50
// nodes of 8 A100 40 GB cards, three ways:
//
//   - floor: Volcano with neither device plugin nor DRA; the pods ask for CPU and memory
//     only.
//   - tessera-deviceplugin: Tessera's vgpu plugin; the pods ask for volcano.sh/vgpu-*.
//   - tessera-dra: Tessera's vgpu plugin beside Volcano's DRA predicates (Kubernetes
//     1.34's allocator, DRAConsumableCapacity on); each node publishes one ResourceSlice
//     of its cards in the shape of the agent's (draBenchDevice), and each pod references
//     a pending claim of vgpu.tessera.io asking for the same memory and cores (whole
//     cards name no capacity).
//
// Besides wall time, CPU time and Go allocations per session it reports per way the
// tasks placed, CPU per task placed, the distinct cards holding them, the packing lower
// bound of what was placed (max(⌈Σ cores ÷ 100⌉, ⌈Σ MiB ÷ card MiB⌉)), the cards
// over-committed, and the share of placed tasks on card-0 of their node.
//
// Two more ways take the numbers apart. volcano-dra is the tessera-dra session without
// Tessera's plugin, Volcano's DRA allocation alone: the difference is what Tessera's
// reading of the claims (card book and queue shares) costs. tessera-dra-slice-per-card
// publishes the same devices in one slice per card, which the agent does not do.
// Kubernetes 1.34.2's allocator checks a card's remaining capacity against another
// device of the slice (deviceplugin/dra TestAllocator134ChecksTheWrongCardsCapacity);
// with one device per slice the defect does not show, so the difference between
// tessera-dra and this way is what the defect costs.
func BenchmarkSessionDRA(b *testing.B) {
	// Volcano's predicates read the gate when each session builds the plugin.
	featuregatetesting.SetFeatureGateDuringTest(b, utilfeature.DefaultFeatureGate, features.DRAConsumableCapacity, true)
	for _, way := range []string{"floor", "tessera-deviceplugin", "volcano-dra", "tessera-dra", "tessera-dra-slice-per-card"} {
		b.Run(way, func(b *testing.B) {
			b.ReportAllocs()
			var res draBenchResult
			var cpu time.Duration
			over := 0 // over-committed cards, summed over the sessions: the allocator's slips are rare
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				testSched = NewScheduler()
				sc, stop := draBenchCache(b, way)
				framework.CleanupPluginBuilders()
				registerBenchPlugins()
				t := draBenchTiers(way)
				cpu0 := processCPU(b)
				b.StartTimer()

				ssn := framework.OpenSession(sc, t, nil)
				act := allocate.New()
				act.Initialize()
				act.Execute(ssn)
				act.UnInitialize()
				b.StopTimer()
				cpu += processCPU(b) - cpu0
				res = draBenchCount(b, ssn, sc.Client(), way)
				over += res.overcommitted
				framework.CloseSession(ssn)
				close(stop)
				testSched.Close()
				b.StartTimer()
			}
			// CPU (user + system, every thread) is steadier than wall time on a shared
			// machine; the goroutines of the cache and the binds count too.
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
			b.ReportMetric(float64(res.placed), "tasks-placed")
			if res.placed > 0 {
				b.ReportMetric(1000*cpu.Seconds()/float64(b.N)/float64(res.placed), "cpu-ms/task-placed")
			}
			b.ReportMetric(float64(res.nodes), "nodes-used")
			if way == "floor" {
				return
			}
			b.ReportMetric(float64(res.cards), "cards-used")
			b.ReportMetric(float64(res.lowerBound), "cards-lower-bound")
			if res.lowerBound > 0 {
				b.ReportMetric(float64(res.cards)/float64(res.lowerBound), "cards/lower-bound")
			}
			b.ReportMetric(float64(over)/float64(b.N), "cards-overcommitted/op")
			if res.placed > 0 {
				b.ReportMetric(100*float64(res.onCard0)/float64(res.placed), "%-on-card-0")
			}
		})
	}
}

// draBenchTiers are benchTiers' plugins; the DRA way turns on the DRA predicates.
func draBenchTiers(way string) []conf.Tier {
	switch way {
	case "floor":
		return benchTiers("none")
	case "volcano-dra", "tessera-dra", "tessera-dra-slice-per-card":
		ts := benchTiers("tessera")
		if way == "volcano-dra" {
			ts = benchTiers("none")
		}
		for i, o := range ts[0].Plugins {
			if o.Name == predicates.PluginName {
				if ts[0].Plugins[i].Arguments == nil {
					ts[0].Plugins[i].Arguments = framework.Arguments{}
				}
				ts[0].Plugins[i].Arguments[predicates.DynamicResourceAllocationEnable] = true
			}
		}
		return ts
	default:
		return benchTiers("tessera")
	}
}

// draBenchCache builds the cluster and the workload of one way and starts the cache;
// close the returned channel to stop it.
func draBenchCache(b *testing.B, way string) (*cache.SchedulerCache, chan struct{}) {
	b.Helper()
	sc := cache.NewCustomMockSchedulerCache("bench-dra", util.NewFakeBinder(draBenchTasks*2), util.NewFakeEvictor(0),
		&util.FakeStatusUpdater{}, nil, &record.FakeRecorder{})
	client := sc.Client()
	ctx := context.Background()
	var nodes []*corev1.Node
	for n := 0; n < draBenchNodes; n++ {
		name := fmt.Sprintf("node-%03d", n)
		var node *corev1.Node
		switch way {
		case "floor":
			node = cpuNode(name)
		case "tessera-deviceplugin":
			node = gpuNode(name, benchCards, "NVIDIA A100-SXM4-40GB", benchCardMiB)
		default:
			node = gpuNode(name, benchCards, "NVIDIA A100-SXM4-40GB", benchCardMiB)
			node.Annotations[api.AnnotationCardAPI] = api.CardAPIDRA
			delete(node.Status.Allocatable, api.ResourceNumber)
			for _, slice := range draBenchSlices(b, node, way == "tessera-dra-slice-per-card") {
				if _, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		}
		nodes = append(nodes, node)
	}
	if strings.HasSuffix(way, "-dra") || strings.Contains(way, "-dra-") {
		if _, err := client.ResourceV1().DeviceClasses().Create(ctx, deviceClass(dracost.Driver), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	var pods []*corev1.Pod
	var groups []*schedulingv1.PodGroup
	for g := 0; g < draBenchTasks/benchGangSize; g++ {
		pg := fmt.Sprintf("job-%03d", g)
		groups = append(groups, util.BuildPodGroup(pg, "ns", "q1", benchGangSize, nil, schedulingv1.PodGroupInqueue))
		for m := 0; m < benchGangSize; m++ {
			name := fmt.Sprintf("%s-%d", pg, m)
			mem, cores := draBenchAsk(g*benchGangSize + m)
			switch way {
			case "floor":
				pods = append(pods, util.BuildPod("ns", name, "", corev1.PodPending, corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}, pg, nil, nil))
			case "tessera-deviceplugin":
				pods = append(pods, vgpuPod(name, pg, 1, mem, cores, nil))
			default:
				claim := draBenchClaim(name, mem, cores)
				if _, err := client.ResourceV1().ResourceClaims("ns").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				pods = append(pods, claimPod(name, pg, "", name))
			}
		}
	}
	stop := make(chan struct{})
	// The informers list the DRA objects when the cache starts, as in uthelper.
	sc.Run(stop)
	for _, n := range nodes {
		sc.AddOrUpdateNode(n)
	}
	sc.AddQueueV1beta1(util.BuildQueue("q1", 1, nil))
	for _, pg := range groups {
		sc.AddPodGroupV1beta1(pg)
	}
	for _, p := range pods {
		sc.AddPod(p)
	}
	return sc, stop
}

// draBenchSlices is what the agent publishes for node, from its inventory: one
// ResourceSlice of all the cards, or, perCard, the same devices in one slice each (the
// same pool), which the agent does not do.
func draBenchSlices(b *testing.B, node *corev1.Node, perCard bool) []*resourceapi.ResourceSlice {
	b.Helper()
	inv, err := api.DecodeInventory(node.Annotations[api.AnnotationInventory])
	if err != nil {
		b.Fatal(err)
	}
	var devs []resourceapi.Device
	for _, c := range inv.Cards {
		devs = append(devs, draBenchDevice(c))
	}
	if !perCard {
		return []*resourceapi.ResourceSlice{util.BuildResourceSlice(node.Name+"-"+dracost.Driver, dracost.Driver, node.Name,
			resourceapi.ResourcePool{Name: node.Name, Generation: 1, ResourceSliceCount: 1}, devs)}
	}
	var out []*resourceapi.ResourceSlice
	for _, d := range devs {
		out = append(out, util.BuildResourceSlice(node.Name+"-"+d.Name, dracost.Driver, node.Name,
			resourceapi.ResourcePool{Name: node.Name, Generation: 1, ResourceSliceCount: int64(len(devs))}, []resourceapi.Device{d}))
	}
	return out
}

// draBenchDevice is a card as the agent's driver publishes it (deviceplugin/dra,
// model.go; docs/dra.md "What the agent publishes"): shared by several claims, memory in
// whole MiB from 256 MiB to the card, cores 0 to 100, both defaulting to the whole card.
// It is built here rather than imported so that this package's tests do not link the
// node agent.
func draBenchDevice(c api.Card) resourceapi.Device {
	mib := func(n int64) *resource.Quantity { return resource.NewQuantity(n<<20, resource.BinarySI) }
	cores := func(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }
	return resourceapi.Device{
		Name: fmt.Sprintf("card-%d", c.Index),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"uuid":  {StringValue: ptr.To(c.UUID)},
			"model": {StringValue: ptr.To(strings.TrimPrefix(c.Model, "NVIDIA "))},
			"index": {IntValue: ptr.To(int64(c.Index))},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			dracost.CapacityMemory: {Value: *mib(c.MemoryMiB), RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default:    mib(c.MemoryMiB),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: mib(256), Max: mib(c.MemoryMiB), Step: mib(1)}}},
			dracost.CapacityCores: {Value: *cores(dracost.MaxCores), RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default:    cores(dracost.MaxCores),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: cores(0), Max: cores(dracost.MaxCores), Step: cores(1)}}},
		},
		AllowMultipleAllocations: ptr.To(true),
	}
}

// draBenchClaim is a pending claim for one card's share: mem MiB and cores percent, or
// the whole card (no capacity named, the driver's defaults) when cores is 100.
func draBenchClaim(name string, mem, cores int64) *resourceapi.ResourceClaim {
	req := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: dracost.Class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}
	if cores < 100 {
		req.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			dracost.CapacityMemory: *resource.NewQuantity(mem<<20, resource.BinarySI), dracost.CapacityCores: *resource.NewQuantity(cores, resource.DecimalSI)}}
	}
	c := util.BuildResourceClaim("ns", name, []resourceapi.DeviceRequest{req}, nil, nil)
	c.UID = types.UID("claim-" + name)
	return c
}

// cardUse is the memory and cores booked on one card.
type cardUse struct{ memMiB, cores int64 }

func (u cardUse) add(v cardUse) cardUse { return cardUse{u.memMiB + v.memMiB, u.cores + v.cores} }

type draBenchResult struct {
	placed, nodes, cards, lowerBound, overcommitted, onCard0 int
}

// draBenchCount reads what the session placed: the tasks bound to a node, and the cards
// behind them from Tessera's assignments (device plugin) or from the claims the
// allocator allocated (DRA), which the session's DRA manager holds until they are
// written back.
func draBenchCount(b *testing.B, ssn *framework.Session, client kubernetes.Interface, way string) draBenchResult {
	b.Helper()
	var r draBenchResult
	nodeSet, placedNames := map[string]bool{}, map[string]bool{}
	type card struct {
		node  string
		index int
	}
	used := map[card]cardUse{}
	var asked cardUse
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			if task.NodeName == "" {
				continue
			}
			r.placed++
			placedNames[task.Name] = true
			nodeSet[task.NodeName] = true
			s, ok := task.Pod.Annotations[api.AnnotationAssignment]
			if !ok {
				continue
			}
			a, err := api.DecodeAssignment(s)
			if err != nil {
				b.Fatalf("task %s carries a bad assignment: %v", task.Name, err)
			}
			for _, c := range a.Containers {
				for _, cs := range c.Cards {
					i, err := strconv.Atoi(cs.UUID[strings.LastIndex(cs.UUID, "-")+1:])
					if err != nil {
						b.Fatalf("task %s: card %q: %v", task.Name, cs.UUID, err)
					}
					k := card{a.Node, i}
					share := cardUse{cs.MemoryMiB, int64(cs.Cores)}
					used[k], asked = used[k].add(share), asked.add(share)
					if i == 0 {
						r.onCard0++
					}
				}
			}
		}
	}
	if strings.HasSuffix(way, "-dra") || strings.Contains(way, "-dra-") {
		for _, c := range draBenchAllocated(b, ssn, client, placedNames) {
			for _, res := range c.Status.Allocation.Devices.Results {
				i, ok := strings.CutPrefix(res.Device, "card-")
				idx, err := strconv.Atoi(i)
				if res.Driver != dracost.Driver || !ok || err != nil {
					b.Fatalf("claim %s: result %+v is not one of the agent's cards", c.Name, res)
				}
				// A result without consumed capacity is the whole card, as the agent reads it.
				amt := cardUse{benchCardMiB, 100}
				if q, ok := res.ConsumedCapacity[dracost.CapacityMemory]; ok {
					amt.memMiB = q.Value() >> 20
				}
				if q, ok := res.ConsumedCapacity[dracost.CapacityCores]; ok {
					amt.cores = q.Value()
				}
				k := card{res.Pool, idx}
				used[k], asked = used[k].add(amt), asked.add(amt)
				if idx == 0 {
					r.onCard0++
				}
			}
		}
	}
	r.nodes, r.cards = len(nodeSet), len(used)
	for _, u := range used {
		if u.memMiB > benchCardMiB || u.cores > 100 {
			r.overcommitted++
		}
	}
	r.lowerBound = int(max((asked.cores+99)/100, (asked.memMiB+benchCardMiB-1)/benchCardMiB))
	return r
}

// draBenchAllocated returns the allocated claims of the placed tasks (each task's claim
// has the task's name). A claim is in the session's DRA manager while its pod's bind is
// in flight and in the API once the bind wrote its status back, so both are read, the
// API until every placed task's claim is there or ten seconds have passed.
func draBenchAllocated(b *testing.B, ssn *framework.Session, client kubernetes.Interface, placed map[string]bool) map[string]*resourceapi.ResourceClaim {
	b.Helper()
	out := map[string]*resourceapi.ResourceClaim{}
	keep := func(c *resourceapi.ResourceClaim) {
		if placed[c.Name] && c.Status.Allocation != nil {
			out[c.Name] = c
		}
	}
	inSession, err := ssn.SharedDRAManager().ResourceClaims().List()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range inSession {
		keep(c)
	}
	for deadline := time.Now().Add(10 * time.Second); len(out) < len(placed); time.Sleep(50 * time.Millisecond) {
		list, err := client.ResourceV1().ResourceClaims("ns").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for i := range list.Items {
			keep(&list.Items[i])
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d tasks placed, but only %d of their claims are allocated", len(placed), len(out))
		}
	}
	return out
}
