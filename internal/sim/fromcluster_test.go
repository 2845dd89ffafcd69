package sim

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/pluginargs"
)

var liveNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// liveNode is a node with n A100 40 GB cards named GPU-<name>-<i>, its heartbeat
// age old.
func liveNode(t *testing.T, name string, n int, old time.Duration) corev1.Node {
	t.Helper()
	inv := &api.NodeInventory{Version: api.InventoryVersion}
	for i := 0; i < n; i++ {
		inv.Cards = append(inv.Cards, api.Card{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: "NVIDIA A100-SXM4-40GB",
			MemoryMiB: 40960, NUMA: 0, Shares: 4, Healthy: true})
	}
	s, err := api.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
		api.AnnotationInventory: s, api.AnnotationHeartbeat: liveNow.Add(-old).Format(time.RFC3339)}}}
}

// livePod is a pending pod of PodGroup group asking for one card of mib and cores,
// under the given resource names.
func livePod(ns, name, group string, names api.ResourceNames, mib, cores int64) corev1.Pod {
	lim := corev1.ResourceList{
		names.Number: *resource.NewQuantity(1, resource.DecimalSI),
		names.Memory: *resource.NewQuantity(mib, resource.DecimalSI),
		names.Cores:  *resource.NewQuantity(cores, resource.DecimalSI),
	}
	ann := map[string]string{}
	if group != "" {
		ann[schedulingv1.KubeGroupNameAnnotationKey] = group
	}
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: lim}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
}

// onCards binds p to node holding the cards.
func onCards(t *testing.T, p corev1.Pod, node string, cards ...api.CardAssignment) corev1.Pod {
	t.Helper()
	s, err := api.EncodeAssignment(&api.PodAssignment{Version: api.AssignmentVersion, Node: node, QoS: api.QoSFixedShare,
		Containers: []api.ContainerAssignment{{Name: "main", Cards: cards}}})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[api.AnnotationAssignment] = s
	p.Spec.NodeName, p.Status.Phase = node, corev1.PodRunning
	return p
}

func liveGroup(ns, name, queue string, min int32) schedulingv1.PodGroup {
	return schedulingv1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: schedulingv1.PodGroupSpec{MinMember: min, Queue: queue}}
}

func liveQueue(name string, capability corev1.ResourceList) schedulingv1.Queue {
	return schedulingv1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: schedulingv1.QueueSpec{Weight: 1, Capability: capability}}
}

