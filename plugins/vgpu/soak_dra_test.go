package vgpu

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/utils/ptr"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/actions/enqueue"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/plugins/vgpu/dracost"
)

// The mixed soak: device-plugin nodes and DRA nodes in one cluster, two or three
// queues, and random arrivals of device-plugin gangs and gangs of claims (shares of a
// card and whole cards), through many sessions of Volcano's enqueue and allocate with
// the plugin and the predicates plugin's Kubernetes 1.34 allocator (consumable
// capacity on, as the chart runs it). Between sessions pods finish and pending jobs
// are deleted. At every session's open, the card book holds on each DRA card exactly
// what the allocated claims hold there (each claim booked once, none skipped). After
// every session, on what the API server holds: no card is over its memory or cores
// counting both kinds (of the claims, those the agent prepared), no device-plugin pod is on a DRA node and no claim on a
// device-plugin node, each claim is reserved for its own pod only and names no card
// twice, and each queue's allocated card memory and cores in the plugin's ledger equal
// what its pods' assignments and allocated claims hold. Even seeds run the chart's
// tiers (vgpu first, its claim reclaimer evicting at its open), odd seeds vgpu in the
// last tier after proportion (the reclaimer must not evict). The node agent is
// modelled at prepare: a claim the allocator over-commits its card with, in one
// session, waits unprepared until the card has room. A seed gives the same placements
// run after run (draSoakPlugin says how), so a failing seed can be rerun.

var draSoakSeed = flag.Int64("dra-soak-seed", 0, "run the mixed DRA soak with this seed only (0: its fixed seeds)")

func TestMixedDRASoak(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.DRAConsumableCapacity, true)
	// Seed 56 runs the chart's tiers and its reclaimer evicts (in vgpu's open, before
	// proportion's, which panicked when proportion opened first).
	seeds, sessions := []int64{1, 2, 3, 4, 56}, 10
	if testing.Short() {
		seeds, sessions = []int64{1}, 5
	}
	if *draSoakSeed != 0 {
		seeds = []int64{*draSoakSeed}
	}
	var total draSoakStats
	for _, seed := range seeds {
		total.add(runDRASoak(t, seed, sessions).stats)
	}
	t.Logf("seeds %v × %d sessions: %+v", seeds, sessions, total)
	if *draSoakSeed != 0 || testing.Short() {
		return // one seed, or the short run's: too few sessions to see every case
	}
	if total.DPBound == 0 || total.ClaimsBound == 0 || total.WholeCards == 0 || total.RefusedClaims == 0 ||
		total.Finished == 0 || total.QueuesChecked == 0 || total.CardBooks == 0 || total.IdleOnlyBound == 0 {
		t.Errorf("the soak did not place both kinds, refuse a gang of claims, finish pods and check queues holding cards: %+v", total)
	}
	if total.Evicted == 0 {
		t.Errorf("the claim reclaimer evicted nothing in the soak: %+v", total)
	}
}

// TestMixedDRASoakIsReproducible: a seed gives the same placements, evictions and
// claims' cards run after run, so that a failing seed can be rerun and debugged.
func TestMixedDRASoakIsReproducible(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.DRAConsumableCapacity, true)
	seeds := []int64{3, 4}
	if *draSoakSeed != 0 {
		seeds = []int64{*draSoakSeed}
	}
	for _, seed := range seeds {
		first, again := runDRASoak(t, seed, 10).trace, runDRASoak(t, seed, 10).trace
		for i := range first {
			if first[i] != again[i] {
				t.Fatalf("seed %d differs between two runs:\n%s\n%s", seed, first[i], again[i])
			}
		}
	}
}

// runDRASoak runs the world of seed through sessions sessions, failing t on the first
// broken invariant.
func runDRASoak(t *testing.T, seed int64, sessions int) *draSoakWorld {
	t.Helper()
	w := newDRASoakWorld(seed)
	for s := 0; s < sessions; s++ {
		if msg := w.session(t); msg != "" {
			t.Fatalf("seed %d (rerun with -dra-soak-seed=%d), session %d: %s", seed, seed, s, msg)
		}
		w.perturb()
	}
	return w
}

