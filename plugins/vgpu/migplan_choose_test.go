package vgpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/mig"
)

// Demand is met by free instances first, in the order the pods wait; an opted-in
// node gets one plan per session, on its first idle card the unmet demand fits.
func TestChooseMIGPlans(t *testing.T) {
	card := func(uuid string, free map[string]int, plannable bool) migCardView {
		return migCardView{UUID: uuid, Model: "NVIDIA H100 80GB HBM3", Free: free, Plannable: plannable}
	}
	nodes := []migNodeView{
		{Name: "a", OptedIn: false, Cards: []migCardView{card("A0", map[string]int{"1g.10gb": 1}, true)}},
		{Name: "b", OptedIn: true, Cards: []migCardView{card("B0", nil, false), card("B1", nil, true), card("B2", nil, true)}},
		{Name: "c", OptedIn: true, Busy: true, Cards: []migCardView{card("C0", nil, true)}},
		{Name: "d", OptedIn: true, Cards: []migCardView{card("D0", nil, true)}},
	}
	demand := []migDemand{{Profile: "1g.10gb", Pod: "p1"}, {Profile: "7g.80gb", Pod: "p2"}, {Profile: "7g.80gb", Pod: "p3"}, {Profile: "1g.10gb", Pod: "p4"}}
	got := chooseMIGPlans(nodes, demand)
	if len(got) != 2 || got[0].Card.UUID != "B1" || got[1].Card.UUID != "D0" {
		t.Fatalf("planned %+v, want B1 (the first plannable card of the first opted-in node) and D0", got)
	}
	if p := got[0].Choice.Profiles; len(p) != 1 || p[0] != "7g.80gb" || got[0].Served[0].Pod != "p2" {
		t.Errorf("B1 gets %v for %v, want 7g.80gb for p2 (p1 takes the free 1g.10gb)", p, got[0].Served)
	}
	if p := got[1].Choice.Profiles; len(p) != 1 || p[0] != "7g.80gb" || got[1].Served[0].Pod != "p3" {
		t.Errorf("D0 gets %v for %v, want 7g.80gb for p3", p, got[1].Served)
	}
}

