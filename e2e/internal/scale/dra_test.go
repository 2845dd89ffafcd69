package scale

import (
	"context"
	"math"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

func TestInShareSpreadsEvenlyAndHoldsEveryPrefix(t *testing.T) {
	for _, share := range []float64{0, 0.1, 0.25, 1.0 / 3, 0.5, 0.9, 1} {
		in, firstQuarter := 0, 0
		for i := 0; i < 100; i++ {
			if InShare(i, share) {
				in++
				if i < 25 {
					firstQuarter++
				}
			}
			if want := int(float64(i+1) * share); in != want {
				t.Fatalf("share %v: %d of the first %d items, want %d", share, in, i+1, want)
			}
		}
		if want := int(25 * share); firstQuarter != want {
			t.Errorf("share %v: %d of the first 25 items, want %d: the share is not spread", share, firstQuarter, want)
		}
	}
}

func TestCheckDRAShareNamesTheFlagAndValue(t *testing.T) {
	for _, bad := range []float64{-0.1, 1.5, math.NaN()} {
		if err := CheckDRAShare(bad); err == nil || !strings.Contains(err.Error(), "-dra-share") {
			t.Errorf("share %v: %v, want an error naming -dra-share", bad, err)
		}
	}
	for _, good := range []float64{0, 0.25, 1} {
		if err := CheckDRAShare(good); err != nil {
			t.Errorf("share %v: %v", good, err)
		}
	}
}

func TestMarkDRATakesItsShareOfTheCardJobsOnly(t *testing.T) {
	jobs := Generate(400, 16, 0.15)
	MarkDRA(jobs, 0.25)
	cards, dra := 0, 0
	for _, j := range jobs {
		if j.CPUOnly && j.DRA {
			t.Fatalf("CPU-only job %s marked DRA", j.Name)
		}
		if !j.CPUOnly {
			cards++
		}
		if j.DRA {
			dra++
		}
	}
	if dra != cards/4 {
		t.Errorf("%d of %d card jobs marked DRA, want a quarter", dra, cards)
	}
}

func TestDRANodeServesNoDevicePlugin(t *testing.T) {
	n, err := DRANode(2)
	if err != nil {
		t.Fatal(err)
	}
	if n.Annotations[api.AnnotationCardAPI] != api.CardAPIDRA || n.Annotations[api.AnnotationInventory] == "" {
		t.Errorf("annotations %v: want card-api dra and the inventory", n.Annotations)
	}
	if _, ok := n.Annotations[api.VolcanoNodeRegister]; ok {
		t.Error("a DRA node keeps the HAMi registration: deviceshare would place on it")
	}
	if _, ok := n.Status.Allocatable[api.ResourceNumber]; ok {
		t.Errorf("a DRA node advertises %s", api.ResourceNumber)
	}
}

// allocate runs Kubernetes 1.34's structured allocator, as Volcano's predicates plugin
// does, for the job's claim on node i's slice alone.
func allocate(t *testing.T, j JobSpec, i int) *resourcev1.AllocationResult {
	t.Helper()
	slice, err := NodeSlice(i)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := j.ClaimTemplate()
	if err != nil {
		t.Fatal(err)
	}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: j.Name + "-gpu",
		UID: types.UID("uid-" + j.Name)}, Spec: tmpl.Spec.Spec}
	state := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	alloc, err := structured.NewAllocator(context.Background(), structured.Features{ConsumableCapacity: true},
		state, classLister{DeviceClass()}, []*resourcev1.ResourceSlice{slice}, cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		t.Fatal(err)
	}
	node, err := Node(i)
	if err != nil {
		t.Fatal(err)
	}
	res, err := alloc.Allocate(context.Background(), node, []*resourcev1.ResourceClaim{claim})
	if err != nil {
		t.Fatalf("job %s on node %d: %v", j.Name, i, err)
	}
	if len(res) == 0 {
		return nil
	}
	return &res[0]
}

type classLister struct{ c *resourcev1.DeviceClass }

