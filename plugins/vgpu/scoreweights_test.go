package vgpu

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/uthelper"

	"github.com/tessera-gpu/tessera/api"
)

// placeWith runs one allocate session of nodes and running pods with a pending pod
// "new" of two cards × 10000 MiB × 25% carrying ann, and returns its assignment.
func placeWith(t *testing.T, nodes []*corev1.Node, running []*corev1.Pod, ann map[string]string) *api.PodAssignment {
	t.Helper()
	utc := &uthelper.TestCommonStruct{Nodes: nodes, Queues: queues(), PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1)}}
	for _, p := range running {
		utc.PodGroups = append(utc.PodGroups, podGroup(p.Annotations[schedulingv1.KubeGroupNameAnnotationKey], 1))
		utc.Pods = append(utc.Pods, p)
	}
	utc.Pods = append(utc.Pods, vgpuPod("new", "pg", 2, 10000, 25, ann))
	ssn, _ := session(t, utc, true, nil)
	return taskAssignments(t, ssn)["new"]
}

func cardsIn(a *api.PodAssignment) string {
	var ids []string
	for _, c := range a.Containers[0].Cards {
		ids = append(ids, c.UUID)
	}
	return strings.Join(ids, ",")
}

// tessera.io/score-weights weighs the node score's terms for the pod: numa brings in
// the NUMA locality of its cards, topology scales the links' bonus, each against the
// binpack score the node policy gives.
func TestScoreWeightsChangeWhichNodeWins(t *testing.T) {
	for _, tc := range []struct {
		name, weights, want string
	}{
		// busy: cards 0 and 2 held whole, so the pod's two cards would sit on NUMA
		// nodes 0 and 1; idle: four free cards, two on each NUMA node.
		{"without weights binpack sends the pod to the busier node", "", "busy"},
		{"numa=1 sends it where its two cards share a NUMA node", "numa=1", "idle"},
		{"numa too small to outweigh binpack changes nothing", "numa=0.1", "busy"},
		{"policy=0 leaves NUMA locality alone to rank", "policy=0,numa=0.01", "idle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ann map[string]string
			if tc.weights != "" {
				ann = map[string]string{api.AnnotationScoreWeights: tc.weights}
			}
			nodes := []*corev1.Node{gpuNode("busy", 4, "NVIDIA A100", 40960), gpuNode("idle", 4, "NVIDIA A100", 40960)}
			held := []*corev1.Pod{holding("h0", "busy", "GPU-busy-0", 100, 1), holding("h2", "busy", "GPU-busy-2", 100, 1)}
			if a := placeWith(t, nodes, held, ann); a == nil || a.Node != tc.want {
				t.Fatalf("placed on %+v, want node %s", a, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name, weights, want string
	}{
		// nvl: idle, NVSwitch; pci: cards 0 and 1 held whole, 2 and 3 behind one switch.
		{"without weights the plugin's topology weight sends a 2-card pod to the idle NVSwitch node", "", "nvl"},
		{"topology=0 makes the node score link-blind: binpack wins", "topology=0", "pci"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ann map[string]string
			if tc.weights != "" {
				ann = map[string]string{api.AnnotationScoreWeights: tc.weights}
			}
			nodes := []*corev1.Node{linkedNode("nvl", 4, nvswitch), linkedNode("pci", 4, pcie)}
			held := []*corev1.Pod{holding("h0", "pci", "GPU-pci-0", 100, 1), holding("h1", "pci", "GPU-pci-1", 100, 1)}
			if a := placeWith(t, nodes, held, ann); a == nil || a.Node != tc.want {
				t.Fatalf("placed on %+v, want node %s", a, tc.want)
			}
		})
	}
}

// Inside a node, the weights weigh card choice: on NVLink pairs, cards 1 and 2 are
// the fullest (binpack's choice) but sit on different pairs and NUMA nodes.
func TestScoreWeightsChangeWhichCardsWin(t *testing.T) {
	for _, tc := range []struct {
		name, weights, want string
	}{
		{"without weights an NVLink pair on one NUMA node wins", "", "GPU-n-0,GPU-n-1"},
		{"topology=0,numa=0 leaves binpack alone: the two fullest cards", "topology=0,numa=0", "GPU-n-1,GPU-n-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ann map[string]string
			if tc.weights != "" {
				ann = map[string]string{api.AnnotationScoreWeights: tc.weights}
			}
			running := []*corev1.Pod{runningOn("r1", "n", api.QoSFixedShare, "GPU-n-1"), runningOn("r2", "n", api.QoSFixedShare, "GPU-n-2")}
			for _, p := range running {
				p.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-" + p.Name
			}
			a := placeWith(t, []*corev1.Node{linkedNode("n", 4, nvPairs)}, running, ann)
			if a == nil || cardsIn(a) != tc.want {
				t.Fatalf("placed on %+v, want cards %s", a, tc.want)
			}
		})
	}
}

// A malformed value keeps the pod pending with the parser's reason, which names the
// annotation and quotes the value as written.
func TestMalformedScoreWeightsKeepThePodPendingWithTheReason(t *testing.T) {
	for value, want := range map[string]string{
		"pack=3":              `annotation tessera.io/score-weights: "pack=3": unknown term "pack"; want policy, topology or numa`,
		"numa=-1":             `annotation tessera.io/score-weights: "numa=-1": numa: -1 is negative`,
		"topology=lots":       `"topology=lots": topology: "lots" is not a number`,
		"policy=0,topology=0": `"policy=0,topology=0": every weight is 0`,
	} {
		utc := &uthelper.TestCommonStruct{
			Nodes:     []*corev1.Node{gpuNode("n1", 2, "NVIDIA A100", 40960)},
			PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1)},
			Pods:      []*corev1.Pod{vgpuPod("p", "pg", 1, 1000, 10, map[string]string{api.AnnotationScoreWeights: value})},
			Queues:    queues(),
		}
		ssn, _ := session(t, utc, true, nil)
		if a := taskAssignments(t, ssn)["p"]; a != nil {
			t.Fatalf("%q: placed on %+v", value, a)
		}
		if msg := jobMessage(ssn); !strings.Contains(msg, want) {
			t.Errorf("%q: reason %q does not contain %q", value, msg, want)
		}
	}
}
