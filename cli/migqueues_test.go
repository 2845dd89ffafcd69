package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/pluginargs"
	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
	"github.com/tessera-gpu/tessera/plugins/vgpu/shares"
)

// migQueueCluster is three H100 nodes and two queues, heavy (weight 3) and light
// (weight 1), that hold and ask for whole MIG instances:
//
//	gpu-m1  card 0 in MIG mode, seven 1g.10gb; card 1 in MIG mode, two 3g.40gb
//	        heavy holds one 3g.40gb and two 1g.10gb
//	gpu-m2  card 0 in MIG mode, seven 1g.10gb, all held by light; card 1 a plain card
//	gpu-m3  cordoned; card 0 in MIG mode, seven 1g.10gb
//
// The MIG supply is 20 slices, what the instances hold (7 and 6 on gpu-m1's cards, 7 on
// gpu-m2's card 0, none for the cordoned node); heavy holds 5 and asks 12 more 1g.10gb,
// light holds 7 and asks 3 more. Divided 3:1, heavy deserves 15 and light 5: light is
// above its MIG share, heavy below it.
func migQueueCluster(t *testing.T) *Snapshot {
	t.Helper()
	snap := &Snapshot{Args: pluginargs.Defaults(), Now: now,
		Queues: []QueueSpec{{Name: "heavy", Weight: 3, Capability: fairshare.Unlimited}, {Name: "light", Weight: 1, Capability: fairshare.Unlimited}}}
	const model = "NVIDIA H100 80GB HBM3"
	oneG := func(node string, card int) []api.MIGInstance {
		var out []api.MIGInstance
		for i := 0; i < 7; i++ {
			out = append(out, api.MIGInstance{UUID: fmt.Sprintf("MIG-%s-%d-%d", node, card, i), Profile: "1g.10gb", GI: i + 1, Start: i, Size: 1, MemoryMiB: 9856})
		}
		return out
	}
	node := func(name string, layout map[string][]api.MIGInstance, cards ...api.Card) *corev1.Node {
		n := tesseraNode(t, name, now, cards...)
		s, err := api.EncodeMIGInstances(&api.NodeMIGInstances{Cards: layout})
		if err != nil {
			t.Fatal(err)
		}
		n.Annotations[api.AnnotationMIGInstances] = s
		return n
	}
	migCard := func(uuid string, index int) api.Card {
		c := card(uuid, index, model, 81559)
		c.MIG = true
		return c
	}
	m1 := node("gpu-m1", map[string][]api.MIGInstance{
		"GPU-m1-0": oneG("gpu-m1", 0),
		"GPU-m1-1": {{UUID: "MIG-gpu-m1-1-a", Profile: "3g.40gb", GI: 1, Start: 0, Size: 4, MemoryMiB: 40320},
			{UUID: "MIG-gpu-m1-1-b", Profile: "3g.40gb", GI: 2, Start: 4, Size: 4, MemoryMiB: 40320}},
	}, migCard("GPU-m1-0", 0), migCard("GPU-m1-1", 1))
	m2 := node("gpu-m2", map[string][]api.MIGInstance{"GPU-m2-0": oneG("gpu-m2", 0)}, migCard("GPU-m2-0", 0), card("GPU-m2-1", 1, model, 81559))
	m3 := node("gpu-m3", map[string][]api.MIGInstance{"GPU-m3-0": oneG("gpu-m3", 0)}, migCard("GPU-m3-0", 0))
	m3.Spec.Unschedulable = true
	snap.Nodes = []corev1.Node{*m1, *m2, *m3}

	hold := func(queue, name, profile, node, cardUUID, mig string, mib int64) {
		p := migPendingPod(name, profile)
		p.Namespace, p.Annotations[QueueKey] = queue, queue
		p = placed(t, p, node, api.QoSFixedShare, api.HandoffDone, api.CardAssignment{UUID: cardUUID, MemoryMiB: mib, Cores: 100, MIG: mig})
		snap.Pods = append(snap.Pods, *p)
	}
	ask := func(queue, name, profile string) {
		p := migPendingPod(name, profile)
		p.Namespace, p.Annotations[QueueKey] = queue, queue
		snap.Pods = append(snap.Pods, *p)
	}
	hold("heavy", "big-0", "3g.40gb", "gpu-m1", "GPU-m1-1", "MIG-gpu-m1-1-a", 40320)
	for i := 0; i < 2; i++ {
		hold("heavy", fmt.Sprintf("small-%d", i), "1g.10gb", "gpu-m1", "GPU-m1-0", fmt.Sprintf("MIG-gpu-m1-0-%d", i), 9856)
	}
	for i := 0; i < 7; i++ {
		hold("light", fmt.Sprintf("held-%d", i), "1g.10gb", "gpu-m2", "GPU-m2-0", fmt.Sprintf("MIG-gpu-m2-0-%d", i), 9856)
	}
	for i := 0; i < 12; i++ {
		ask("heavy", fmt.Sprintf("more-%d", i), "1g.10gb")
	}
	for i := 0; i < 3; i++ {
		ask("light", fmt.Sprintf("more-%d", i), "1g.10gb")
	}
	return snap
}

