package vgpu

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/enqueue"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/plugins/vgpu/dracost"
)

// member is a pending member with one claim of the given requests.
func member(pod string, reqs ...dracost.CardRequest) claimMember {
	return claimMember{pod: "ns/" + pod, claims: []memberClaim{{key: "ns/" + pod, requests: reqs}}}
}

func cards(count, mib, cores int64) dracost.CardRequest {
	return dracost.CardRequest{Field: "claim ns/c: spec.devices.requests[0].exactly", Count: count, MemoryMiB: mib, Cores: cores}
}

// twoNodes is two DRA nodes of 2 cards of 40960 MiB, one card of 8192 MiB on the
// second, with 20480 MiB and 150 cores free.
var twoNodes = draSupply{cards: 5, mostCards: 3, largestMiB: 40960, smallestMiB: 8192,
	total: fairshare.Amount{MemoryMiB: 4*40960 + 8192, Cores: 500}, free: fairshare.Amount{MemoryMiB: 20480, Cores: 150}}

func TestClaimGangNeverFits(t *testing.T) {
	whole := cards(1, 0, 100)
	for _, tc := range []struct {
		name    string
		members []claimMember
		need    int
		s       draSupply
		want    string
	}{
		{"a whole card fits", []claimMember{member("a", whole)}, 1, twoNodes, ""},
		{"a card bigger than the largest can never fit", []claimMember{member("a", cards(1, 40961, 10))}, 1, twoNodes,
			"0 of 1 pending members can run, 1 more needed: pod ns/a: claim ns/c: spec.devices.requests[0].exactly asks 40961 MiB of each card; the largest card of the DRA nodes has 40960 MiB"},
		{"more cards in one claim than any node has", []claimMember{member("a", cards(2, 100, 10), cards(2, 100, 10))}, 1, twoNodes,
			"0 of 1 pending members can run, 1 more needed: pod ns/a: claim ns/a asks for 4 cards; no DRA node has more than 3 healthy cards"},
		{"an elastic member that can never run leaves enough", []claimMember{member("a", whole), member("b", cards(9, 1, 1))}, 1, twoNodes, ""},
		{"a minimum beyond all the cards", []claimMember{member("a", cards(3, 0, 100)), member("b", cards(3, 0, 100))}, 2, twoNodes,
			"2 members need at least 600% of card cores; the DRA nodes have 500% on 5 healthy cards"},
		{"whole cards are priced at the smallest card", []claimMember{member("a", cards(3, 0, 0)), member("b", cards(3, 0, 0))}, 2, twoNodes, ""},
		{"memory beyond all the cards", []claimMember{member("a", cards(3, 40000, 0)), member("b", cards(3, 40000, 0))}, 2, twoNodes,
			"2 members need at least 240000 MiB of card memory; the DRA nodes have 172032 MiB on 5 healthy cards"},
		{"the cheapest members are counted", []claimMember{member("a", cards(3, 40000, 0)), member("b", whole), member("c", whole)}, 2, twoNodes, ""},
		{"no DRA node", []claimMember{member("a", whole)}, 1, draSupply{},
			"no DRA node (tessera.io/card-api: dra) has healthy cards for claims of vgpu.tessera.io"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := claimNeverFits(tc.members, tc.need, tc.s); got != tc.want {
				t.Errorf("claimNeverFits = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestClaimGangBeyondFreeCards(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []claimMember
		need    int
		want    string
	}{
		{"shares within the free cards", []claimMember{member("a", cards(1, 10240, 50)), member("b", cards(1, 10240, 50))}, 2, ""},
		{"memory beyond the free cards", []claimMember{member("a", cards(2, 10240, 10)), member("b", cards(1, 10240, 10))}, 2,
			"2 members need at least 30720 MiB of card memory, 20480 MiB free on the DRA nodes"},
		{"cores beyond the free cards", []claimMember{member("a", cards(1, 1024, 100)), member("b", cards(1, 1024, 100))}, 2,
			"2 members need at least 200% of card cores, 150% free on the DRA nodes"},
		{"a claim already allocated costs nothing", []claimMember{{pod: "ns/a"}, member("b", cards(1, 1024, 100))}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := claimBeyondFree(tc.members, tc.need, twoNodes); got != tc.want {
				t.Errorf("claimBeyondFree = %q, want %q", got, tc.want)
			}
		})
	}
}

// claimAsking is a pending claim for count cards of Tessera's class with the given
// capacity requests ("" names none).
func claimAsking(name string, count int64, memory, cores string) *resourceapi.ResourceClaim {
	c := wholeCardClaim(name, dracost.Class)
	c.Spec.Devices.Requests[0].Exactly.Count = count
	reqs := map[resourceapi.QualifiedName]resource.Quantity{}
	if memory != "" {
		reqs[dracost.CapacityMemory] = resource.MustParse(memory)
	}
	if cores != "" {
		reqs[dracost.CapacityCores] = resource.MustParse(cores)
	}
	if len(reqs) > 0 {
		c.Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: reqs}
	}
	return c
}

// enqueueScene: queue full holds both cards of DRA node "dra" with two running pods;
// queue open (capability 200% of card cores) holds nothing; a device-plugin node adds
// two more cards. Each case adds pending gangs, and enqueue runs.
func enqueueScene() *uthelper.TestCommonStruct {
	dra, slice := draNode("dra", 2)
	capped := util.BuildQueue("open", 1, corev1.ResourceList{api.ResourceCores: resource.MustParse("200")})
	tc := &uthelper.TestCommonStruct{
		Nodes:          []*corev1.Node{gpuNode("dp", 2, "NVIDIA A100", cardMiB), dra},
		ResourceSlices: []*resourceapi.ResourceSlice{slice},
		DeviceClasses:  []*resourceapi.DeviceClass{deviceClass(dracost.Driver), deviceClass("gpu.example.com")},
		Queues:         []*schedulingv1.Queue{util.BuildQueue("full", 1, nil), capped},
		PodGroups:      []*schedulingv1.PodGroup{util.BuildPodGroup("pg-run", "ns", "full", 1, nil, schedulingv1.PodGroupRunning)},
	}
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("run-%d", i)
		pod := claimPod(name, "pg-run", "dra", name)
		tc.Pods = append(tc.Pods, pod)
		tc.ResourceClaims = append(tc.ResourceClaims, allocatedClaim(name, "dra", pod.UID, []string{fmt.Sprintf("card-%d", i)}, "", ""))
	}
	return tc
}