// A card is planned only for the demand of pods that may be placed on it: the node
// matches the pod's node selector and required node affinity, the pod tolerates the
// node's NoSchedule and NoExecute taints, and its card filters allow the card. A
// free instance the pod may not use does not meet its demand.
func TestChooseMIGPlansServesOnlyCardsThePodMayUse(t *testing.T) {
	const h100, a100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
	node := func(name, model string, labels map[string]string, taints ...corev1.Taint) migNodeView {
		n := &corev1.Node{}
		n.Name, n.Labels, n.Spec.Taints = name, labels, taints
		return migNodeView{Name: name, Node: n, OptedIn: true, Cards: []migCardView{{UUID: "GPU-" + name, Model: model,
			Current: mig.Geometry{{Profile: "3g.40gb", Start: 0}, {Profile: "3g.40gb", Start: 4}}, Plannable: true}}}
	}
	pinned := func(key, value string) *migPodLimits {
		pod := &corev1.Pod{}
		pod.Spec.NodeSelector = map[string]string{key: value}
		return &migPodLimits{Affinity: nodeaffinity.GetRequiredNodeAffinity(pod)}
	}
	noSchedule := corev1.Taint{Key: "team", Value: "ml", Effect: corev1.TaintEffectNoSchedule}
	noExecute := corev1.Taint{Key: "maintenance", Effect: corev1.TaintEffectNoExecute}
	preferNo := corev1.Taint{Key: "spot", Effect: corev1.TaintEffectPreferNoSchedule}
	tolerates := func(tolerations ...corev1.Toleration) *migPodLimits { return &migPodLimits{Tolerations: tolerations} }
	for _, tc := range []struct {
		name  string
		nodes []migNodeView
		where *migPodLimits
		want  []string // cards planned, in order
	}{
		{"a pod pinned by node selector to b gets b's card, not a's",
			[]migNodeView{node("a", h100, nil), node("b", h100, map[string]string{"zone": "b"})}, pinned("zone", "b"), []string{"GPU-b"}},
		{"a pod pinned to a label no node has gets no plan",
			[]migNodeView{node("a", h100, nil), node("b", h100, map[string]string{"zone": "b"})}, pinned("zone", "c"), nil},
		{"a pod pinned by required node affinity gets its node's card", []migNodeView{node("a", h100, nil), node("b", h100, nil)},
			&migPodLimits{Affinity: nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{
				NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
						Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}}}}}}}})},
			[]string{"GPU-b"}},
		{"a type filter excluding H100 gets no plan on H100 nodes",
			[]migNodeView{node("a", h100, nil), node("b", h100, nil)}, &migPodLimits{Filters: api.PodOptions{TypeExclude: []string{"h100"}}}, nil},
		{"a type filter excluding H100 gets the A100's card",
			[]migNodeView{node("a", h100, nil), node("b", a100, nil)}, &migPodLimits{Filters: api.PodOptions{TypeExclude: []string{"H100"}}}, []string{"GPU-b"}},
		{"a type filter including A100 gets the A100's card",
			[]migNodeView{node("a", h100, nil), node("b", a100, nil)}, &migPodLimits{Filters: api.PodOptions{TypeInclude: []string{"a100"}}}, []string{"GPU-b"}},
		{"a UUID filter excluding a's card gets b's",
			[]migNodeView{node("a", h100, nil), node("b", h100, nil)}, &migPodLimits{Filters: api.PodOptions{UUIDExclude: []string{"GPU-a"}}}, []string{"GPU-b"}},
		{"an untolerated NoSchedule taint blocks the node",
			[]migNodeView{node("a", h100, nil, noSchedule), node("b", h100, nil)}, nil, []string{"GPU-b"}},
		{"an untolerated NoExecute taint blocks the node",
			[]migNodeView{node("a", h100, nil, noExecute)}, nil, nil},
		{"a PreferNoSchedule taint does not block", []migNodeView{node("a", h100, nil, preferNo)}, nil, []string{"GPU-a"}},
		{"a tolerated NoSchedule taint does not block", []migNodeView{node("a", h100, nil, noSchedule), node("b", h100, nil)},
			tolerates(corev1.Toleration{Key: "team", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule}),
			[]string{"GPU-a"}},
		{"a toleration of another value does not tolerate", []migNodeView{node("a", h100, nil, noSchedule), node("b", h100, nil)},
			tolerates(corev1.Toleration{Key: "team", Operator: corev1.TolerationOpEqual, Value: "web", Effect: corev1.TaintEffectNoSchedule}),
			[]string{"GPU-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			demand := []migDemand{{Profile: "2g.20gb", Pod: "p", Where: tc.where}}
			var got []string
			for _, pl := range chooseMIGPlans(tc.nodes, demand) {
				got = append(got, pl.Card.UUID)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("planned %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("a free instance the pod may not use does not meet its demand", func(t *testing.T) {
		free := node("a", h100, nil)
		free.Cards[0].Free, free.Cards[0].Plannable = map[string]int{"2g.20gb": 1}, false
		nodes := []migNodeView{free, node("b", h100, map[string]string{"zone": "b"})}
		got := chooseMIGPlans(nodes, []migDemand{{Profile: "2g.20gb", Pod: "p", Where: pinned("zone", "b")}})
		if len(got) != 1 || got[0].Card.UUID != "GPU-b" {
			t.Fatalf("planned %+v, want b's card: the free 2g.20gb is on a node the pod may not use", got)
		}
		if got := chooseMIGPlans(nodes, []migDemand{{Profile: "2g.20gb", Pod: "p"}}); len(got) != 0 {
			t.Fatalf("planned %+v for a pod that may take the free 2g.20gb", got)
		}
	})
	t.Run("pods of different limits share a card only where both may go", func(t *testing.T) {
		nodes := []migNodeView{node("a", h100, nil), node("b", h100, map[string]string{"zone": "b"})}
		demand := []migDemand{{Profile: "2g.20gb", Pod: "pinned", Where: pinned("zone", "b")}, {Profile: "2g.20gb", Pod: "free"},
			{Profile: "1g.20gb", Pod: "h100-less", Where: &migPodLimits{Filters: api.PodOptions{TypeExclude: []string{"H100"}}}}}
		got := chooseMIGPlans(nodes, demand)
		if len(got) != 2 || got[0].Card.UUID != "GPU-a" || got[1].Card.UUID != "GPU-b" {
			t.Fatalf("planned %+v, want a's card then b's", got)
		}
		pods := func(pl migPlanned) (out []string) {
			for _, d := range pl.Served {
				out = append(out, d.Pod)
			}
			return out
		}
		if a, b := pods(got[0]), pods(got[1]); !slices.Equal(a, []string{"free"}) || !slices.Equal(b, []string{"pinned"}) {
			t.Fatalf("a serves %v and b %v, want free on a and pinned on b, and no card for the pod that excludes H100", a, b)
		}
	})
}

// Pods with the same limits share one value, so each node is judged once for all of
// them; a pod without any has none; pods without MIG profiles are not in the demand.
func TestPendingMIGDemandSharesLimits(t *testing.T) {
	withSelector := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.NodeSelector = map[string]string{"zone": "b"}
		return p
	}
	pods := []*corev1.Pod{withSelector(migPod("a", "pg-a", "2g.20gb", 1)), withSelector(migPod("b", "pg-b", "2g.20gb", 1)),
		migPod("c", "pg-c", "2g.20gb", 1), vgpuPod("d", "pg-d", 1, 1000, 10, nil), cpuPod("e", "pg-e")}
	ssn, p := migPlanSession(t, []*corev1.Node{optedInMIGNode("n")}, pods...)
	byPod := map[string]*migPodLimits{}
	for _, d := range p.pendingMIGDemand(ssn) {
		byPod[d.Pod] = d.Where
	}
	if len(byPod) != 3 {
		t.Fatalf("demand of %d pods (%v), want the three MIG pods only", len(byPod), byPod)
	}
	if byPod["ns/a"] == nil || byPod["ns/a"] != byPod["ns/b"] {
		t.Errorf("pods a and b with the same node selector got limits %p and %p, want one shared value", byPod["ns/a"], byPod["ns/b"])
	}
	if byPod["ns/c"] != nil {
		t.Errorf("pod c without limits got %+v", byPod["ns/c"])
	}
}