func (l classLister) List() ([]*resourcev1.DeviceClass, error) {
	return []*resourcev1.DeviceClass{l.c}, nil
}
func (l classLister) Get(name string) (*resourcev1.DeviceClass, error) {
	if name != l.c.Name {
		return nil, &unknownClass{name}
	}
	return l.c, nil
}

type unknownClass struct{ name string }

func (e *unknownClass) Error() string { return "no DeviceClass " + e.name }

// The templates ask the agent's slices for what the device-plugin jobs ask, and the
// allocator grants exactly that: a share in MiB or percent, a whole card with no
// capacity named, distinct cards, the type filter.
func TestClaimTemplatesGetWhatTheJobsAsk(t *testing.T) {
	share := allocate(t, JobSpec{Name: "share", Cards: 1, MemPct: 25, Cores: 25}, 0)
	if share == nil || len(share.Devices.Results) != 1 {
		t.Fatalf("a quarter card: %+v", share)
	}
	cc := share.Devices.Results[0].ConsumedCapacity
	if mem, cores, err := api.DRAConsumedShare(cc, NodeInventory(0).Cards[0], "share"); err != nil || mem != CardMiB/4 || cores != 25 {
		t.Errorf("a quarter card consumed %v (%d MiB, %d cores, %v), want %d MiB and 25 cores", cc, mem, cores, err, CardMiB/4)
	}
	whole := allocate(t, JobSpec{Name: "whole", Cards: 1, MemPct: 100, Cores: 100}, 0)
	if whole == nil {
		t.Fatal("a whole card was not allocated")
	}
	if q := whole.Devices.Results[0].ConsumedCapacity[api.DRACapacityCores]; q.Value() != 100 {
		t.Errorf("a whole card consumed %v cores, want the default 100", whole.Devices.Results[0].ConsumedCapacity)
	}
	four := allocate(t, JobSpec{Name: "four", Cards: 4, MemPct: 100, Cores: 100}, 0)
	if four == nil || len(four.Devices.Results) != 4 {
		t.Fatalf("four whole cards: %+v", four)
	}
	seen := map[string]bool{}
	for _, r := range four.Devices.Results {
		seen[r.Device] = true
	}
	if len(seen) != 4 {
		t.Errorf("four cards asked, %d distinct cards given: %v", len(seen), four.Devices.Results)
	}
	h100 := JobSpec{Name: "h100", Cards: 1, MemMiB: 8192, Cores: 10, TypeFilter: "H100"}
	if a := allocate(t, h100, 0); a != nil {
		t.Errorf("an H100 job got a card of A100 node 0: %+v", a.Devices.Results)
	}
	if a := allocate(t, h100, 2); a == nil {
		t.Error("an H100 job got no card of H100 node 2")
	}
	if _, err := (JobSpec{Name: "cpu", CPUOnly: true}).ClaimTemplate(); err == nil || !strings.Contains(err.Error(), "cpu") {
		t.Errorf("a CPU-only job's template: %v, want an error naming the job", err)
	}
}

func TestDRAJobReferencesItsTemplateInsteadOfTheResources(t *testing.T) {
	j := JobSpec{Name: "j", Queue: "team-a", Replicas: 2, Cards: 1, MemPct: 50, Cores: 50, TypeFilter: "A100", DRA: true}
	spec := j.VolcanoJob(true).Spec.Tasks[0].Template
	ctr := spec.Spec.Containers[0]
	if len(ctr.Resources.Limits) != 0 || len(spec.Annotations) != 0 {
		t.Errorf("DRA job keeps limits %v and annotations %v", ctr.Resources.Limits, spec.Annotations)
	}
	if len(spec.Spec.ResourceClaims) != 1 || *spec.Spec.ResourceClaims[0].ResourceClaimTemplateName != "j" ||
		len(ctr.Resources.Claims) != 1 || ctr.Resources.Claims[0].Name != spec.Spec.ResourceClaims[0].Name {
		t.Errorf("DRA job's pod claims %+v, container claims %+v: want its template j", spec.Spec.ResourceClaims, ctr.Resources.Claims)
	}
	if floor := j.VolcanoJob(false).Spec.Tasks[0].Template.Spec; len(floor.ResourceClaims) != 0 {
		t.Errorf("the floor's job keeps claims %+v", floor.ResourceClaims)
	}
}