// addGang adds a pending PodGroup of queue with min members, one pod per claim.
func addGang(tc *uthelper.TestCommonStruct, pg, queue string, min int32, claims ...*resourceapi.ResourceClaim) {
	g := util.BuildPodGroup(pg, "ns", queue, min, nil, schedulingv1.PodGroupPending)
	g.Spec.MinResources = &corev1.ResourceList{} // Volcano asks enqueue plugins only about these
	tc.PodGroups = append(tc.PodGroups, g)
	for _, c := range claims {
		tc.ResourceClaims = append(tc.ResourceClaims, c)
		tc.Pods = append(tc.Pods, claimPod(c.Name, pg, "", c.Name))
	}
}

// TestEnqueueJudgesGangsOfClaims runs Volcano's enqueue action with the plugin (and the
// DRA predicates) over gangs of claims: those that can never fit on the DRA node, or
// that their queue cannot hold, stay Pending and say why; CPU-only jobs, other
// drivers' claims and gangs that fit are enqueued.
func TestEnqueueJudgesGangsOfClaims(t *testing.T) {
	for _, tc := range []struct {
		name    string
		add     func(*uthelper.TestCommonStruct)
		inqueue bool
		want    string
	}{
		{"a share of a card in a queue owed it is enqueued", func(tc *uthelper.TestCommonStruct) {
			addGang(tc, "pg", "open", 1, claimAsking("a", 1, "8Gi", "25"))
		}, true, ""},
		{"more memory than the largest card is refused", func(tc *uthelper.TestCommonStruct) {
			addGang(tc, "pg", "open", 1, claimAsking("a", 1, "80Gi", "25"))
		}, false, "vgpu: the gang can never fit on the DRA nodes: 0 of 1 pending members can run, 1 more needed: pod ns/a: " +
			"claim ns/a: spec.devices.requests[0].exactly asks 81920 MiB of each card; the largest card of the DRA nodes has 40960 MiB"},
		{"more cards in a claim than the node has is refused", func(tc *uthelper.TestCommonStruct) {
			addGang(tc, "pg", "open", 1, claimAsking("a", 3, "1Gi", "0"))
		}, false, "claim ns/a asks for 3 cards; no DRA node has more than 2 healthy cards"},
		{"a minimum beyond every DRA card is refused", func(tc *uthelper.TestCommonStruct) {
			addGang(tc, "pg", "open", 3, claimAsking("a", 1, "30Gi", "0"), claimAsking("b", 1, "30Gi", "0"), claimAsking("c", 1, "30Gi", "0"))
		}, false, "the gang can never fit on the DRA nodes: 3 members need at least 92160 MiB of card memory; the DRA nodes have 81920 MiB on 2 healthy cards"},
		{"a minimum beyond its queue's capability is refused", func(tc *uthelper.TestCommonStruct) {
			addGang(tc, "pg", "open", 3, claimAsking("a", 1, "1Gi", "100"), claimAsking("b", 1, "1Gi", "100"), claimAsking("c", 1, "1Gi", "100"))
		}, false, "queue open's capability of 200% of card cores is less than the 300% its 3 members need"},
		{"a queue at its share waits for free cards", func(tc *uthelper.TestCommonStruct) {
			addGang(tc, "pg", "full", 1, wholeCardClaim("a", dracost.Class))
		}, false, "vgpu: 1 member needs at least 40960 MiB of card memory, 0 MiB free on the DRA nodes"},
		{"a CPU-only job is not judged", func(tc *uthelper.TestCommonStruct) {
			addGang(tc, "pg", "full", 1)
			tc.Pods = append(tc.Pods, cpuPod("cpu", "pg"))
		}, true, ""},
		{"another driver's claims are not judged", func(tc *uthelper.TestCommonStruct) {
			addGang(tc, "pg", "full", 1, wholeCardClaim("a", "gpu.example.com"))
		}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scene := enqueueScene()
			tc.add(scene)
			testSched = NewScheduler()
			ssn, _ := open(t, scene, draTiers())
			scene.Run([]framework.Action{enqueue.New()})
			job := jobNamed(t, ssn, "pg")
			if inqueue := string(job.PodGroup.Status.Phase) == string(schedulingv1.PodGroupInqueue); inqueue != tc.inqueue {
				t.Errorf("the gang is %s (%q), want inqueue %v", job.PodGroup.Status.Phase, job.JobFitErrors, tc.inqueue)
			}
			if !strings.Contains(job.JobFitErrors, tc.want) || tc.want == "" && job.JobFitErrors != "" {
				t.Errorf("the gang says %q, want %q", job.JobFitErrors, tc.want)
			}
		})
	}
}

func jobNamed(t *testing.T, ssn *framework.Session, pg string) *vapi.JobInfo {
	t.Helper()
	for _, job := range ssn.Jobs {
		if job.PodGroup != nil && job.PodGroup.Name == pg {
			return job
		}
	}
	t.Fatalf("no job of PodGroup %s in the session", pg)
	return nil
}