type draSoakStats struct {
	DPBound, ClaimsBound, WholeCards, Refused, RefusedClaims, Finished, Deleted, Evicted int
	// QueuesChecked counts the queue ledgers compared while they held cards,
	// CardBooks the DRA cards whose booking was compared while claims held them.
	QueuesChecked, CardBooks int
	// IdleOnlyBound counts, over the checks, the bound idle-only pods charged whole cards.
	IdleOnlyBound int
	// RefusedAtPrepare counts the claims the agent refused, their cards over-committed
	// by the allocator in the session that allocated them.
	RefusedAtPrepare int
}

func (s *draSoakStats) add(o draSoakStats) {
	s.DPBound += o.DPBound
	s.ClaimsBound += o.ClaimsBound
	s.WholeCards += o.WholeCards
	s.Refused += o.Refused
	s.RefusedClaims += o.RefusedClaims
	s.QueuesChecked += o.QueuesChecked
	s.CardBooks += o.CardBooks
	s.IdleOnlyBound += o.IdleOnlyBound
	s.RefusedAtPrepare += o.RefusedAtPrepare
	s.Finished += o.Finished
	s.Deleted += o.Deleted
	s.Evicted += o.Evicted
}

const draSoakCardMiB = 40960

// draSoakJob is one gang: its pods, and for a job of claims each pod's claim (same name).
type draSoakJob struct {
	pg    *schedulingv1.PodGroup
	pods  []string
	claim bool
}

type draSoakWorld struct {
	r      *rand.Rand
	nodes  []*corev1.Node
	slices []*resourceapi.ResourceSlice
	dra    map[string]bool
	queues []*schedulingv1.Queue
	jobs   map[string]*draSoakJob
	pods   map[string]*corev1.Pod
	claims map[string]*resourceapi.ResourceClaim
	// evicting are the pods the session evicted (the plugin's claim reclaimer): they hold
	// their cards until perturb lets them go, and no queue is charged for them.
	evicting map[string]bool
	// vgpuFirst: the chart's layout, vgpu in the first tier and so opened before
	// proportion, where the claim reclaimer may evict at vgpu's open; otherwise vgpu in
	// the last tier (confs written before it chose victims), where it must not.
	vgpuFirst bool
	// sessions counts the sessions run; allocatedIn is the session that allocated each
	// claim.
	sessions    int
	allocatedIn map[string]int
	// unprepared are the allocated claims the node agent refuses at prepare, their
	// card over-committed by the allocator: their pods wait in ContainerCreating, the
	// agent retrying them each session until the card has room.
	unprepared map[string]bool
	// trace is what each session placed and evicted, in order, for comparing runs.
	trace []string
	next  int
	stats draSoakStats
}

func newDRASoakWorld(seed int64) *draSoakWorld {
	r := rand.New(rand.NewSource(seed))
	testSched = NewScheduler() // one scheduler for all the seed's sessions, as vc-scheduler has
	w := &draSoakWorld{r: r, dra: map[string]bool{}, jobs: map[string]*draSoakJob{}, pods: map[string]*corev1.Pod{}, evicting: map[string]bool{},
		claims: map[string]*resourceapi.ResourceClaim{}, allocatedIn: map[string]int{}, unprepared: map[string]bool{},
		vgpuFirst: seed%2 == 0} // not drawn from r, so that the seeds' worlds stay as they were
	for i, n := 0, 1+r.Intn(2); i < n; i++ {
		w.nodes = append(w.nodes, gpuNode(fmt.Sprintf("dp-%d", i), 2+r.Intn(2), "NVIDIA A100", draSoakCardMiB))
	}
	for i, n := 0, 1+r.Intn(2); i < n; i++ {
		node, slice := sharedCardsNode(fmt.Sprintf("dra-%d", i), 2+r.Intn(2))
		w.nodes, w.slices, w.dra[node.Name] = append(w.nodes, node), append(w.slices, slice), true
	}
	for i, n := 0, 2+r.Intn(2); i < n; i++ {
		w.queues = append(w.queues, util.BuildQueue(fmt.Sprintf("q%d", i), int32(1+r.Intn(3)), nil))
	}
	for i, n := 0, 4+r.Intn(4); i < n; i++ {
		w.addJob()
	}
	return w
}

