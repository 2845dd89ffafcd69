package vgpu

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/actions/preempt"
	"volcano.sh/volcano/pkg/scheduler/actions/reclaim"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins/predicates"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/pluginargs"
	"github.com/tessera-gpu/tessera/plugins/vgpu/dracost"
)

// Reclaim and preempt on DRA nodes, through Volcano's own actions with its predicates
// plugin allocating claims with Kubernetes 1.34's allocator.

// draEvictTiers are evictTiers with Volcano's DRA predicates on, and the plugin's
// claim reclaimer (drareclaim.go) on or off.
func draEvictTiers(reclaimClaims bool) []conf.Tier {
	ts := evictTiers()
	for i, o := range ts[1].Plugins {
		if o.Name == predicates.PluginName {
			ts[1].Plugins[i].Arguments = framework.Arguments{predicates.DynamicResourceAllocationEnable: true}
		}
	}
	for i, o := range ts[0].Plugins {
		if o.Name == PluginName {
			ts[0].Plugins[i].Arguments = framework.Arguments{pluginargs.KeyDRAReclaim: reclaimClaims}
		}
	}
	return ts
}

// fullDRANode: queue a (weight 1) holds every card of a 4-card DRA node with one
// whole-card claim per pod, in one elastic job (minimum 1) that runs a CPU-only pod
// there too; queue b (weight 1) submits a job of two whole-card claims (minimum 1).
func fullDRANode() *uthelper.TestCommonStruct {
	dra, slice := draNode("dra", 4)
	tc := &uthelper.TestCommonStruct{
		Nodes:          []*corev1.Node{dra},
		ResourceSlices: []*resourceapi.ResourceSlice{slice},
		DeviceClasses:  []*resourceapi.DeviceClass{deviceClass(dracost.Driver)},
		Queues:         []*schedulingv1.Queue{util.BuildQueue("a", 1, nil), util.BuildQueue("b", 1, nil)},
		PodGroups: []*schedulingv1.PodGroup{util.BuildPodGroup("pg-a", "ns", "a", 1, nil, schedulingv1.PodGroupRunning),
			util.BuildPodGroup("pg-b", "ns", "b", 1, nil, schedulingv1.PodGroupInqueue)},
	}
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("a-%d", i)
		pod := claimPod(name, "pg-a", "dra", name)
		tc.Pods = append(tc.Pods, pod)
		tc.ResourceClaims = append(tc.ResourceClaims, allocatedClaim(name, "dra", pod.UID, []string{fmt.Sprintf("card-%d", i)}, "", ""))
	}
	cpu := runningCPU("a-cpu", "dra")
	cpu.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-a"
	tc.Pods = append(tc.Pods, cpu)
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("b-%d", i)
		tc.ResourceClaims = append(tc.ResourceClaims, wholeCardClaim(name, dracost.Class))
		tc.Pods = append(tc.Pods, claimPod(name, "pg-b", "", name))
	}
	return tc
}

// openDRAEvict opens a session of tc with the DRA predicates and vgpu in the first
// tier, its claim reclaimer off: what Volcano's actions do alone.
func openDRAEvict(t *testing.T, tc *uthelper.TestCommonStruct) (*framework.Session, *vgpuPlugin) {
	t.Helper()
	return openDRASession(t, tc, false)
}

func openDRASession(t *testing.T, tc *uthelper.TestCommonStruct, reclaimClaims bool) (*framework.Session, *vgpuPlugin) {
	t.Helper()
	testSched = NewScheduler()
	var p *vgpuPlugin
	tc.Plugins = evictBuilders(&p)
	ssn := tc.RegisterSession(draEvictTiers(reclaimClaims), nil)
	t.Cleanup(tc.Close)
	t.Cleanup(testSched.Close)
	return ssn, p
}

func taskNamed(ssn *framework.Session, name string) *vapi.TaskInfo {
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			if task.Name == name {
				return task
			}
		}
	}
	return nil
}

func names(tasks []*vapi.TaskInfo) []string {
	var out []string
	for _, t := range tasks {
		out = append(out, t.Name)
	}
	sort.Strings(out)
	return out
}