// schedulerShares computes the queue shares of snap as the vgpu plugin does at session
// open: the card book's supply (book.Ledger.CardTotals), each bound pod charged what
// it holds and each pending one what it asks (shares.Shares.Charge and Cost, instances
// by their profile in the book's layout), divided by plugins/vgpu/shares.
func schedulerShares(t *testing.T, snap *Snapshot) (*shares.Shares, map[string]*vapi.QueueInfo) {
	t.Helper()
	l := book.NewLedger()
	for _, st := range snap.nodeStates() {
		if st.engine == nil {
			continue
		}
		inv, _, err := nodeInventory(st.node, snap.Now, snap.Args.HeartbeatTimeout)
		if err != nil {
			t.Fatal(err)
		}
		l.AddNode(placement.NewNode(st.node.Name, inv, snap.Args.MemoryOversubscription))
		if st.node.Spec.Unschedulable {
			l.MarkCordoned(st.node.Name)
		}
	}
	total, refMiB := l.CardTotals()
	slices, mib := map[string]float64{}, map[string]int64{}
	l.EachCard(func(_ string, c *placement.CardState) {
		mib[c.UUID] = c.CapacityMiB
		for _, in := range c.MIGInstances {
			if n, err := fairshare.MIGSlices(in.Profile); err == nil {
				slices[in.UUID] = n
			}
		}
	})
	cards := fairshare.Cards{RefMiB: refMiB, WholeMiB: refMiB,
		CapacityMiB:    func(u string) (int64, bool) { v, ok := mib[u]; return v, ok },
		InstanceSlices: func(m string) (float64, bool) { v, ok := slices[m]; return v, ok }}
	s := shares.New(total, cards, snap.Args.Resources)
	queues := map[string]*vapi.QueueInfo{}
	for _, q := range snap.Queues {
		queues[q.Name] = &vapi.QueueInfo{UID: vapi.QueueID(q.Name), Name: q.Name, Weight: q.Weight}
	}
	for i := range snap.Pods {
		p := &snap.Pods[i]
		q := queues[Queue(p)]
		if p.Spec.NodeName != "" {
			cs, _, ok, err := snap.podAssignment(p)
			if !ok || err != nil {
				t.Fatalf("%s: assignment %v", p.Name, err)
			}
			s.Hold(q, vapi.TaskID(p.Namespace+"/"+p.Name), s.Charge(cs, api.HoldsIdleOnly(p.Annotations)))
			continue
		}
		req, err := snap.request(p)
		if err != nil {
			t.Fatal(err)
		}
		s.Ask(q, s.Cost(req.Containers, req.Tenancy().IdleOnly))
	}
	s.Divide()
	return s, queues
}