// sharedCardsNode is a DRA node whose slice publishes its cards as the agent does:
// several claims per card, each consuming memory (256 MiB to all, in MiB) and cores
// (0 to 100), a claim that names neither taking the whole card.
func sharedCardsNode(name string, cards int) (*corev1.Node, *resourceapi.ResourceSlice) {
	n, s := draNode(name, cards)
	total := resource.MustParse(fmt.Sprintf("%dMi", draSoakCardMiB))
	for i := range s.Spec.Devices {
		s.Spec.Devices[i].AllowMultipleAllocations = ptr.To(true)
		s.Spec.Devices[i].Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			dracost.CapacityMemory: {Value: total, RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: ptr.To(total.DeepCopy()),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("256Mi")), Max: ptr.To(total.DeepCopy()),
					Step: ptr.To(resource.MustParse("1Mi"))}}},
			dracost.CapacityCores: {Value: resource.MustParse("100"), RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default: ptr.To(resource.MustParse("100")), ValidRange: &resourceapi.CapacityRequestPolicyRange{
					Min: ptr.To(resource.MustParse("0")), Max: ptr.To(resource.MustParse("100")), Step: ptr.To(resource.MustParse("1"))}}},
		}
	}
	return n, s
}

// addJob submits a gang of 1 to 3 members: device-plugin pods or pods with claims
// (a share of a card, or whole cards), now and then a gang too large for its kind.
func (w *draSoakWorld) addJob() {
	r := w.r
	w.next++
	name := fmt.Sprintf("j%03d", w.next)
	members := 1 + r.Intn(3)
	pg := util.BuildPodGroup(name, "ns", w.queues[r.Intn(len(w.queues))].Name, int32(1+r.Intn(members)), nil,
		schedulingv1.PodGroupPending)
	pg.Spec.MinResources = &corev1.ResourceList{}
	job := &draSoakJob{pg: pg, claim: r.Intn(2) == 0}
	for m := 0; m < members; m++ {
		pod := fmt.Sprintf("%s-%d", name, m)
		if job.claim {
			var c *resourceapi.ResourceClaim
			switch k := r.Intn(8); {
			case k == 0:
				c = claimAsking(pod, int64(2+r.Intn(3)), "", "") // whole cards, now and then more than any node has
			case k < 3:
				c = claimAsking(pod, 1, "", "")
			default:
				c = claimAsking(pod, 1, fmt.Sprintf("%dMi", 1024*(1+r.Intn(24))), fmt.Sprint(5*r.Intn(11)))
			}
			w.claims[pod] = c
			w.pods[pod] = claimPod(pod, name, "", pod)
		} else {
			var ann map[string]string
			if w.next%3 == 0 {
				// Every third device-plugin gang asks for idle cards only (not drawn from r,
				// so that the seeds' other choices stay as they were).
				ann = idleOnly
			}
			w.pods[pod] = vgpuPod(pod, name, int64(1+r.Intn(2)), int64(2048*(1+r.Intn(20))), int64(10*(1+r.Intn(10))), ann)
		}
		job.pods = append(job.pods, pod)
	}
	w.jobs[name] = job
}

// scene is the API server's objects for one session.
func (w *draSoakWorld) scene() *uthelper.TestCommonStruct {
	tc := &uthelper.TestCommonStruct{ResourceSlices: w.slices, DeviceClasses: []*resourceapi.DeviceClass{deviceClass(dracost.Driver)}}
	for _, n := range w.nodes {
		tc.Nodes = append(tc.Nodes, n.DeepCopy())
	}
	for _, q := range w.queues {
		tc.Queues = append(tc.Queues, q.DeepCopy())
	}
	for _, name := range sortedKeys(w.jobs) {
		j := w.jobs[name]
		tc.PodGroups = append(tc.PodGroups, j.pg.DeepCopy())
		for _, pod := range j.pods {
			tc.Pods = append(tc.Pods, w.pods[pod].DeepCopy())
			if c, ok := w.claims[pod]; ok {
				tc.ResourceClaims = append(tc.ResourceClaims, c.DeepCopy())
			}
		}
	}
	return tc
}

