package vgpu

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/uthelper"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// migGPUNode is gpuNode with card 0 in MIG mode, split into two 3g.40gb instances
// MIG-<node>-0 and MIG-<node>-1 (tessera.io/mig-instances); card 1, if any, is shared.
func migGPUNode(name string, cards int) *corev1.Node {
	return withMIG(gpuNode(name, cards, "NVIDIA H100 80GB HBM3", 81559), func(c api.Card) []api.MIGInstance {
		if c.Index != 0 {
			return nil
		}
		return []api.MIGInstance{
			{UUID: "MIG-" + name + "-0", Profile: "3g.40gb", GI: 1, Start: 0, Size: 4, MemoryMiB: 40320},
			{UUID: "MIG-" + name + "-1", Profile: "3g.40gb", GI: 2, Start: 4, Size: 4, MemoryMiB: 40320},
		}
	})
}

// withMIG puts the cards of node n for which instances returns any into MIG mode with
// those instances (the inventory's MIG flag and tessera.io/mig-instances).
func withMIG(n *corev1.Node, instances func(api.Card) []api.MIGInstance) *corev1.Node {
	inv, err := api.DecodeInventory(n.Annotations[api.AnnotationInventory])
	if err != nil {
		panic(err)
	}
	m := &api.NodeMIGInstances{Cards: map[string][]api.MIGInstance{}}
	for c := range inv.Cards {
		if in := instances(inv.Cards[c]); len(in) > 0 {
			inv.Cards[c].MIG = true
			m.Cards[inv.Cards[c].UUID] = in
		}
	}
	s, err := api.EncodeInventory(inv)
	if err != nil {
		panic(err)
	}
	ms, err := api.EncodeMIGInstances(m)
	if err != nil {
		panic(err)
	}
	n.Annotations[api.AnnotationInventory] = s
	n.Annotations[api.AnnotationMIGInstances] = ms
	return n
}

// migPod is a pending pod in group pg asking for count whole instances of profile.
func migPod(name, pg, profile string, count int64) *corev1.Pod {
	p := vgpuPod(name, pg, count, 1, 1, map[string]string{api.AnnotationMIGProfile: profile})
	for _, l := range []corev1.ResourceList{p.Spec.Containers[0].Resources.Limits, p.Spec.Containers[0].Resources.Requests} {
		delete(l, api.ResourceMemory)
		delete(l, api.ResourceCores)
	}
	return p
}

// A pod asking for a 3g.40gb gets the instance no running pod holds, written with
// the MIG UUID, the instance's memory and 100 cores (and, in compatibility mode, no
// Volcano annotation that would hand out the parent card); a second such pod finds
// none left and waits with the reason and the counts; a pod without a profile gets
// the shared card beside it, never the card in MIG mode.
func TestMIGPodsGetWholeFreeInstances(t *testing.T) {
	holder := migPod("holder", "pg-holder", "3g.40gb", 1)
	holder.Spec.NodeName, holder.Status.Phase = "n", corev1.PodRunning
	holder.Annotations[api.AnnotationAssignment] = `{"version":"v1","node":"n","qos":"fixed-share","containers":[{"name":"main",` +
		`"cards":[{"uuid":"GPU-n-0","memoryMiB":40320,"cores":100,"mig":"MIG-n-0"}]}]}`
	utc := &uthelper.TestCommonStruct{Nodes: []*corev1.Node{migGPUNode("n", 2)},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg-holder", 1), podGroup("pg-a", 1), podGroup("pg-b", 1), podGroup("pg-c", 1)},
		Pods: []*corev1.Pod{holder, migPod("a", "pg-a", "3g.40gb", 1), migPod("b", "pg-b", "3g.40gb", 1),
			vgpuPod("c", "pg-c", 1, 1000, 10, nil)},
		Queues: queues()}
	// The queue share is off: with the card's two instances taken, one queue would be
	// at its share of the MIG slices and say so before the cards could (queue shares
	// of MIG slices: migshare_test.go).
	ssn, _ := session(t, utc, true, framework.Arguments{pluginargs.KeyVolcanoCompat: true, pluginargs.KeyQueueShare: false})
	got := taskAssignments(t, ssn)
	var placed []string
	for _, name := range []string{"a", "b"} {
		if a := got[name]; a != nil {
			placed = append(placed, name)
			c := a.Containers[0].Cards[0]
			if c.UUID != "GPU-n-0" || c.MIG != "MIG-n-1" || c.MemoryMiB != 40320 || c.Cores != 100 {
				t.Errorf("pod %s got %+v, want the free instance MIG-n-1 whole", name, c)
			}
		}
	}
	if len(placed) != 1 {
		t.Fatalf("placed %v, want exactly one of a and b on the one free instance; %s", placed, jobMessage(ssn))
	}
	if a := got["c"]; a == nil || a.Containers[0].Cards[0].UUID != "GPU-n-1" || a.Containers[0].Cards[0].MIG != "" {
		t.Fatalf("the pod without a profile got %+v, want the shared card GPU-n-1", a)
	}
	msg := jobMessage(ssn)
	for _, want := range []string{`no free MIG instance of profile 3g.40gb for container "main" (needs 1; 2 taken on the node); cards: 1 no free MIG instance of the profile, 1 not in MIG mode`} {
		if !strings.Contains(msg, want) {
			t.Errorf("the pending pods' reasons %q\nwant %q", msg, want)
		}
	}
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			if _, ok := task.Pod.Annotations[api.VolcanoAssignedIDs]; ok && task.Name != "c" {
				t.Errorf("pod %s carries %s for a MIG assignment", task.Name, api.VolcanoAssignedIDs)
			}
		}
	}
}

// A gang of three pods of one 3g.40gb each, on two nodes of two instances each, with
// one instance held: all three are placed, each on its own instance.
func TestAMIGGangTakesDistinctInstances(t *testing.T) {
	holder := migPod("holder", "pg-holder", "3g.40gb", 1)
	holder.Spec.NodeName, holder.Status.Phase = "n1", corev1.PodRunning
	holder.Annotations[api.AnnotationAssignment] = `{"version":"v1","node":"n1","qos":"fixed-share","containers":[{"name":"main",` +
		`"cards":[{"uuid":"GPU-n1-0","memoryMiB":40320,"cores":100,"mig":"MIG-n1-1"}]}]}`
	pods := []*corev1.Pod{holder}
	for i := 0; i < 3; i++ {
		pods = append(pods, migPod(fmt.Sprint("w", i), "pg", "3g.40gb", 1))
	}
	utc := &uthelper.TestCommonStruct{Nodes: []*corev1.Node{migGPUNode("n1", 2), migGPUNode("n2", 2)},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg-holder", 1), podGroup("pg", 3)}, Pods: pods, Queues: queues()}
	ssn, _ := session(t, utc, true, nil)
	seen := map[string]string{"MIG-n1-1": "holder"}
	got := taskAssignments(t, ssn)
	for i := 0; i < 3; i++ {
		name := fmt.Sprint("w", i)
		a := got[name]
		if a == nil {
			t.Fatalf("gang member %s not placed; %s", name, jobMessage(ssn))
		}
		mig := a.Containers[0].Cards[0].MIG
		if other, dup := seen[mig]; dup || mig == "" {
			t.Fatalf("%s got %q, already %s's", name, mig, other)
		}
		seen[mig] = name
	}
}