func allocatedClaim(name, owner, pool, device string, cc map[resourcev1.QualifiedName]resource.Quantity) resourcev1.ResourceClaim {
	return resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name,
		OwnerReferences: []metav1.OwnerReference{{Kind: "Pod", Name: owner}}},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Request: ClaimName, Driver: api.DRADriver, Pool: pool, Device: device,
				ConsumedCapacity: cc}}}}}}
}

func TestClaimCardsBooksTheAllocatedSharesOfTheBoundPods(t *testing.T) {
	quarter := map[resourcev1.QualifiedName]resource.Quantity{api.DRACapacityMemory: resource.MustParse("20480Mi"),
		api.DRACapacityCores: resource.MustParse("25")}
	claims := []resourcev1.ResourceClaim{
		allocatedClaim("a-gpu", "a", NodeName(3), "card-1", quarter),
		allocatedClaim("b-gpu", "b", NodeName(3), "card-1", quarter),
		allocatedClaim("c-gpu", "c", NodeName(3), "card-2", nil),
		allocatedClaim("gone-gpu", "gone", NodeName(3), "card-1", nil),
	}
	load, held := map[string]*CardLoad{}, map[string]fairshare.Amount{}
	pods, err := ClaimCards(claims, map[string]string{"a": "team-a", "b": "team-b", "c": "team-a"}, load, held)
	if err != nil || pods != 3 {
		t.Fatalf("ClaimCards: %d pods, %v; want the 3 bound pods' claims", pods, err)
	}
	shared, whole := load[CardUUID(3, 1)], load[CardUUID(3, 2)]
	if shared == nil || shared.MemoryMiB != 40960 || shared.Cores != 50 || shared.Holders != 2 || shared.Exclusive {
		t.Errorf("card 1 holds %+v, want two quarter shares", shared)
	}
	if whole == nil || whole.MemoryMiB != CardMiB || whole.Cores != 100 || !whole.Exclusive {
		t.Errorf("card 2 holds %+v, want the whole card a claim without consumed capacity takes", whole)
	}
	if held["team-a"] != (fairshare.Amount{MemoryMiB: 20480 + CardMiB, Cores: 125}) || held["team-b"] != (fairshare.Amount{MemoryMiB: 20480, Cores: 25}) {
		t.Errorf("queues hold %v", held)
	}
	if got := Overcommitted(load); len(got) != 0 {
		t.Errorf("over-committed %v", got)
	}
	for _, bad := range []resourcev1.ResourceClaim{
		allocatedClaim("x", "a", "elsewhere", "card-1", nil),
		allocatedClaim("x", "a", NodeName(3), "card-9", nil),
		allocatedClaim("x", "a", NodeName(3), "card-1", map[resourcev1.QualifiedName]resource.Quantity{
			api.DRACapacityMemory: resource.MustParse("1.5Mi"), api.DRACapacityCores: resource.MustParse("25")}),
	} {
		if _, err := ClaimCards([]resourcev1.ResourceClaim{bad}, map[string]string{"a": "team-a"}, map[string]*CardLoad{}, map[string]fairshare.Amount{}); err == nil || !strings.Contains(err.Error(), "claim scale/x") {
			t.Errorf("result %+v: %v, want an error naming the claim", bad.Status.Allocation.Devices.Results[0], err)
		}
	}
}

func TestWantsCardsCountsClaimsButMissingOnlyDevicePluginPods(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n", ResourceClaims: []corev1.PodResourceClaim{{Name: ClaimName}},
		Containers: []corev1.Container{{Name: "main"}}}}
	if !wantsCards(p) || asksDevicePlugin(p) {
		t.Errorf("a claim pod: wants cards %t, asks the device plugin %t", wantsCards(p), asksDevicePlugin(p))
	}
	if _, _, missing, err := Cards([]*corev1.Pod{p}, &api.Decoders{}, func(*corev1.Pod) string { return "team-a" }); err != nil || missing != 0 {
		t.Errorf("a bound claim pod counts %d missing assignments (%v), want 0", missing, err)
	}
}