// session runs enqueue and allocate, reads back what was bound (a claim's allocation
// as the predicates plugin's PreBind wrote it), and checks the invariants.
func (w *draSoakWorld) session(t *testing.T) string {
	w.sessions++
	tc := w.scene()
	var p *vgpuPlugin
	tc.Plugins = evictBuilders(&p)
	tiers := draEvictTiers(true)
	if !w.vgpuFirst {
		i := slices.IndexFunc(tiers[0].Plugins, func(o conf.PluginOption) bool { return o.Name == PluginName })
		tiers[1].Plugins = append(tiers[1].Plugins, tiers[0].Plugins[i])
		tiers[0].Plugins = slices.Delete(tiers[0].Plugins, i, i+1)
	}
	soak := &draSoakPlugin{claims: tc.ResourceClaims, slices: len(tc.ResourceSlices)}
	tc.Plugins[draSoakPluginName] = func(framework.Arguments) framework.Plugin { return soak }
	tiers[0].Plugins = append([]conf.PluginOption{{Name: draSoakPluginName, EnabledNodeOrder: ptr.To(true)}}, tiers[0].Plugins...)
	ssn := tc.RegisterSession(tiers, nil)
	defer tc.Close()
	if soak.err != nil {
		return soak.err.Error()
	}
	if msg := w.checkCardBook(p); msg != "" {
		return msg
	}
	tc.Run([]framework.Action{enqueue.New(), allocate.New()})
	if msg := w.readBack(ssn); msg != "" {
		return msg
	}
	if msg := w.check(p); msg != "" {
		return msg
	}
	return ""
}

// readBack records the session's placements in the world: a device-plugin pod bound
// with the assignment the plugin wrote, a pod of claims bound once its claim's
// allocation is written.
func (w *draSoakWorld) readBack(ssn *framework.Session) string {
	var placed []string
	defer func() {
		sort.Strings(placed)
		w.trace = append(w.trace, fmt.Sprintf("session %d: %s", w.sessions, strings.Join(placed, ", ")))
	}()
	for _, job := range ssn.Jobs {
		wj, ok := w.jobs[job.PodGroup.Name]
		if !ok {
			continue
		}
		if job.JobFitErrors != "" && strings.HasPrefix(job.JobFitErrors, PluginName+": ") && string(job.PodGroup.Status.Phase) == string(schedulingv1.PodGroupPending) {
			w.stats.Refused++
			if wj.claim {
				w.stats.RefusedClaims++
			}
		}
		if string(job.PodGroup.Status.Phase) == string(schedulingv1.PodGroupInqueue) && wj.pg.Status.Phase == schedulingv1.PodGroupPending {
			wj.pg.Status.Phase = schedulingv1.PodGroupInqueue
		}
		for _, task := range job.Tasks {
			pod := w.pods[task.Name]
			if pod != nil && pod.Spec.NodeName != "" && task.Status == vapi.Releasing && !w.evicting[task.Name] {
				if !w.vgpuFirst {
					return fmt.Sprintf("pod %s was evicted at vgpu's open although proportion opened first", task.Name)
				}
				w.evicting[task.Name] = true
				w.stats.Evicted++
				placed = append(placed, "evicted "+task.Name)
				continue
			}
			if pod == nil || pod.Spec.NodeName != "" || task.NodeName == "" || task.Status == vapi.Pending {
				continue
			}
			if task.Status == vapi.Pipelined {
				return fmt.Sprintf("task %s was pipelined onto %s with nothing being released", task.Name, task.NodeName)
			}
			if _, ok := w.claims[task.Name]; ok {
				c, err := allocatedClaimFrom(ssn, task.Name)
				if err != nil {
					return fmt.Sprintf("pod %s placed on %s: %v", task.Name, task.NodeName, err)
				}
				w.claims[task.Name] = c
				w.allocatedIn[task.Name] = w.sessions
				var on []string
				for _, r := range c.Status.Allocation.Devices.Results {
					on = append(on, r.Device)
				}
				placed = append(placed, fmt.Sprintf("%s on %s %v", task.Name, task.NodeName, on))
				w.stats.ClaimsBound++
				if c.Spec.Devices.Requests[0].Exactly.Capacity == nil {
					w.stats.WholeCards++
				}
			} else {
				pod.Annotations = task.Pod.DeepCopy().Annotations
				w.stats.DPBound++
				placed = append(placed, fmt.Sprintf("%s on %s %s", task.Name, task.NodeName, pod.Annotations[api.AnnotationAssignment]))
			}
			pod.Spec.NodeName, pod.Status.Phase = task.NodeName, corev1.PodRunning
			wj.pg.Status.Phase = schedulingv1.PodGroupRunning
		}
	}
	return ""
}