// Through a Volcano session with two opted-in nodes: a pod whose node selector names
// only b gets b's card planned and a's left alone; a pod that does not tolerate a's
// NoSchedule taint gets b's; a pod whose type filter excludes H100 gets neither.
func TestAPlanGoesToANodeThePodMayUse(t *testing.T) {
	zoned := func(name string) *corev1.Node {
		n := optedInMIGNode(name)
		n.Labels["zone"] = name
		return n
	}
	t.Run("node selector", func(t *testing.T) {
		pod := migPod("a", "pg-a", "2g.20gb", 1)
		pod.Spec.NodeSelector = map[string]string{"zone": "b"}
		_, p := migPlanSession(t, []*corev1.Node{zoned("a"), zoned("b")}, pod)
		if why := cardCordon(p, "a", "GPU-a-0"); why != "" {
			t.Fatalf("a's card blocked for %q, a node the pod's selector excludes", why)
		}
		if why := cardCordon(p, "b", "GPU-b-0"); !strings.Contains(why, "re-partitioned to 2g.20gb+3g.40gb") {
			t.Fatalf("b's card blocked for %q, want a plan for the pod pinned there", why)
		}
	})
	t.Run("taint", func(t *testing.T) {
		a, b := zoned("a"), zoned("b")
		a.Spec.Taints = []corev1.Taint{{Key: "team", Value: "ml", Effect: corev1.TaintEffectNoSchedule}}
		_, p := migPlanSession(t, []*corev1.Node{a, b}, migPod("a", "pg-a", "2g.20gb", 1))
		if why := cardCordon(p, "a", "GPU-a-0"); why != "" {
			t.Fatalf("a's card blocked for %q, on a node whose taint the pod does not tolerate", why)
		}
		if why := cardCordon(p, "b", "GPU-b-0"); !strings.Contains(why, "re-partitioned to 2g.20gb+3g.40gb") {
			t.Fatalf("b's card blocked for %q, want a plan", why)
		}
	})
	t.Run("card filter", func(t *testing.T) {
		pod := migPod("a", "pg-a", "2g.20gb", 1)
		pod.Annotations[api.AnnotationGPUTypeExclude] = "H100"
		_, p := migPlanSession(t, []*corev1.Node{zoned("a"), zoned("b")}, pod)
		for _, n := range []string{"a", "b"} {
			if why := cardCordon(p, n, "GPU-"+n+"-0"); why != "" {
				t.Fatalf("%s's H100 blocked for %q, for a pod that excludes H100", n, why)
			}
		}
	})
}

