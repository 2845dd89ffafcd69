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

// linkedNode is gpuNode with a link matrix: link(i, j) for i < j.
func linkedNode(name string, cards int, link func(i, j int) api.LinkType) *corev1.Node {
	n := gpuNode(name, cards, "NVIDIA A100-SXM4-80GB", 81920)
	inv, err := api.DecodeInventory(n.Annotations[api.AnnotationInventory])
	if err != nil {
		panic(err)
	}
	inv.Links = make([][]api.LinkType, cards)
	for i := range inv.Links {
		inv.Links[i] = make([]api.LinkType, cards)
		for j := range inv.Links[i] {
			if i == j {
				inv.Links[i][j] = api.LinkSelf
			} else {
				inv.Links[i][j] = link(min(i, j), max(i, j))
			}
		}
	}
	s, err := api.EncodeInventory(inv)
	if err != nil {
		panic(err)
	}
	n.Annotations[api.AnnotationInventory] = s
	return n
}

// nvswitch: every pair has twelve NVLinks, as on a DGX A100.
func nvswitch(i, j int) api.LinkType { return "NV12" }

// nvPairs: NVLink bridges join cards two by two, everything else crosses PCIe.
func nvPairs(i, j int) api.LinkType {
	if i/2 == j/2 {
		return "NV4"
	}
	return api.LinkPCIeMulti
}

// pcie: one switch per pair, one CPU per half.
func pcie(i, j int) api.LinkType {
	switch {
	case i/2 == j/2:
		return api.LinkPCIeSingle
	case i/4 == j/4:
		return api.LinkSameNUMA
	}
	return api.LinkCrossNUMA
}

// runningOn is a running pod holding cards of node with the given QoS class.
func runningOn(name, node string, qos api.QoSClass, cards ...string) *corev1.Pod {
	p := vgpuPod(name, "pg-"+name, int64(len(cards)), 10000, 30, nil)
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	var cs []string
	for _, c := range cards {
		cs = append(cs, fmt.Sprintf(`{"uuid":%q,"memoryMiB":10000,"cores":30}`, c))
	}
	p.Annotations[api.AnnotationAssignment] = fmt.Sprintf(`{"version":"v1","node":%q,"qos":%q,"containers":[{"name":"main","cards":[%s]}]}`,
		node, qos, strings.Join(cs, ","))
	return p
}

func TestMultiCardGangsLandOnTheNVLinkCompleteNode(t *testing.T) {
	for _, tc := range []struct {
		name       string
		members    int
		cardsEach  int64
		nodeWeight framework.Arguments
	}{
		{"one 8-card pod goes to the NVSwitch node", 1, 8, nil},
		{"a gang of two 4-card pods goes to the NVSwitch node", 2, 4, nil},
		{"a gang of four 2-card pods goes to the NVSwitch node", 4, 2, nil},
		{"a gang of eight 1-card pods gathers on the NVSwitch node", 8, 1, nil},
		{"the topology node policy alone sends an 8-card pod there", 1, 8, framework.Arguments{pluginargs.KeyNodePolicy: "topology", pluginargs.KeyTopologyWeight: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pods []*corev1.Pod
			for m := 0; m < tc.members; m++ {
				pods = append(pods, vgpuPod(fmt.Sprintf("w%d", m), "pg", tc.cardsEach, 81920, 100, nil))
			}
			utc := &uthelper.TestCommonStruct{
				// The PCIe and NVLink-pair nodes sort first by name, so only the
				// topology score can send the job to the NVSwitch node.
				Nodes:     []*corev1.Node{linkedNode("a-pcie", 8, pcie), linkedNode("b-pairs", 8, nvPairs), linkedNode("c-nvswitch", 8, nvswitch)},
				PodGroups: []*schedulingv1.PodGroup{podGroup("pg", int32(tc.members))},
				Pods:      pods,
				Queues:    queues(),
			}
			ssn, _ := session(t, utc, true, tc.nodeWeight)
			got := taskAssignments(t, ssn)
			if len(got) != tc.members {
				t.Fatalf("%d of %d members placed", len(got), tc.members)
			}
			for name, a := range got {
				if a.Node != "c-nvswitch" {
					t.Fatalf("member %s landed on %s, want c-nvswitch", name, a.Node)
				}
			}
		})
	}
}

func TestTopologyWeightZeroIsLinkBlindForNodes(t *testing.T) {
	// A busier PCIe node wins under binpack once link quality no longer counts.
	utc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{linkedNode("pcie", 8, pcie), linkedNode("nvswitch", 8, nvswitch)},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg-old", 1), podGroup("pg", 1)},
		Pods:      []*corev1.Pod{runningOn("old", "pcie", api.QoSFixedShare, "GPU-pcie-7"), vgpuPod("new", "pg", 2, 81920, 100, nil)},
		Queues:    queues(),
	}
	ssn, _ := session(t, utc, true, framework.Arguments{pluginargs.KeyTopologyWeight: 0})
	if a := taskAssignments(t, ssn)["new"]; a == nil || a.Node != "pcie" {
		t.Fatalf("placed on %+v, want the busier pcie node", a)
	}
}

