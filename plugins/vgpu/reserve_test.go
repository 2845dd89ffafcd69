package vgpu

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/uthelper"

	"github.com/tessera-gpu/tessera/api"
)

// reserveNode is gpuNode whose agent publishes each card's CUDA context reserve beside
// the inventory.
func reserveNode(name string, cards int, model string, memMiB, reserveMiB int64) *corev1.Node {
	n := gpuNode(name, cards, model, memMiB)
	inv, err := api.DecodeInventory(n.Annotations[api.AnnotationInventory])
	if err != nil {
		panic(err)
	}
	for i := range inv.Cards {
		inv.Cards[i].ContextReserveMiB = reserveMiB
	}
	if n.Annotations[api.AnnotationContextReserve], err = api.EncodeContextReserve(inv.ContextReserve()); err != nil {
		panic(err)
	}
	return n
}

// badReserveNode is gpuNode with a context reserve annotation this build cannot read.
func badReserveNode(name string, cards int, model string, memMiB int64, reserve string) *corev1.Node {
	n := gpuNode(name, cards, model, memMiB)
	n.Annotations[api.AnnotationContextReserve] = reserve
	return n
}

// percentPod is vgpuPod asking a percentage of each card's memory instead of MiB.
func percentPod(name, pg string, percent int64) *corev1.Pod {
	p := vgpuPod(name, pg, 1, 1, 10, nil)
	for _, l := range []corev1.ResourceList{p.Spec.Containers[0].Resources.Limits, p.Spec.Containers[0].Resources.Requests} {
		delete(l, api.ResourceMemory)
		l[api.ResourceMemoryPercentage] = *resource.NewQuantity(percent, resource.DecimalSI)
	}
	return p
}

const h100 = "NVIDIA H100 80GB HBM3"

// A container given less memory on a card than one CUDA context takes there would be
// bound and started, and then fail every cuInit: the predicate keeps it pending with
// a reason that names the container, its request and the cards' reserve. A node whose
// agent publishes no reserve (an older agent), or one this build cannot read, places it
// as before: the reserve only tightens placement, and never makes a node unusable.
func TestTheContextReserveKeepsTooSmallContainersPending(t *testing.T) {
	for _, tc := range []struct {
		name     string
		nodes    []*corev1.Node
		pod      *corev1.Pod
		wantNode string // "" stays pending
		wantWhy  string
	}{
		{"a 256Mi container waits and is told the reserve", []*corev1.Node{reserveNode("h", 2, h100, 81559, 518)},
			vgpuPod("p", "pg", 1, 256, 10, nil), "",
			`vgpu: container "main" asks 256Mi of vGPU memory; cards on this node need at least 518Mi for a CUDA context (contextReserve)`},
		{"a container at the reserve is placed", []*corev1.Node{reserveNode("h", 2, h100, 81559, 518)},
			vgpuPod("p", "pg", 1, 518, 10, nil), "h", ""},
		{"a percentage is sized by the card before it is compared", []*corev1.Node{reserveNode("a", 2, "NVIDIA A100-SXM4-40GB", 40960, 520)},
			percentPod("p", "pg", 1), "",
			`vgpu: container "main" asks 1% of vGPU memory (409Mi of a card on this node); cards on this node need at least 520Mi`},
		{"a percentage above the reserve is placed", []*corev1.Node{reserveNode("a", 2, "NVIDIA A100-SXM4-40GB", 40960, 520)},
			percentPod("p", "pg", 2), "a", ""},
		{"an older agent's inventory places the 256Mi container as before", []*corev1.Node{gpuNode("old", 2, h100, 81559)},
			vgpuPod("p", "pg", 1, 256, 10, nil), "old", ""},
		{"a malformed reserve is ignored, and the node places as before", []*corev1.Node{badReserveNode("bad", 2, h100, 81559, `{"version":"v1","cards":{"GPU-bad-0":9000}}`)},
			vgpuPod("p", "pg", 1, 256, 10, nil), "bad", ""},
		{"a newer reserve version is ignored, and the node places as before", []*corev1.Node{badReserveNode("next", 2, h100, 81559, `{"version":"v2","cards":{}}`)},
			vgpuPod("p", "pg", 1, 256, 10, nil), "next", ""},
		{"a reserve for cards the node no longer has refuses nothing", []*corev1.Node{badReserveNode("moved", 2, h100, 81559, `{"version":"v1","cards":{"GPU-elsewhere":518}}`)},
			vgpuPod("p", "pg", 1, 256, 10, nil), "moved", ""},
		{"the small container goes to the node that can hold it", []*corev1.Node{reserveNode("h", 2, h100, 81559, 518), gpuNode("old", 2, h100, 81559)},
			vgpuPod("p", "pg", 1, 256, 10, nil), "old", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			utc := &uthelper.TestCommonStruct{Nodes: tc.nodes, PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1)},
				Pods: []*corev1.Pod{tc.pod}, Queues: queues()}
			ssn, _ := session(t, utc, true, nil)
			a := taskAssignments(t, ssn)["p"]
			if tc.wantNode != "" {
				if a == nil || a.Node != tc.wantNode {
					t.Fatalf("placed on %+v, want node %s; %s", a, tc.wantNode, jobMessage(ssn))
				}
				return
			}
			if a != nil {
				t.Fatalf("placed on %+v, want pending", a)
			}
			if msg := jobMessage(ssn); !strings.Contains(msg, tc.wantWhy) {
				t.Fatalf("reason %q\nwant it to contain %q", msg, tc.wantWhy)
			}
		})
	}
}