func TestFromClusterTurnsTheClusterIntoAScenario(t *testing.T) {
	def := pluginargs.Defaults()
	renamed := pluginargs.Defaults()
	renamed.Resources.Memory, renamed.Resources.Cores = "example.com/vgpu-mem", "example.com/vgpu-sm"
	mib := func(s string) resource.Quantity { return resource.MustParse(s) }
	for _, tc := range []struct {
		name    string
		args    pluginargs.Args
		nodes   []corev1.Node
		pods    []corev1.Pod
		groups  []schedulingv1.PodGroup
		queues  []schedulingv1.Queue
		jobs    []Job
		pending []string
		notes   []string
		check   func(t *testing.T, l *Live)
	}{{
		name:  "a running pod keeps the cards its assignment names",
		args:  def,
		nodes: []corev1.Node{liveNode(t, "n1", 2, time.Second)},
		pods: []corev1.Pod{onCards(t, livePod("a", "train-0", "train", def.Resources, 30000, 50), "n1",
			api.CardAssignment{UUID: "GPU-n1-1", MemoryMiB: 30000, Cores: 50})},
		groups: []schedulingv1.PodGroup{liveGroup("a", "train", "research", 1)},
		queues: []schedulingv1.Queue{liveQueue("research", nil)},
		jobs: []Job{{Name: "train", Namespace: "a", Queue: "research", Replicas: 1, MinAvailable: 1, Cards: 1, MemoryMiB: 30000, Cores: 50,
			Pods: []string{"train-0"}, Bound: []Member{{Node: "n1", Cards: []api.CardAssignment{{UUID: "GPU-n1-1", MemoryMiB: 30000, Cores: 50}}}}}},
	}, {
		name:  "a gang split across running and pending members is one job, running members first",
		args:  def,
		nodes: []corev1.Node{liveNode(t, "n1", 2, time.Second)},
		pods: []corev1.Pod{
			livePod("a", "w-2", "w", def.Resources, 20000, 50),
			onCards(t, livePod("a", "w-0", "w", def.Resources, 20000, 50), "n1", api.CardAssignment{UUID: "GPU-n1-0", MemoryMiB: 20000, Cores: 50}),
			livePod("a", "w-3", "w", def.Resources, 20000, 50),
			onCards(t, livePod("a", "w-1", "w", def.Resources, 20000, 50), "n1", api.CardAssignment{UUID: "GPU-n1-0", MemoryMiB: 20000, Cores: 50}),
		},
		groups: []schedulingv1.PodGroup{liveGroup("a", "w", "default", 4)},
		jobs: []Job{{Name: "w", Namespace: "a", Queue: "default", Replicas: 4, MinAvailable: 4, Cards: 1, MemoryMiB: 20000, Cores: 50,
			Pods: []string{"w-0", "w-1", "w-2", "w-3"}, Bound: []Member{
				{Node: "n1", Cards: []api.CardAssignment{{UUID: "GPU-n1-0", MemoryMiB: 20000, Cores: 50}}},
				{Node: "n1", Cards: []api.CardAssignment{{UUID: "GPU-n1-0", MemoryMiB: 20000, Cores: 50}}}}}},
		pending: []string{"a/w-2 a/w 4", "a/w-3 a/w 4"},
	}, {
		name: "a queue keeps the card dimensions of its capability and guarantee, under the default names",
		args: renamed,
		pods: []corev1.Pod{livePod("a", "p", "", renamed.Resources, 8000, 10)},
		queues: []schedulingv1.Queue{{ObjectMeta: metav1.ObjectMeta{Name: "capped"}, Spec: schedulingv1.QueueSpec{Weight: 0,
			Capability:  corev1.ResourceList{"example.com/vgpu-mem": mib("10000"), corev1.ResourceCPU: mib("8")},
			Guarantee:   schedulingv1.Guarantee{Resource: corev1.ResourceList{"example.com/vgpu-sm": mib("100")}},
			Reclaimable: new(bool)}}},
		jobs:    []Job{{Name: "p", Namespace: "a", Queue: "default", Replicas: 1, MinAvailable: 1, Cards: 1, MemoryMiB: 8000, Cores: 10, Pods: []string{"p"}}},
		pending: []string{"a/p a/p 1"},
		notes:   []string{"queue capped: capability of cpu is not simulated (the simulation models card resources only)"},
		check: func(t *testing.T, l *Live) {
			q := l.Scenario.Queues[0]
			if q.Weight != 1 || q.Reclaimable == nil || *q.Reclaimable || len(q.Capability) != 1 || len(q.Guarantee) != 1 ||
				q.Capability.Name(api.ResourceMemory, resource.DecimalSI).Value() != 10000 ||
				q.Guarantee.Name(api.ResourceCores, resource.DecimalSI).Value() != 100 {
				t.Errorf("queue %+v: want weight 1, not reclaimable, vgpu-memory 10000 capability, vgpu-cores 100 guarantee", q)
			}
			if _, named := l.Scenario.Plugin[pluginargs.KeyResourceMemory]; named {
				t.Errorf("plugin arguments keep the cluster's resource names, which the simulated pods do not use: %v", l.Scenario.Plugin)
			}
		},
	}, {
		name:  "a node whose agent is gone is left out, and so are the cards held there",
		args:  def,
		nodes: []corev1.Node{liveNode(t, "old", 1, time.Hour)},
		pods: []corev1.Pod{onCards(t, livePod("a", "x", "", def.Resources, 1000, 10), "old",
			api.CardAssignment{UUID: "GPU-old-0", MemoryMiB: 1000, Cores: 10})},
		notes: []string{"node old left out: the scheduler cannot use its cards: ", "pod a/x: its node old is left out, so are its cards"},
	}, {
		name: "pending members of one gang that ask for different cards are not simulated, with why",
		args: def,
		pods: []corev1.Pod{livePod("a", "m-0", "m", def.Resources, 1000, 10), livePod("a", "m-1", "m", def.Resources, 2000, 10)},
		jobs: []Job{{Name: "m", Namespace: "a", Queue: "default", Replicas: 1, MinAvailable: 1, Cards: 1, MemoryMiB: 1000, Cores: 10,
			Pods: []string{"m-0"}}},
		pending: []string{"a/m-0 a/m 1"},
		notes:   []string{"pod a/m-1: not simulated: its gang a/m mixes vGPU requests"},
	}, {
		name:  "a gang with fewer vGPU pods than its minMember keeps its running members' cards, its pending ones are left out",
		args:  def,
		nodes: []corev1.Node{liveNode(t, "n1", 1, time.Second)},
		pods: []corev1.Pod{
			onCards(t, livePod("a", "mpi-0", "mpi", def.Resources, 1000, 10), "n1", api.CardAssignment{UUID: "GPU-n1-0", MemoryMiB: 1000, Cores: 10}),
			livePod("a", "mpi-1", "mpi", def.Resources, 1000, 10),
		},
		groups: []schedulingv1.PodGroup{liveGroup("a", "mpi", "default", 3)},
		jobs: []Job{{Name: "mpi", Namespace: "a", Queue: "default", Replicas: 1, MinAvailable: 1, Cards: 1, MemoryMiB: 1000, Cores: 10,
			Pods: []string{"mpi-0"}, Bound: []Member{{Node: "n1", Cards: []api.CardAssignment{{UUID: "GPU-n1-0", MemoryMiB: 1000, Cores: 10}}}}}},
		notes: []string{"pod a/mpi-1: not simulated: its gang a/mpi has minMember 3 but only 2 vGPU pods"},
	}, {
		name:   "a pod of a queue that does not exist is not simulated",
		args:   def,
		pods:   []corev1.Pod{livePod("a", "lost", "g", def.Resources, 1000, 10)},
		groups: []schedulingv1.PodGroup{liveGroup("a", "g", "nope", 1)},
		notes:  []string{`pod a/lost: not simulated: queue "nope" does not exist`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			l := FromCluster(&Cluster{Now: liveNow, Args: tc.args, Nodes: tc.nodes, Pods: tc.pods, PodGroups: tc.groups, Queues: tc.queues})
			if !reflect.DeepEqual(l.Scenario.Jobs, tc.jobs) {
				t.Errorf("jobs\n got %+v\nwant %+v", l.Scenario.Jobs, tc.jobs)
			}
			var pending []string
			for _, p := range l.Pending {
				pending = append(pending, fmt.Sprintf("%s/%s %s %d", p.Namespace, p.Name, p.Job, p.MinMember))
			}
			if !reflect.DeepEqual(pending, tc.pending) {
				t.Errorf("pending %q, want %q", pending, tc.pending)
			}
			if len(l.Notes) != len(tc.notes) {
				t.Errorf("notes %q, want %d", l.Notes, len(tc.notes))
			}
			for i := range min(len(l.Notes), len(tc.notes)) {
				if !strings.HasPrefix(l.Notes[i], tc.notes[i]) {
					t.Errorf("note %q, want one starting %q", l.Notes[i], tc.notes[i])
				}
			}
			if err := l.Scenario.validate(); err != nil {
				t.Errorf("the scenario does not validate: %v", err)
			}
			if tc.check != nil {
				tc.check(t, l)
			}
		})
	}
}