func TestNUMABindingInTheScheduler(t *testing.T) {
	// gpuNode puts cards 0,1 on NUMA node 0 and 2,3 on node 1; a running pod holds
	// one card of each, so only a split pair remains.
	for _, tc := range []struct {
		name      string
		ann       map[string]string
		wantCards string
		wantErr   string
	}{
		{"without binding a pair is split across NUMA nodes", nil, "GPU-n-1,GPU-n-3", ""},
		{"with binding the pair is refused, naming the annotation", map[string]string{api.AnnotationNUMABind: "true"}, "",
			"needs 2 cards on one NUMA node (tessera.io/numa-bind=true)"},
		{"a malformed binding is refused, naming the annotation", map[string]string{api.AnnotationNUMABind: "yes"}, "",
			`annotation tessera.io/numa-bind: "yes"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			utc := &uthelper.TestCommonStruct{
				Nodes:     []*corev1.Node{gpuNode("n", 4, "NVIDIA A100", 40960)},
				PodGroups: []*schedulingv1.PodGroup{podGroup("pg-old", 1), podGroup("pg", 1)},
				Pods:      []*corev1.Pod{exclusive(runningOn("old", "n", api.QoSFixedShare, "GPU-n-0", "GPU-n-2")), vgpuPod("new", "pg", 2, 40960, 100, tc.ann)},
				Queues:    queues(),
			}
			ssn, _ := session(t, utc, true, nil)
			a := taskAssignments(t, ssn)["new"]
			if tc.wantCards != "" {
				if a == nil || cardList(a) != tc.wantCards {
					t.Fatalf("placed on %+v, want %s", a, tc.wantCards)
				}
				return
			}
			if a != nil {
				t.Fatalf("placed on %s, want a refusal", cardList(a))
			}
			if msg := jobMessage(ssn); !strings.Contains(msg, tc.wantErr) {
				t.Fatalf("reason %q does not contain %q", msg, tc.wantErr)
			}
		})
	}
}

// exclusive turns a running pod's cards into whole-card holdings.
func exclusive(p *corev1.Pod) *corev1.Pod {
	p.Annotations[api.AnnotationAssignment] = strings.ReplaceAll(strings.ReplaceAll(p.Annotations[api.AnnotationAssignment],
		`"cores":30`, `"cores":100`), `"memoryMiB":10000`, `"memoryMiB":40960`)
	return p
}

func cardList(a *api.PodAssignment) string {
	var ids []string
	for _, c := range a.Containers[0].Cards {
		ids = append(ids, c.UUID)
	}
	return strings.Join(ids, ",")
}

func TestQoSPoolsInTheScheduler(t *testing.T) {
	// Card 0 hosts a burst-share pod; card 1 a fixed-share one.
	for _, tc := range []struct {
		name     string
		qos      string
		wantCard string
		wantErr  string
	}{
		{"a burst-share pod joins the burst-share card", "burst-share", "GPU-n-0", ""},
		{"a fixed-share pod joins the fixed-share card", "fixed-share", "GPU-n-1", ""},
		{"a pod without a class is fixed-share", "", "GPU-n-1", ""},
		{"a best-effort pod finds no card of its class", "best-effort", "", "2 in another QoS pool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{}
			if tc.qos != "" {
				ann[api.AnnotationQoS] = tc.qos
			}
			utc := &uthelper.TestCommonStruct{
				Nodes:     []*corev1.Node{gpuNode("n", 2, "NVIDIA A100", 40960)},
				PodGroups: []*schedulingv1.PodGroup{podGroup("pg-b", 1), podGroup("pg-f", 1), podGroup("pg", 1)},
				Pods: []*corev1.Pod{runningOn("b", "n", api.QoSBurstShare, "GPU-n-0"), runningOn("f", "n", api.QoSFixedShare, "GPU-n-1"),
					vgpuPod("new", "pg", 1, 1000, 10, ann)},
				Queues: queues(),
			}
			ssn, _ := session(t, utc, true, nil)
			a := taskAssignments(t, ssn)["new"]
			if tc.wantCard != "" {
				if a == nil || cardList(a) != tc.wantCard {
					t.Fatalf("placed on %+v, want %s", a, tc.wantCard)
				}
				if want := api.QoSClass(tc.qos); want != "" && a.QoS != want {
					t.Fatalf("assignment carries class %q, want %q", a.QoS, want)
				}
				return
			}
			if a != nil {
				t.Fatalf("placed on %s, want a refusal", cardList(a))
			}
			if msg := jobMessage(ssn); !strings.Contains(msg, tc.wantErr) {
				t.Fatalf("reason %q does not contain %q", msg, tc.wantErr)
			}
		})
	}
}