// Explain's queue view counts MIG slices as the scheduler does: the same supply,
// holdings, demand and deserved share, per queue, as plugins/vgpu/shares computes
// from the card book; the queue the scheduler refuses by its MIG share is the one
// explain says is at its share, with the same numbers in its words; the queue below
// its MIG share may reclaim from the one above it.
func TestExplainQueueMIGSlicesAgreeWithTheScheduler(t *testing.T) {
	snap := migQueueCluster(t)
	sched, queues := schedulerShares(t, snap)
	views := snap.queueViews()
	for _, st := range sched.Standings() {
		v := views[st.Name]
		if v == nil {
			t.Fatalf("explain has no view of queue %s", st.Name)
		}
		if v.Held.MIGSlices != st.Allocated.MIGSlices || v.Deserved.MIGSlices != st.Deserved.MIGSlices ||
			v.Held.MIGSlices+v.Asked.MIGSlices != st.Requested.MIGSlices {
			t.Errorf("queue %s: explain holds %v, deserves %v, asks %v MIG slices; the scheduler %+v", st.Name,
				v.Held.MIGSlices, v.Deserved.MIGSlices, v.Asked.MIGSlices, st)
		}
		if v.Deserved.Cores != st.Deserved.Cores || v.Deserved.MemoryMiB != st.Deserved.MemoryMiB {
			t.Errorf("queue %s: explain's card share %+v, the scheduler's %+v", st.Name, v.Deserved, st.Deserved)
		}
	}
	heavy, light := views["heavy"], views["light"]
	if heavy.Held.MIGSlices != 5 || heavy.Asked.MIGSlices != 12 || heavy.Deserved.MIGSlices != 15 || !heavy.Below || heavy.Reclaimable["light"] != 7 {
		t.Errorf("heavy %+v; want 5 held, 12 asked, 15 deserved MIG slices, below its share, light's 7 pods reclaimable", heavy)
	}
	if light.Held.MIGSlices != 7 || light.Asked.MIGSlices != 3 || light.Deserved.MIGSlices != 5 || light.Below {
		t.Errorf("light %+v; want 7 held, 3 asked, 5 deserved MIG slices, not below its share", light)
	}
	if heavy.Deserved.Cores != 0 || heavy.Held.Cores != 0 {
		t.Errorf("heavy's card share %+v: MIG pods ask for no card cores", heavy.Deserved)
	}

	oneG := fairshare.Amount{MIGSlices: 1}
	if ok, why := sched.Admit(queues["heavy"].UID, oneG); !ok {
		t.Errorf("the scheduler refuses heavy a 1g instance: %s", why)
	}
	ok, why := sched.Admit(queues["light"].UID, oneG)
	if ok || !strings.Contains(why, "MIG slices 7 held + 1 asked > 5 deserved") {
		t.Fatalf("the scheduler admits light's 1g pod %v (%q), want it refused by its MIG share", ok, why)
	}
	var out bytes.Buffer
	pending := snap.FindPod("light", "more-0")
	if err := WriteExplain(&out, snap.Explain(pending)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"queue light holds 7 of its 5 deserved MIG slices; its pending MIG pods ask 3 more",
		"queue light is at its share",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("explain says\n%s\nwant a line with %q", out.String(), want)
		}
	}
}

// A queue without MIG instances shows no MIG slices: the line is absent from explain
// and migSlices from its JSON.
func TestExplainShowsNoMIGSlicesForQueuesWithoutInstances(t *testing.T) {
	v := &QueueView{Queue: "prod", Weight: 1, TotalWeight: 1, Below: true}
	var out bytes.Buffer
	writeQueue(&out, v)
	if strings.Contains(out.String(), "MIG") {
		t.Errorf("explain of a queue without MIG instances says\n%s", out.String())
	}
}
