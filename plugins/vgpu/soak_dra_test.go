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
// counting both kinds, no device-plugin pod is on a DRA node and no claim on a
// device-plugin node, each claim is reserved for its own pod only and names no card
// twice, and each queue's allocated card memory and cores in the plugin's ledger equal
// what its pods' assignments and allocated claims hold. A seed replays the world's
// random choices (arrivals, sizes, completions) and Volcano's own orders are not
// seeded, so a failing seed reproduces the workload, not always the same placements.

var draSoakSeed = flag.Int64("dra-soak-seed", 0, "run the mixed DRA soak with this seed only (0: its fixed seeds)")

func TestMixedDRASoak(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.DRAConsumableCapacity, true)
	seeds, sessions := []int64{1, 2, 3, 4}, 10
	if testing.Short() {
		seeds, sessions = []int64{1}, 5
	}
	if *draSoakSeed != 0 {
		seeds = []int64{*draSoakSeed}
	}
	var total draSoakStats
	for _, seed := range seeds {
		w := newDRASoakWorld(seed)
		for s := 0; s < sessions; s++ {
			if msg := w.session(t); msg != "" {
				t.Fatalf("seed %d (rerun with -dra-soak-seed=%d), session %d: %s", seed, seed, s, msg)
			}
			w.perturb()
		}
		total.add(w.stats)
	}
	t.Logf("seeds %v × %d sessions: %+v", seeds, sessions, total)
	if *draSoakSeed == 0 && (total.DPBound == 0 || total.ClaimsBound == 0 || total.WholeCards == 0 || total.RefusedClaims == 0 ||
		total.Finished == 0 || total.QueuesChecked == 0 || total.CardBooks == 0 || total.IdleOnlyBound == 0) {
		t.Errorf("the soak did not place both kinds, refuse a gang of claims, finish pods and check queues holding cards: %+v", total)
	}
}

type draSoakStats struct {
	DPBound, ClaimsBound, WholeCards, Refused, RefusedClaims, Finished, Deleted, Evicted int
	// QueuesChecked counts the queue ledgers compared while they held cards,
	// CardBooks the DRA cards whose booking was compared while claims held them.
	QueuesChecked, CardBooks int
	// IdleOnlyBound counts, over the checks, the bound idle-only pods charged whole cards.
	IdleOnlyBound int
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
	next     int
	stats    draSoakStats
}

func newDRASoakWorld(seed int64) *draSoakWorld {
	r := rand.New(rand.NewSource(seed))
	testSched = NewScheduler() // one scheduler for all the seed's sessions, as vc-scheduler has
	w := &draSoakWorld{r: r, dra: map[string]bool{}, jobs: map[string]*draSoakJob{}, pods: map[string]*corev1.Pod{}, evicting: map[string]bool{},
		claims: map[string]*resourceapi.ResourceClaim{}}
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
	tc := w.scene()
	var p *vgpuPlugin
	tc.Plugins = builders(&p)
	ssn := tc.RegisterSession(draTiers(), nil)
	defer tc.Close()
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
				w.evicting[task.Name] = true
				w.stats.Evicted++
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
				w.stats.ClaimsBound++
				if c.Spec.Devices.Requests[0].Exactly.Capacity == nil {
					w.stats.WholeCards++
				}
			} else {
				pod.Annotations = task.Pod.DeepCopy().Annotations
				w.stats.DPBound++
			}
			pod.Spec.NodeName, pod.Status.Phase = task.NodeName, corev1.PodRunning
			wj.pg.Status.Phase = schedulingv1.PodGroupRunning
		}
	}
	return ""
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
	type cardKey struct{ node, uuid string }
	capacity := map[cardKey]int64{}
	inventory := map[string][]api.Card{}
	for _, n := range w.nodes {
		inv, err := api.DecodeInventory(n.Annotations[api.AnnotationInventory])
		if err != nil {
			return err.Error()
		}
		inventory[n.Name] = inv.Cards
		for _, c := range inv.Cards {
			capacity[cardKey{n.Name, c.UUID}] = c.MemoryMiB
		}
	}
	usedMiB, usedCores := map[cardKey]int64{}, map[cardKey]int64{}
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
				k := cardKey{s.Node, s.UUID}
				usedMiB[k] += s.MemoryMiB
				usedCores[k] += int64(s.Cores)
			}
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
				mib, ok := capacity[cardKey{a.Node, uuid}]
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
				k := cardKey{a.Node, card.UUID}
				usedMiB[k] += card.MemoryMiB
				usedCores[k] += int64(card.Cores)
			}
		}
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

// perturb changes the world between sessions: bound pods finish (their claims go with
// them), pending jobs are deleted, new jobs arrive.
func (w *draSoakWorld) perturb() {
	r := w.r
	// The evicted pods finish terminating: they and their claims are gone.
	for _, name := range sortedKeys(w.evicting) {
		for _, j := range w.jobs {
			j.pods = slices.DeleteFunc(j.pods, func(p string) bool { return p == name })
		}
		delete(w.pods, name)
		delete(w.claims, name)
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
				delete(w.pods, pod)
				delete(w.claims, pod)
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
		delete(w.pods, pod)
		delete(w.claims, pod)
	}
	delete(w.jobs, name)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