// TestVolcanoDropsAFullDRANodeBeforeAskingForVictims pins what Volcano v1.14.1 with
// Kubernetes 1.34.2's allocator does for a pod whose claims do not fit a DRA node's
// cards: the allocator's "cannot allocate all claims" is UnschedulableAndUnresolvable,
// so preempt and reclaim drop the node before any plugin is asked for victims, and
// nothing is evicted. Queue b, below its share of the cards, gets none of them back
// from queue a. When a release lets preempt and reclaim try such a node, this fails:
// then TestDRAVictimsFreeTheClaimsCards is the choice they get.
func TestVolcanoDropsAFullDRANodeBeforeAskingForVictims(t *testing.T) {
	for _, action := range []framework.Action{reclaim.New(), preempt.New()} {
		t.Run(action.Name(), func(t *testing.T) {
			tc := fullDRANode()
			if action.Name() == "preempt" { // one queue: b's job is of higher priority
				tc.PodGroups[1].Spec.Queue = "a"
				tc.PodGroups[1].Spec.PriorityClassName = "high"
				tc.PriClass = append(tc.PriClass, util.BuildPriorityClass("high", 1000))
			}
			ssn, p := openDRAEvict(t, tc)
			b0 := taskNamed(ssn, "b-0")
			if err := ssn.PrePredicateFn(b0); err != nil {
				t.Fatalf("PrePredicate of b-0: %v", err)
			}
			err := ssn.PredicateForPreemptAction(b0, ssn.Nodes["dra"])
			fe, ok := err.(*vapi.FitError)
			if !ok || !fe.Status.ContainsUnschedulableAndUnresolvable() || !strings.Contains(err.Error(), "cannot allocate all claims") {
				t.Fatalf("preempt's predicate for b-0 on the full DRA node: %v; want UnschedulableAndUnresolvable \"cannot allocate all claims\" (Volcano v1.14.1, Kubernetes 1.34.2)", err)
			}
			tc.Run([]framework.Action{action, allocate.New()})
			tc.ExpectEvictNum = 0
			if err := tc.CheckEvict(0); err != nil {
				t.Fatalf("%s evicted for b's claims: %v", action.Name(), err)
			}
			for _, name := range []string{"b-0", "b-1"} {
				if task := taskNamed(ssn, name); task.Status != vapi.Pending {
					t.Errorf("%s is %s, want Pending: the DRA node's cards are all held by a's claims", name, task.Status)
				}
			}
			// The plugin would offer one of a's DRA pods, had Volcano asked.
			if got := p.pluginVictims(b0, ssn.Nodes["dra"]); len(got) != 1 || !strings.HasPrefix(got[0], "a-") {
				t.Errorf("the plugin's victims for b-0: %v, want one of a's DRA pods", got)
			}
		})
	}
}

// pluginVictims is what the plugin offers for task among every other running task of
// the node.
func (p *vgpuPlugin) pluginVictims(task *vapi.TaskInfo, node *vapi.NodeInfo) []string {
	var candidates []*vapi.TaskInfo
	for _, t := range node.Tasks {
		if t.Status == vapi.Running && t.Job != task.Job {
			candidates = append(candidates, t)
		}
	}
	set, _ := p.victims(task, candidates)
	return names(set)
}

// TestEvictingADRAPodKeepsItsClaimInTheSession pins the second half: were the node
// tried, evicting a's pod in the session leaves its claim's card allocated in Volcano's
// DRA manager, and the allocator, whose view was taken before, finds no allocation for
// b-0 on the node: the pipeline fails and the statement is rolled back. A release that
// releases an evicted pod's claims in the session makes this fail.
func TestEvictingADRAPodKeepsItsClaimInTheSession(t *testing.T) {
	ssn, _ := openDRAEvict(t, fullDRANode())
	b0, a0 := taskNamed(ssn, "b-0"), taskNamed(ssn, "a-0")
	if err := ssn.PrePredicateFn(b0); err != nil {
		t.Fatalf("PrePredicate of b-0: %v", err)
	}
	stmt := framework.NewStatement(ssn)
	if err := stmt.Evict(a0, "reclaim"); err != nil {
		t.Fatalf("evicting a-0 in the statement: %v", err)
	}
	devices, err := ssn.SharedDRAManager().ResourceClaims().ListAllAllocatedDevices()
	if err != nil {
		t.Fatal(err)
	}
	card0 := structured.MakeDeviceID(dracost.Driver, "dra", "card-0")
	if !devices.Has(card0) {
		t.Errorf("a-0's card is no longer allocated once a-0 is evicted in the session (%v): Volcano now releases claims on eviction", devices.UnsortedList())
	}
	err = stmt.Pipeline(b0, "dra", true)
	if err == nil {
		t.Errorf("b-0 was pipelined onto a-0's card in the session: Volcano now lets a DRA evictor use an evicted pod's card")
	} else if err := stmt.UnPipeline(b0); err != nil {
		t.Errorf("rolling back b-0's pipeline: %v", err)
	}
	stmt.Discard()
	if a0.Status != vapi.Running {
		t.Errorf("a-0 is %s after the statement was discarded, want Running", a0.Status)
	}
}

