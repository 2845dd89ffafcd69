package vgpu

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
)

// Whole MIG instances in the queue shares, as MIG slices of their own (docs/mig.md,
// "Queue shares").

// oneGNode is an H100 node of cards cards, every one in MIG mode and split into seven
// 1g.10gb instances MIG-<node>-<card>-<i>: 7 MIG slices a card.
func oneGNode(name string, cards int) *corev1.Node {
	return withMIG(gpuNode(name, cards, "NVIDIA H100 80GB HBM3", 81559), func(c api.Card) []api.MIGInstance {
		var out []api.MIGInstance
		for i := 0; i < 7; i++ {
			out = append(out, api.MIGInstance{UUID: fmt.Sprintf("MIG-%s-%d-%d", name, c.Index, i), Profile: "1g.10gb",
				GI: i + 1, Start: i, Size: 1, MemoryMiB: 9856})
		}
		return out
	})
}

// holdingInstance is a running pod of group pg holding MIG instance mig of card.
func holdingInstance(name, pg, node, card, mig string) *corev1.Pod {
	p := migPod(name, pg, "1g.10gb", 1)
	p.Spec.NodeName, p.Status.Phase = node, corev1.PodRunning
	p.Annotations[api.AnnotationAssignment] = fmt.Sprintf(`{"version":"v1","node":%q,"qos":"fixed-share","containers":[{"name":"main",`+
		`"cards":[{"uuid":%q,"memoryMiB":9856,"cores":100,"mig":%q}]}]}`, node, card, mig)
	return p
}

// Two queues of weight 3 and 1 each ask for all 28 1g instances of four MIG cards:
// the instances split 21 and 7 (without the MIG dimension, MIG pods were charged
// nothing and whoever came first took all). The refused pods name MIG slices.
func TestMIGInstancesSplitByQueueWeight(t *testing.T) {
	tc := &uthelper.TestCommonStruct{
		Nodes:  []*corev1.Node{oneGNode("n1", 2), oneGNode("n2", 2)},
		Queues: []*schedulingv1.Queue{util.BuildQueue("heavy", 3, nil), util.BuildQueue("light", 1, nil)},
	}
	for _, q := range tc.Queues {
		pg := "pg-" + q.Name
		tc.PodGroups = append(tc.PodGroups, util.BuildPodGroup(pg, "ns", q.Name, 1, nil, schedulingv1.PodGroupInqueue))
		for i := 0; i < 28; i++ {
			tc.Pods = append(tc.Pods, migPod(fmt.Sprintf("%s-%02d", q.Name, i), pg, "1g.10gb", 1))
		}
	}
	ssn, _ := session(t, tc, true, nil)
	got := placedPerQueue(t, ssn)
	if got["heavy"] != 21 || got["light"] != 7 {
		t.Errorf("placed per queue %v, want heavy 21 and light 7 of the 28 instances", got)
	}
	var reason string
	for _, job := range ssn.Jobs {
		for _, fe := range job.NodesFitErrors {
			if strings.Contains(fe.Error(), "queue light") {
				reason = fe.Error()
			}
		}
	}
	want := "vgpu: queue light is at its share of the cluster's cards (weight 1 of 4): MIG slices 7 held + 1 asked > 7 deserved"
	if reason != want {
		t.Errorf("light's refused pods say %q, want %q", reason, want)
	}
}

// MIG holdings change nothing for card pods: a queue holding every MIG instance still
// gets its weighted share of the plain cards beside them, as if it held none.
func TestMIGHoldingsLeaveCardSharesAlone(t *testing.T) {
	tc := contention(32, util.BuildQueue("heavy", 3, nil), util.BuildQueue("light", 1, nil))
	tc.Nodes = append(tc.Nodes, oneGNode("m1", 1))
	tc.PodGroups = append(tc.PodGroups, util.BuildPodGroup("pg-light-mig", "ns", "light", 1, nil, schedulingv1.PodGroupRunning))
	for i := 0; i < 7; i++ {
		tc.Pods = append(tc.Pods, holdingInstance(fmt.Sprintf("mig-%d", i), "pg-light-mig", "m1", "GPU-m1-0", fmt.Sprintf("MIG-m1-0-%d", i)))
	}
	ssn, _ := session(t, tc, true, nil)
	got := placedPerQueue(t, ssn)
	// As TestQueuesShareCardsByWeight: 800 cores at 3:1, 24 and 8 tasks of 25 cores.
	if got["heavy"] != 24 || got["light"] != 8 {
		t.Errorf("placed per queue %v, want heavy 24 and light 8 whatever light's MIG instances", got)
	}
}

// Reclaim takes instances back from a queue above its MIG share for a queue below
// it: early holds all 14 instances of a node, late (the same weight) asks for two.
func TestReclaimTakesMIGInstancesForAQueueBelowItsShare(t *testing.T) {
	actions, tiers, _, _, err := scheduler.UnmarshalSchedulerConf(exampleConf(t, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	tc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{oneGNode("n1", 2)},
		Queues:    []*schedulingv1.Queue{util.BuildQueue("early", 1, nil), util.BuildQueue("late", 1, nil)},
		PodGroups: []*schedulingv1.PodGroup{util.BuildPodGroup("pg-a", "ns", "early", 1, nil, schedulingv1.PodGroupRunning)},
	}
	for c := 0; c < 2; c++ {
		for i := 0; i < 7; i++ {
			tc.Pods = append(tc.Pods, holdingInstance(fmt.Sprintf("a-%d-%d", c, i), "pg-a", "n1", fmt.Sprintf("GPU-n1-%d", c),
				fmt.Sprintf("MIG-n1-%d-%d", c, i)))
		}
	}
	for i := 0; i < 2; i++ {
		pg := fmt.Sprintf("pg-late-%d", i)
		tc.PodGroups = append(tc.PodGroups, util.BuildPodGroup(pg, "ns", "late", 1, nil, schedulingv1.PodGroupInqueue))
		tc.Pods = append(tc.Pods, migPod(fmt.Sprintf("late-%d", i), pg, "1g.10gb", 1))
	}
	_, got := runEvictWith(t, tc, tiers, actions...)
	if len(got) != 2 {
		t.Fatalf("evicted %v, want two of early's instances for late's two 1g pods", got)
	}
	for _, e := range got {
		if !strings.HasPrefix(e, "ns/a-") {
			t.Errorf("evicted %s, want only early's pods", e)
		}
	}
}