// The gang split across running and pending members runs as a gang: with room for
// only one more member on the node, neither pending member is placed; with room for
// both, both are, beside the cards the running members keep.
func TestAGangSplitAcrossRunningAndPendingIsPlacedWholeOrNotAtAll(t *testing.T) {
	def := pluginargs.Defaults()
	cluster := func(cards int) *Cluster {
		return &Cluster{Now: liveNow, Args: def, Nodes: []corev1.Node{liveNode(t, "n1", cards, time.Second)},
			Pods: []corev1.Pod{
				onCards(t, livePod("a", "w-0", "w", def.Resources, 40960, 100), "n1", api.CardAssignment{UUID: "GPU-n1-0", MemoryMiB: 40960, Cores: 100}),
				onCards(t, livePod("a", "w-1", "w", def.Resources, 40960, 100), "n1", api.CardAssignment{UUID: "GPU-n1-1", MemoryMiB: 40960, Cores: 100}),
				livePod("a", "w-2", "w", def.Resources, 40960, 100), livePod("a", "w-3", "w", def.Resources, 40960, 100),
			},
			PodGroups: []schedulingv1.PodGroup{liveGroup("a", "w", "default", 4)}}
	}
	for _, tc := range []struct {
		cards, placed int
	}{{3, 0}, {4, 2}} {
		p, err := PlanCapacity(FromCluster(cluster(tc.cards)), Shape{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if p.AsIs.Placed != tc.placed {
			t.Errorf("%d cards, 2 held: %d of the gang's pending members placed, want %d: %+v", tc.cards, p.AsIs.Placed, tc.placed, p.Pods)
		}
		for _, pp := range p.Pods {
			if pp.AsIs.Placed && (len(pp.AsIs.Cards) != 1 || pp.AsIs.Cards[0] < 2) {
				t.Errorf("%s placed on cards %v, which the running members hold", pp.Name, pp.AsIs.Cards)
			}
		}
	}
}

func TestParseShape(t *testing.T) {
	for _, tc := range []struct {
		in    string
		model string
		cards int
		err   string
	}{
		{"dgxa100", "NVIDIA A100-SXM4-40GB", 8, ""},
		{"DGXA100", "NVIDIA A100-SXM4-40GB", 8, ""},
		{"H100x8", "NVIDIA H100 80GB HBM3", 8, ""},
		{"a100-80gbx2", "NVIDIA A100-SXM4-80GB", 2, ""},
		{"t4x16", "Tesla T4", 16, ""},
		{"t4x17", "", 0, `node shape "t4x17": COUNT "17" must be a whole number in 1..16`},
		{"H100x", "", 0, `node shape "H100x": want a machine name or MODELxCOUNT`},
		{"x8", "", 0, `node shape "x8": want a machine name or MODELxCOUNT`},
		{"P100x2", "", 0, `node shape "P100x2": unknown MODEL "p100"`},
		{"", "", 0, `node shape "": want a machine name`},
	} {
		s, err := ParseShape(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseShape(%q): %v, want an error containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || s.Model != tc.model || s.Cards != tc.cards || s.Name != tc.in {
			t.Errorf("ParseShape(%q) = %+v, %v; want %d × %s", tc.in, s, err, tc.cards, tc.model)
		}
	}
}

func TestScenarioHostsAndBoundMembersAreChecked(t *testing.T) {
	host := "hosts:\n- {name: h, cards: [{uuid: GPU-h0, index: 0, model: m, memoryMiB: 100, numa: 0, shares: 2, healthy: true}]}\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"a host without cards", "hosts:\n- {name: h, cards: []}\n", "hosts[0]: want a name and at least one card"},
		{"a host named like a group's node", "nodes:\n- {prefix: gpu, count: 1, cards: 1, model: m, memoryMiB: 1}\nhosts:\n- {name: gpu-0, cards: [{uuid: u, model: m, memoryMiB: 1}]}\n", `node name "gpu-0" is taken`},
		{"a card UUID twice", "hosts:\n- {name: a, cards: [{uuid: u, model: m, memoryMiB: 1}]}\n- {name: b, cards: [{uuid: u, model: m, memoryMiB: 1}]}\n", `uuid "u" appears twice`},
		{"a bound member on another host's card", host + "jobs:\n- {name: j, queue: default, replicas: 1, minAvailable: 1, cards: 1, bound: [{node: x, cards: [{uuid: GPU-h0, memoryMiB: 1, cores: 1}]}]}\n", `card "GPU-h0" is not a card of host "x"`},
		{"more bound members than replicas", host + "jobs:\n- {name: j, queue: default, replicas: 1, minAvailable: 1, cards: 1, bound: [{node: h, cards: [{uuid: GPU-h0, memoryMiB: 1, cores: 1}]}, {node: h, cards: [{uuid: GPU-h0, memoryMiB: 1, cores: 1}]}]}\n", "2 bound members for 1 replicas"},
		{"pods named for fewer replicas", "jobs:\n- {name: j, queue: default, replicas: 2, minAvailable: 1, cards: 1, pods: [a]}\n", "1 pods named for 2 replicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseScenario([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// A scenario written by hand with a host, a queue capability and a bound member runs:
// the member's card stays held, the capped queue's pending member waits.
func TestHandWrittenLiveScenarioRuns(t *testing.T) {
	s, err := ParseScenario([]byte(`
hosts:
- {name: h, cards: [{uuid: GPU-h0, index: 0, model: NVIDIA A100-SXM4-40GB, memoryMiB: 40960, numa: 0, shares: 4, healthy: true},
                    {uuid: GPU-h1, index: 1, model: NVIDIA A100-SXM4-40GB, memoryMiB: 40960, numa: 0, shares: 4, healthy: true}]}
queues:
- {name: capped, weight: 1, capability: {volcano.sh/vgpu-memory: "20000"}}
jobs:
- {name: held, queue: default, replicas: 1, minAvailable: 1, cards: 1, memoryMiB: 40960, cores: 100,
   bound: [{node: h, cards: [{uuid: GPU-h0, memoryMiB: 40960, cores: 100}]}]}
- {name: c, queue: capped, replicas: 2, minAvailable: 1, cards: 1, memoryMiB: 15000, cores: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := res.Summarise()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, j := range sum.Jobs {
		got[j.Name] = j.Placed
	}
	if got["held"] != 1 || got["c"] != 1 {
		t.Errorf("placed %v, want held 1 (bound before) and c 1 (its queue's capability takes one 15000 MiB member)", got)
	}
	for _, c := range sum.Cards {
		if c.UUID == "GPU-h0" && (c.UsedMiB != 40960 || len(c.Pods) != 1) {
			t.Errorf("GPU-h0 after the run: %+v, want only the bound member's 40960 MiB", c)
		}
	}
}

// Members may be bound on a node group's cards (GPU-NODE-c); checking them does not
// list the group's nodes, so a document's count costs nothing to parse.
func TestBoundMembersOnGroupCardsAreCheckedWithoutListingTheGroup(t *testing.T) {
	doc := "nodes:\n- {prefix: gpu, count: 1000000000, cards: 8, model: m, memoryMiB: 100}\n" +
		"jobs:\n- {name: j, queue: default, replicas: 1, minAvailable: 1, cards: 1, bound: [{node: gpu-999999999, cards: [{uuid: GPU-gpu-999999999-7, memoryMiB: 1, cores: 1}]}]}\n"
	start := time.Now()
	if _, err := ParseScenario([]byte(doc)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("parsing took %v", d)
	}
	for _, bad := range []struct{ node, uuid string }{
		{"gpu-999999999", "GPU-gpu-999999999-8"},   // card 8 of 8
		{"gpu-1000000000", "GPU-gpu-1000000000-0"}, // node past the count
		{"gpu-07", "GPU-gpu-07-0"},                 // not how the group names its nodes
	} {
		d := strings.NewReplacer("node: gpu-999999999", "node: "+bad.node, "GPU-gpu-999999999-7", bad.uuid).Replace(doc)
		if _, err := ParseScenario([]byte(d)); err == nil || !strings.Contains(err.Error(), "is not a card of host") {
			t.Errorf("card %s on %s: %v, want it refused", bad.uuid, bad.node, err)
		}
	}
}