// TestDRAVictimsFreeTheClaimsCards: the plugin's choice for a DRA evictor, as preempt
// and reclaim would ask for it on the full DRA node. It offers the fewest of a's DRA
// pods whose cards fit b's claims (one card each), never the CPU-only pod, and keeps
// a's minimum of one; a device-plugin task is offered no DRA pod.
func TestDRAVictimsFreeTheClaimsCards(t *testing.T) {
	ssn, p := openDRAEvict(t, fullDRANode())
	node := ssn.Nodes["dra"]
	var candidates []*vapi.TaskInfo
	for _, t := range node.Tasks {
		candidates = append(candidates, t)
	}
	got := names(ssn.Reclaimable(taskNamed(ssn, "b-0"), candidates))
	if len(got) != 1 || !strings.HasPrefix(got[0], "a-") || got[0] == "a-cpu" {
		t.Errorf("reclaim's victims for b-0: %v, want one of a's DRA pods", got)
	}
	// A gang of two members that each need a whole card: two pods at once, within a's
	// spare of 3 (ready 4, minimum 1), and only where CPU needs both (it does not here).
	asks := []draAsk{{Cores: 100, Group: 0}, {Cores: 100, Group: 1}}
	set, _ := p.draVictims(taskNamed(ssn, "b-0"), asks, candidates)
	if len(set) != 0 {
		t.Errorf("offered %v for two cards where Volcano would evict one (CPU fits after one), want none", names(set))
	}
	dp := vgpuPod("dp", "pg-b", 1, 1024, 10, nil)
	dpTask := vapi.NewTaskInfo(dp)
	dpTask.Job = taskNamed(ssn, "b-0").Job
	if set, _ := p.victims(dpTask, candidates); len(set) != 0 {
		t.Errorf("a device-plugin task was offered %v on a DRA node", names(set))
	}
}

// TestDRAQueueReclaimsOnlyBelowItsCardShare: preemptive holds a DRA pod's queue to its
// card share as it does a device-plugin pod's: queue light (weight 1 of 4) holds its
// 2 cards' share and may not reclaim for a third; queue heavy, holding nothing yet, may;
// a CPU-only pod is not held by the card share.
func TestDRAQueueReclaimsOnlyBelowItsCardShare(t *testing.T) {
	testSched = NewScheduler()
	ssn, p := open(t, heldScenario(), draTiers()) // before allocate places anything
	for _, tt := range []struct {
		task, queue string
		want        bool
	}{{"more", "light", false}, {"dra-heavy-3", "heavy", true}, {"cpu", "light", true}} {
		task := taskNamed(ssn, tt.task)
		if task == nil {
			t.Fatalf("no task %s", tt.task)
		}
		if got := p.preemptive(ssn.Queues[vapi.QueueID(tt.queue)], task); got != tt.want {
			t.Errorf("preemptive(%s, %s) = %v, want %v", tt.queue, tt.task, got, tt.want)
		}
	}
}

var _ = api.CardAPIDRA

// TestFreedCardsGoToTheWaitingQueueInALaterSession: what works today. Once two of a's
// pods are gone with their claims (deleted by their owner; the resourceclaim controller
// deletes a template's claims with the pod), the next session's allocate gives b's two
// claims the two freed cards: b holds half of the node, a the other half.
func TestFreedCardsGoToTheWaitingQueueInALaterSession(t *testing.T) {
	tc := fullDRANode()
	gone := map[string]bool{"a-0": true, "a-1": true}
	var pods []*corev1.Pod
	for _, p := range tc.Pods {
		if !gone[p.Name] {
			pods = append(pods, p)
		}
	}
	var claims []*resourceapi.ResourceClaim
	for _, c := range tc.ResourceClaims {
		if !gone[c.Name] {
			claims = append(claims, c)
		}
	}
	tc.Pods, tc.ResourceClaims = pods, claims
	ssn, p := openDRAEvict(t, tc)
	tc.Run([]framework.Action{reclaim.New(), allocate.New()})
	if got := boundPerQueue(ssn, "b-"); got["b"] != 2 {
		t.Fatalf("queue b placed %v, want both its claims on the freed cards", got)
	}
	a, b := standing(t, p, "a"), standing(t, p, "b")
	if a != b || a.MemoryMiB != 2*cardMiB {
		t.Errorf("queues hold a %v and b %v, want two whole cards each", a, b)
	}
}