// draSoakPlugin is the soak's own plugin, opened first, so that a seed gives the same
// placements run after run (TestMixedDRASoakIsReproducible):
//   - It waits until the session's DRA manager lists the scene's claims, as allocated
//     as the scene has them, and its slices. The test cache's informers have synced
//     when the session opens, but the claim and slice trackers fill from their events
//     on goroutines of their own, and at times had not yet seen a claim: the card book
//     then missed it, or the allocator gave its card away again.
//   - Volcano picks at random among the nodes of the best score (its global random
//     source, which a test cannot seed), so it adds to each node's score a millionth
//     per place of the node's name in the sorted names, below any difference the
//     other plugins' scores make.
type draSoakPlugin struct {
	claims []*resourceapi.ResourceClaim
	slices int
	err    error
}

const draSoakPluginName = "drasoak"

func (*draSoakPlugin) Name() string { return draSoakPluginName }

func (d *draSoakPlugin) OnSessionOpen(ssn *framework.Session) {
	d.err = waitForDRAManager(ssn, d.claims, d.slices)
	names := sortedKeys(ssn.Nodes)
	ssn.AddNodeOrderFn(draSoakPluginName, func(_ *vapi.TaskInfo, n *vapi.NodeInfo) (float64, error) {
		i, _ := slices.BinarySearch(names, n.Name)
		return float64(i+1) * 1e-6, nil
	})
}

func (*draSoakPlugin) OnSessionClose(*framework.Session) {}

// waitForDRAManager waits up to 10 s for the session's DRA manager to list every one
// of claims, allocated where it is, and n slices.
func waitForDRAManager(ssn *framework.Session, claims []*resourceapi.ResourceClaim, n int) error {
	want := map[string]bool{} // name -> allocated
	for _, c := range claims {
		want[c.Name] = c.Status.Allocation != nil
	}
	m := ssn.SharedDRAManager()
	deadline := time.Now().Add(10 * time.Second)
	for {
		listed, errC := m.ResourceClaims().List()
		sl, errS := m.ResourceSlices().ListWithDeviceTaintRules()
		seen := 0
		for _, c := range listed {
			if allocated, ok := want[c.Name]; ok && allocated == (c.Status.Allocation != nil) {
				seen++
			}
		}
		if errC == nil && errS == nil && seen == len(want) && len(sl) == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the DRA manager lists %d of the %d claims and %d of the %d slices 10 s after the session opened (%v, %v)",
				seen, len(want), len(sl), n, errC, errS)
		}
		time.Sleep(time.Millisecond)
	}
}