// When another node could take the pod once its tenants leave, the job is valid and
// the predicate answers per node: the reserve's reason reaches the task's FitErrors
// beside the other node's, as UnschedulableAndUnresolvable, so preempt and reclaim
// evict nothing on the node whose cards no eviction makes usable.
func TestTheContextReserveReasonReachesTheTasksFitErrors(t *testing.T) {
	holder := vgpuPod("holder", "pg0", 1, 40960, 100, nil)
	holder.Spec.NodeName = "busy"
	holder.Status.Phase = corev1.PodRunning
	holder.Annotations[api.AnnotationAssignment] = `{"version":"v1","node":"busy","qos":"fixed-share","containers":[{"name":"main","cards":[{"uuid":"GPU-busy-0","memoryMiB":40960,"cores":100}]}]}`
	utc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{reserveNode("h", 2, h100, 81559, 518), gpuNode("busy", 1, "NVIDIA A100", 40960)},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg0", 1), podGroup("pg", 1)},
		Pods:      []*corev1.Pod{holder, vgpuPod("p", "pg", 1, 256, 10, nil)},
		Queues:    queues(),
	}
	ssn, _ := session(t, utc, true, nil)
	if a := taskAssignments(t, ssn)["p"]; a != nil {
		t.Fatalf("placed on %+v, want pending", a)
	}
	const want = `vgpu: container "main" asks 256Mi of vGPU memory; cards on this node need at least 518Mi for a CUDA context (contextReserve)`
	found := false
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			if task.Name != "p" {
				continue
			}
			fe := job.NodesFitErrors[task.UID]
			if fe == nil {
				t.Fatalf("no FitErrors for the pending task; the job says %q", job.JobFitErrors)
			}
			found = true
			msg := fe.Error()
			if !strings.Contains(msg, "1 "+want) || !strings.Contains(msg, "0 of 1 fit (1 insufficient cores)") {
				t.Errorf("FitErrors %q\nwant the reserve's reason for h and busy's own", msg)
			}
			if _, ok := fe.GetUnschedulableAndUnresolvableNodes()["h"]; !ok {
				t.Errorf("node h is resolvable in %q; evicting cannot make a context smaller", msg)
			}
		}
	}
	if !found {
		t.Fatal("the pending task is not in the session")
	}
}

// CPU-only tasks never meet the reserve: the predicate passes them on every node.
func TestTheContextReserveNeverTouchesCPUTasks(t *testing.T) {
	utc := &uthelper.TestCommonStruct{Nodes: []*corev1.Node{reserveNode("h", 2, h100, 81559, 518)},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1)}, Pods: []*corev1.Pod{cpuPod("cpu", "pg")}, Queues: queues()}
	ssn, p := session(t, utc, true, nil)
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			if err := p.predicate(task, ssn.Nodes["h"]); err != nil {
				t.Errorf("the vgpu predicate refused CPU task %s: %v", task.Name, err)
			}
			if task.NodeName != "h" {
				t.Errorf("CPU task %s not placed on h (%q)", task.Name, task.NodeName)
			}
		}
	}
}