// On random clusters and demand, every instance a plan serves belongs to a pod that
// may use the planned card: its node selector, taints and card filters allow it.
func TestEveryPlannedInstanceMayUseItsCard(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	models := []string{"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"}
	profiles := []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
	taint := corev1.Taint{Key: "t", Effect: corev1.TaintEffectNoSchedule}
	for round := 0; round < 300; round++ {
		var nodes []migNodeView
		for n := 0; n < 1+rng.IntN(6); n++ {
			node := &corev1.Node{}
			node.Name, node.Labels = fmt.Sprintf("n%d", n), map[string]string{"zone": fmt.Sprint(rng.IntN(3))}
			if rng.IntN(3) == 0 {
				node.Spec.Taints = []corev1.Taint{taint}
			}
			v := migNodeView{Name: node.Name, Node: node, OptedIn: rng.IntN(4) > 0}
			for c := 0; c < 1+rng.IntN(3); c++ {
				v.Cards = append(v.Cards, migCardView{UUID: fmt.Sprintf("GPU-%d-%d", n, c), Index: c, Model: models[rng.IntN(2)],
					Plannable: true, Free: map[string]int{profiles[rng.IntN(len(profiles))]: rng.IntN(2)}})
			}
			nodes = append(nodes, v)
		}
		limits := []*migPodLimits{nil}
		for k := 0; k < 4; k++ {
			pod := &corev1.Pod{}
			if rng.IntN(2) == 0 {
				pod.Spec.NodeSelector = map[string]string{"zone": fmt.Sprint(rng.IntN(3))}
			}
			if rng.IntN(2) == 0 {
				pod.Spec.Tolerations = []corev1.Toleration{{Key: "t", Operator: corev1.TolerationOpExists}}
			}
			o := api.PodOptions{}
			switch rng.IntN(3) {
			case 0:
				o.TypeExclude = []string{"h100"}
			case 1:
				o.UUIDInclude = []string{fmt.Sprintf("GPU-%d-0", rng.IntN(6))}
			}
			limits = append(limits, migLimitsBook{}.of(pod, &o))
		}
		var demand []migDemand
		for i := 0; i < rng.IntN(20); i++ {
			demand = append(demand, migDemand{Profile: profiles[rng.IntN(len(profiles))], Pod: fmt.Sprint("p", i), Where: limits[rng.IntN(len(limits))]})
		}
		for _, pl := range chooseMIGPlans(nodes, demand) {
			var node *corev1.Node
			for _, n := range nodes {
				if n.Name == pl.Node {
					node = n.Node
				}
			}
			for _, d := range pl.Served {
				if !d.Where.allowsNode(node) || !d.Where.allowsCard(&pl.Card) {
					t.Fatalf("round %d: %s's card %s serves %s, whose limits %+v refuse it", round, pl.Node, pl.Card.UUID, d.Pod, d.Where)
				}
			}
		}
	}
}