// allocatedClaimFrom waits for the predicates plugin's PreBind (on Volcano's binding
// goroutine) to write the claim's allocation to the API server.
func allocatedClaimFrom(ssn *framework.Session, name string) (*resourceapi.ResourceClaim, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := ssn.KubeClient().ResourceV1().ResourceClaims("ns").Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && c.Status.Allocation != nil && len(c.Status.ReservedFor) > 0 {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("claim %s not allocated and reserved 10 s after the session (%v)", name, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkCardBook compares, at session open, what the card book holds on each DRA
// node's card with what the allocated claims hold there: each claim booked once.
func (w *draSoakWorld) checkCardBook(p *vgpuPlugin) string {
	type usage struct{ mib, cores int64 }
	want, got := map[string]usage{}, map[string]usage{}
	for _, name := range sortedKeys(w.claims) {
		shares, _ := dracost.Held(w.claims[name], p.ledger.DRACards)
		for _, s := range shares {
			u := want[s.UUID]
			want[s.UUID] = usage{u.mib + s.MemoryMiB, u.cores + int64(s.Cores)}
		}
	}
	p.ledger.EachCard(func(node string, c *placement.CardState) {
		if w.dra[node] && (c.Used.MemoryMiB != 0 || c.Used.Cores != 0) {
			got[c.UUID] = usage{c.Used.MemoryMiB, int64(c.Used.Cores)}
		}
	})
	if !maps.Equal(got, want) {
		return fmt.Sprintf("the card book holds %v on the DRA cards, the allocated claims %v", got, want)
	}
	if skipped := p.ledger.ClaimsSkipped(); len(skipped) > 0 {
		return fmt.Sprintf("the card book skipped claim results %v", skipped)
	}
	w.stats.CardBooks += len(want)
	return ""
}

// check verifies the invariants on the world, and the plugin's queue ledger against it.
func (w *draSoakWorld) check(p *vgpuPlugin) string {
	capacity := map[draSoakCard]int64{}
	inventory := map[string][]api.Card{}
	for _, n := range w.nodes {
		inv, err := api.DecodeInventory(n.Annotations[api.AnnotationInventory])
		if err != nil {
			return err.Error()
		}
		inventory[n.Name] = inv.Cards
		for _, c := range inv.Cards {
			capacity[draSoakCard{n.Name, c.UUID}] = c.MemoryMiB
		}
	}
	usedMiB, usedCores := map[draSoakCard]int64{}, map[draSoakCard]int64{}
	held := map[string][]dracost.Share{} // each bound pod's claim, by pod
	perQueue := map[string]fairshare.Amount{}
	queueOf := func(pod string) string {
		return w.jobs[w.pods[pod].Annotations[schedulingv1.KubeGroupNameAnnotationKey]].pg.Spec.Queue
	}
	for _, name := range sortedKeys(w.pods) {
		pod := w.pods[name]
		if pod.Spec.NodeName == "" {
			continue
		}
		if c, ok := w.claims[name]; ok {
			if !w.dra[pod.Spec.NodeName] {
				return fmt.Sprintf("pod %s of a claim is on device-plugin node %s", name, pod.Spec.NodeName)
			}
			if n := len(c.Status.ReservedFor); n != 1 || c.Status.ReservedFor[0].Name != name {
				return fmt.Sprintf("claim %s is reserved for %v, want its pod only", name, c.Status.ReservedFor)
			}
			shares, skips := dracost.Held(c, func(node string) ([]api.Card, bool) {
				cards, ok := inventory[node]
				return cards, ok && w.dra[node]
			})
			if len(skips) > 0 {
				return fmt.Sprintf("claim %s holds results the card book refuses: %v", name, skips[0].Err)
			}
			for _, s := range shares {
				if s.Node != pod.Spec.NodeName {
					return fmt.Sprintf("claim %s holds card %s on %s, its pod is on %s", name, s.UUID, s.Node, pod.Spec.NodeName)
				}
			}
			held[name] = shares
			if !w.evicting[name] {
				perQueue[queueOf(name)] = perQueue[queueOf(name)].Add(dracost.Sum(shares))
			}
			continue
		}
		if w.dra[pod.Spec.NodeName] {
			return fmt.Sprintf("device-plugin pod %s is on DRA node %s", name, pod.Spec.NodeName)
		}
		a, err := api.DecodeAssignment(pod.Annotations[api.AnnotationAssignment])
		if err != nil || a.Node != pod.Spec.NodeName {
			return fmt.Sprintf("device-plugin pod %s bound to %s carries assignment %+v (%v)", name, pod.Spec.NodeName, a, err)
		}
		if !w.evicting[name] {
			// An idle-only pod is charged each of its cards whole, as the scheduler charges it.
			cards := fairshare.Cards{CapacityMiB: func(uuid string) (int64, bool) {
				mib, ok := capacity[draSoakCard{a.Node, uuid}]
				return mib, ok
			}}
			idle := api.HoldsIdleOnly(pod.Annotations)
			perQueue[queueOf(name)] = perQueue[queueOf(name)].Add(cards.Assigned(a.Containers, idle))
			if idle {
				w.stats.IdleOnlyBound++
			}
		}
		for _, ctr := range a.Containers {
			for _, card := range ctr.Cards {
				k := draSoakCard{a.Node, card.UUID}
				usedMiB[k] += card.MemoryMiB
				usedCores[k] += int64(card.Cores)
			}
		}
	}
	if msg := w.prepare(held, capacity, usedMiB, usedCores); msg != "" {
		return msg
	}
	for k, mib := range usedMiB {
		if mib > capacity[k] || usedCores[k] > 100 {
			return fmt.Sprintf("card %s on %s holds %d of %d MiB and %d%% cores", k.uuid, k.node, mib, capacity[k], usedCores[k])
		}
	}
	for _, q := range p.shares.Standings() {
		want := perQueue[q.Name]
		if math.Abs(q.Allocated.MemoryMiB-want.MemoryMiB) > 1e-6 || math.Abs(q.Allocated.Cores-want.Cores) > 1e-6 {
			return fmt.Sprintf("queue %s's ledger holds %v, its pods' assignments and allocated claims %v", q.Name, q.Allocated, want)
		}
		if want != (fairshare.Amount{}) {
			w.stats.QueuesChecked++
		}
		delete(perQueue, q.Name)
	}
	for q, a := range perQueue {
		if a != (fairshare.Amount{}) {
			return fmt.Sprintf("queue %s holds %v and is not in the ledger", q, a)
		}
	}
	return ""
}

// draSoakCard is a card of a node.
type draSoakCard struct{ node, uuid string }

// prepare is the node agent preparing the bound pods' claims (their shares in held),
// adding to usedMiB and usedCores what the prepared ones hold: the claims prepared in
// earlier sessions keep their cards, then the others, by name, are prepared where they
// fit beside them and refused otherwise (their pods wait, and are tried again next
// session), as the agent refuses a claim that over-commits its card. Kubernetes 1.34.2's
// allocator over-commits a card only among the claims it allocates in one session:
// a claim refused on a card that holds no other claim allocated in its session is an
// over-commit against what earlier sessions left, which the allocator reads exactly,
// and fails the soak (the world, or the card book, lost a claim).
func (w *draSoakWorld) prepare(held map[string][]dracost.Share, capacity map[draSoakCard]int64, usedMiB, usedCores map[draSoakCard]int64) string {
	names := sortedKeys(held)
	earlier := func(name string) bool { return w.allocatedIn[name] < w.sessions && !w.unprepared[name] }
	names = append(slices.DeleteFunc(slices.Clone(names), func(n string) bool { return !earlier(n) }),
		slices.DeleteFunc(names, earlier)...)
	newOn := map[draSoakCard]int{} // claims allocated this session, per card
	for _, name := range names {
		if w.allocatedIn[name] == w.sessions {
			for _, s := range held[name] {
				newOn[draSoakCard{s.Node, s.UUID}]++
			}
		}
	}
	for _, name := range names {
		fits := true
		for _, s := range held[name] {
			k := draSoakCard{s.Node, s.UUID}
			fits = fits && usedMiB[k]+s.MemoryMiB <= capacity[k] && usedCores[k]+int64(s.Cores) <= 100
		}
		if !fits {
			if earlier(name) {
				return fmt.Sprintf("claim %s, prepared in session %d, no longer fits its cards", name, w.allocatedIn[name])
			}
			if w.allocatedIn[name] == w.sessions && !w.unprepared[name] {
				for _, s := range held[name] {
					if newOn[draSoakCard{s.Node, s.UUID}] < 2 {
						return fmt.Sprintf("claim %s allocated in session %d over-commits card %s on %s with what earlier sessions left there",
							name, w.sessions, s.UUID, s.Node)
					}
				}
				w.stats.RefusedAtPrepare++
			}
			w.unprepared[name] = true
			continue
		}
		delete(w.unprepared, name)
		for _, s := range held[name] {
			k := draSoakCard{s.Node, s.UUID}
			usedMiB[k] += s.MemoryMiB
			usedCores[k] += int64(s.Cores)
		}
	}
	return ""
}

// perturb changes the world between sessions: bound pods finish (their claims go with
// them), pending jobs are deleted, new jobs arrive.
func (w *draSoakWorld) perturb() {
	r := w.r
	// The evicted pods finish terminating: they and their claims are gone.
	for _, name := range sortedKeys(w.evicting) {
		for _, j := range w.jobs {
			j.pods = slices.DeleteFunc(j.pods, func(p string) bool { return p == name })
		}
		w.forget(name)
		delete(w.evicting, name)
	}
	for _, name := range sortedKeys(w.jobs) {
		j := w.jobs[name]
		if j.pg.Status.Phase != schedulingv1.PodGroupRunning && r.Intn(8) == 0 {
			w.deleteJob(name)
			w.stats.Deleted++
			continue
		}
		var left []string
		for _, pod := range j.pods {
			if w.pods[pod].Spec.NodeName != "" && r.Intn(4) == 0 {
				w.forget(pod)
				w.stats.Finished++
				continue
			}
			left = append(left, pod)
		}
		j.pods = left
		if len(left) == 0 {
			delete(w.jobs, name)
		}
	}
	for i, n := 0, 1+r.Intn(3); i < n; i++ {
		w.addJob()
	}
}

func (w *draSoakWorld) deleteJob(name string) {
	for _, pod := range w.jobs[name].pods {
		w.forget(pod)
	}
	delete(w.jobs, name)
}

// forget removes a pod that is gone, and its claim.
func (w *draSoakWorld) forget(pod string) {
	delete(w.pods, pod)
	delete(w.claims, pod)
	delete(w.allocatedIn, pod)
	delete(w.unprepared, pod)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestDRASoakAgentRefusesOverCommit: the soak's model of the node agent at prepare. Two
// claims of one session that over-commit a card: the later by name is refused (its pod
// waits) and prepared once the card has room; a claim that over-commits a card with
// what earlier sessions left there fails the soak; a prepared claim keeps its card.
func TestDRASoakAgentRefusesOverCommit(t *testing.T) {
	card := draSoakCard{"dra-0", "GPU-dra-0-0"}
	capacity := map[draSoakCard]int64{card: draSoakCardMiB}
	share := func(mib int64, cores int) []dracost.Share {
		return []dracost.Share{{Node: card.node, UUID: card.uuid, MemoryMiB: mib, Cores: cores}}
	}
	run := func(w *draSoakWorld, held map[string][]dracost.Share) (string, map[draSoakCard]int64) {
		used, cores := map[draSoakCard]int64{}, map[draSoakCard]int64{}
		msg := w.prepare(held, capacity, used, cores)
		return msg, used
	}
	w := &draSoakWorld{sessions: 1, allocatedIn: map[string]int{"a": 1, "b": 1}, unprepared: map[string]bool{}}
	held := map[string][]dracost.Share{"a": share(draSoakCardMiB, 100), "b": share(13312, 45)}
	if msg, used := run(w, held); msg != "" || used[card] != draSoakCardMiB || !w.unprepared["b"] || w.stats.RefusedAtPrepare != 1 {
		t.Fatalf("session 1: %q, %d MiB used, unprepared %v, %d refused; want b refused beside a", msg, used[card], w.unprepared,
			w.stats.RefusedAtPrepare)
	}
	w.sessions = 2 // b still waits beside a, and is not counted again
	if msg, _ := run(w, held); msg != "" || !w.unprepared["b"] || w.stats.RefusedAtPrepare != 1 {
		t.Fatalf("session 2: %q, unprepared %v, %d refused", msg, w.unprepared, w.stats.RefusedAtPrepare)
	}
	w.sessions = 3 // a is gone: b is prepared
	delete(held, "a")
	if msg, used := run(w, held); msg != "" || used[card] != 13312 || len(w.unprepared) != 0 {
		t.Fatalf("session 3: %q, %d MiB used, unprepared %v; want b prepared", msg, used[card], w.unprepared)
	}
	w.sessions, w.allocatedIn["c"] = 4, 4 // c alone this session, over what b holds
	held["c"] = share(draSoakCardMiB, 100)
	if msg, _ := run(w, held); !strings.Contains(msg, "claim c allocated in session 4 over-commits card") {
		t.Fatalf("session 4: %q, want the over-commit against earlier sessions reported", msg)
	}
}
