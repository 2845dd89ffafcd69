package vgpu

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
)

// The session soak: random clusters and workloads run through many sessions of the
// full action list of the shipped conf plus preempt and reclaim, with the awkward
// world around them: binds that fail (and Volcano writing the session's copy of the
// pod back without binding it), pods that finish, nodes cordoned and uncordoned,
// evicted pods that go away. After every session the API server's view is checked.
var soakSeeds = flag.Int("soak-seeds", 150, "seeds of the session soak (make fuzz runs more)")

const soakActions = "enqueue, allocate, backfill, preempt, reclaim"

func TestSessionSoak(t *testing.T) {
	text := exampleConf(t, "", "")
	if !strings.Contains(text, `actions: "`+soakActions+`"`) {
		t.Fatalf("the example conf no longer runs %q; the soak runs the shipped actions", soakActions)
	}
	actions, tiers, cfg, _, err := scheduler.UnmarshalSchedulerConf(text)
	if err != nil {
		t.Fatal(err)
	}
	builders := confPlugins(t, tiers)
	var total soakStats
	for seed := 1; seed <= *soakSeeds; seed++ {
		w := newSoakWorld(t, int64(seed), &total, false)
		for s := 0; s < 6; s++ {
			w.session(builders, actions, tiers, cfg)
			if msg := w.check(); msg != "" {
				t.Fatalf("seed %d, session %d: %s", seed, s, msg)
			}
			w.perturb()
		}
		w.close()
	}
	t.Logf("%d seeds × 6 sessions: %+v", *soakSeeds, total)
	// The soak must reach the awkward paths it exists for.
	if *soakSeeds >= 50 && (total.FailedBinds == 0 || total.StaleWrites == 0 || total.Evicted == 0 || total.Bound == 0) {
		t.Errorf("the soak did not exercise every path: %+v", total)
	}
}

// The session soak again with cards in MIG mode on half the nodes and MIG profiles
// on a third of the vGPU jobs: besides the soak's own invariants, no MIG device is
// ever held by two bound pods, each is on the card whose layout lists it, and no
// pod shares a card in MIG mode.
func TestSessionSoakWithMIG(t *testing.T) {
	actions, tiers, cfg, _, err := scheduler.UnmarshalSchedulerConf(exampleConf(t, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	builders := confPlugins(t, tiers)
	var total soakStats
	seeds := max(1, *soakSeeds/3)
	for seed := 1; seed <= seeds; seed++ {
		w := newSoakWorld(t, int64(seed), &total, true)
		for s := 0; s < 6; s++ {
			w.session(builders, actions, tiers, cfg)
			if msg := w.check(); msg != "" {
				t.Fatalf("seed %d, session %d: %s", seed, s, msg)
			}
			w.perturb()
		}
		w.close()
	}
	t.Logf("%d seeds × 6 sessions: %+v", seeds, total)
	if seeds >= 20 && (total.MIGHeld == 0 || total.Bound == 0) {
		t.Errorf("the soak placed no MIG instance: %+v", total)
	}
}

type soakStats struct {
	Bound, FailedBinds, StaleWrites, Evicted, Finished, Cordons int
	// MIGHeld counts, over the checks, the MIG instances bound pods held.
	MIGHeld int
	// ShedForQueue counts evictions accepted as preempt shedding a full queue's
	// lower-priority pods before it moved on to another node (uselessEviction).
	ShedForQueue int
}

// soakBinder binds like the API server's binding subresource, except that it fails
// some binds at random.
type soakBinder struct {
	mu     sync.Mutex
	r      *rand.Rand
	bound  []*corev1.Pod
	failed []*corev1.Pod
}

func (b *soakBinder) Bind(_ kubernetes.Interface, tasks []*vapi.TaskInfo) map[vapi.TaskID]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	errs := map[vapi.TaskID]string{}
	for _, t := range tasks {
		p := t.Pod.DeepCopy()
		if b.r.Intn(8) == 0 {
			errs[t.UID] = "injected bind failure"
			b.failed = append(b.failed, p)
			continue
		}
		p.Spec.NodeName = t.NodeName
		p.Status.Phase = corev1.PodRunning
		b.bound = append(b.bound, p)
	}
	return errs
}

func (b *soakBinder) take() (bound, failed []*corev1.Pod) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bound, failed, b.bound, b.failed = b.bound, b.failed, nil, nil
	return bound, failed
}

type soakJob struct {
	name, queue string
	min         int
	pods        []string
}

type soakWorld struct {
	t       *testing.T
	r       *rand.Rand
	sc      *cache.SchedulerCache
	binder  *soakBinder
	evictor *util.FakeEvictor
	stop    chan struct{}
	nodes   map[string]*corev1.Node
	jobs    []*soakJob
	evicted int
	// partial names a gang the last session dispatched below its minimum.
	partial string
	// preemptors are the tasks the last session pipelined, by node; useless
	// describes an eviction of that session that freed nothing they use.
	preemptors preemptors
	useless    string
	stats      *soakStats
	// mig, when set, puts cards in MIG mode on some nodes and MIG profiles on some
	// jobs (its own source, so that a seed's other choices stay what they were).
	mig *rand.Rand
	// beforeClose, when set, sees each session after its actions (the job
	// controller of the burst soak reads which PodGroups were enqueued).
	beforeClose func(*framework.Session)
}

func newSoakWorld(t *testing.T, seed int64, stats *soakStats, mig bool) *soakWorld {
	r := rand.New(rand.NewSource(seed))
	testSched = NewScheduler()
	w := &soakWorld{t: t, r: r, binder: &soakBinder{r: rand.New(rand.NewSource(seed * 7))},
		evictor: util.NewFakeEvictor(10000), stop: make(chan struct{}), nodes: map[string]*corev1.Node{}, stats: stats}
	if mig {
		w.mig = rand.New(rand.NewSource(seed * 13))
	}
	w.sc = cache.NewCustomMockSchedulerCache("volcano", w.binder, w.evictor, &util.FakeStatusUpdater{}, nil, &record.FakeRecorder{})
	for i, n := 0, 2+r.Intn(4); i < n; i++ {
		model, mem := "NVIDIA A100", int64(40960)
		if r.Intn(3) == 0 {
			model, mem = "NVIDIA A30", 24576
		}
		node := gpuNode(fmt.Sprintf("n%d", i), 2+r.Intn(4), model, mem)
		if w.mig != nil && w.mig.Intn(2) == 0 {
			soakMIGNode(node)
		}
		w.nodes[node.Name] = node
		// The cache re-reads a node from the API server when it changes.
		if _, err := w.sc.Client().CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		w.sc.AddOrUpdateNode(node)
	}
	w.sc.AddPriorityClass(&schedv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000})
	w.sc.AddPriorityClass(&schedv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "low"}, Value: 10})
	queues := []string{"qa", "qb", "qc"}[:2+r.Intn(2)]
	for _, q := range queues {
		var capability corev1.ResourceList
		if r.Intn(4) == 0 {
			capability = corev1.ResourceList{api.ResourceCores: *resource.NewQuantity(int64(100+r.Intn(300)), resource.DecimalSI)}
		}
		w.sc.AddQueueV1beta1(util.BuildQueue(q, int32(1+r.Intn(3)), capability))
	}
	for j, n := 0, 5+r.Intn(10); j < n; j++ {
		w.addJob(fmt.Sprintf("j%02d", j), queues[r.Intn(len(queues))])
	}
	w.sc.Run(w.stop)
	return w
}

// soakMIGProfiles are the profiles of soakMIGNode's layout.
var soakMIGProfiles = []string{"3g.20gb", "1g.5gb"}

// soakMIGNode puts the node's card 0 in MIG mode as a 3g.20gb and two 1g.5gb.
func soakMIGNode(n *corev1.Node) {
	inv, err := api.DecodeInventory(n.Annotations[api.AnnotationInventory])
	if err != nil {
		panic(err)
	}
	inv.Cards[0].MIG = true
	s, err := api.EncodeInventory(inv)
	if err != nil {
		panic(err)
	}
	uuid := inv.Cards[0].UUID
	ms, err := api.EncodeMIGInstances(&api.NodeMIGInstances{Cards: map[string][]api.MIGInstance{uuid: {
		{UUID: "MIG-" + n.Name + "-0", Profile: "3g.20gb", GI: 1, Start: 0, Size: 4, MemoryMiB: 19968},
		{UUID: "MIG-" + n.Name + "-1", Profile: "1g.5gb", GI: 2, Start: 4, Size: 1, MemoryMiB: 4864},
		{UUID: "MIG-" + n.Name + "-2", Profile: "1g.5gb", GI: 3, Start: 5, Size: 1, MemoryMiB: 4864},
	}}})
	if err != nil {
		panic(err)
	}
	n.Annotations[api.AnnotationInventory] = s
	n.Annotations[api.AnnotationMIGInstances] = ms
}

// addJob submits a gang of 1..4 members: vGPU mostly, a CPU-only job now and then.
func (w *soakWorld) addJob(name, queue string) {
	r := w.r
	replicas := 1 + r.Intn(4)
	job := &soakJob{name: name, queue: queue, min: 1 + r.Intn(replicas)}
	pg := util.BuildPodGroup(name, "ns", queue, int32(job.min), nil, schedulingv1.PodGroupPending)
	pg.Spec.PriorityClassName = []string{"high", "low", "low"}[r.Intn(3)]
	w.sc.AddPodGroupV1beta1(pg)
	cpuOnly := r.Intn(6) == 0
	cards := int64(1 + r.Intn(4)/3)
	mem := []int64{4096, 8192, 16384, 24576}[r.Intn(4)]
	cores := []int64{10, 25, 50, 100}[r.Intn(4)]
	var ann map[string]string
	if r.Intn(5) == 0 {
		ann = map[string]string{api.AnnotationGPUTypeInclude: "A30"}
	}
	profile := ""
	if w.mig != nil && !cpuOnly && w.mig.Intn(3) == 0 {
		profile = soakMIGProfiles[w.mig.Intn(len(soakMIGProfiles))]
	}
	for i := 0; i < replicas; i++ {
		var p *corev1.Pod
		switch {
		case cpuOnly:
			p = cpuPod(fmt.Sprintf("%s-%d", name, i), name)
		case profile != "":
			p = migPod(fmt.Sprintf("%s-%d", name, i), name, profile, cards)
		default:
			p = vgpuPod(fmt.Sprintf("%s-%d", name, i), name, cards, mem, cores, ann)
		}
		prio := int32(10)
		if pg.Spec.PriorityClassName == "high" {
			prio = 1000
		}
		p.Spec.Priority = &prio
		p.Spec.PriorityClassName = pg.Spec.PriorityClassName
		job.pods = append(job.pods, p.Name)
		w.sc.AddPod(p)
		if _, err := w.sc.Client().CoreV1().Pods("ns").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			w.t.Fatal(err)
		}
	}
	w.jobs = append(w.jobs, job)
}

func (w *soakWorld) close() {
	close(w.stop)
	testSched.Close()
}

// queueOf returns the queue of a pod's job.
func (w *soakWorld) queueOf(pod string) string {
	for _, j := range w.jobs {
		if slices.Contains(j.pods, pod) {
			return j.queue
		}
	}
	return ""
}

func (w *soakWorld) apiPod(name string) *corev1.Pod {
	p, err := w.sc.Client().CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return p
}

// store writes a pod to the API server and tells the scheduler's cache, as an
// informer would.
func (w *soakWorld) store(p *corev1.Pod) {
	old := w.apiPod(p.Name)
	if old == nil {
		return
	}
	p.ResourceVersion = ""
	if _, err := w.sc.Client().CoreV1().Pods("ns").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	w.sc.UpdatePod(old, p)
}

func (w *soakWorld) remove(name string) {
	p := w.apiPod(name)
	if p == nil {
		return
	}
	_ = w.sc.Client().CoreV1().Pods("ns").Delete(context.Background(), name, metav1.DeleteOptions{})
	w.sc.DeletePod(p)
}

func (w *soakWorld) session(builders map[string]framework.PluginBuilder, actions []framework.Action, tiers []conf.Tier, cfg []conf.Configuration) {
	framework.CleanupPluginBuilders()
	var vp *vgpuPlugin
	for n, b := range builders {
		if n == "deviceshare" && raceDetector {
			// Volcano's deviceshare writes its package-level switches (VGPUEnable, ...) in
			// every session's New while the cache's workers read them: a race in Volcano,
			// not in the vgpu plugin. Under the race detector the soak runs without it.
			continue
		}
		if n == PluginName {
			inner := b
			b = func(a framework.Arguments) framework.Plugin {
				p := inner(a)
				vp, _ = p.(*vgpuPlugin)
				return p
			}
		}
		framework.RegisterPluginBuilder(n, b)
	}
	ssn := framework.OpenSession(w.sc, tiers, cfg)
	enableActions(actions)
	for _, a := range actions {
		a.Initialize()
		a.Execute(ssn)
		a.UnInitialize()
	}
	dispatched, releasing := 0, 0
	w.partial = ""
	for _, job := range ssn.Jobs {
		// Evicted pods go away after every session, so the releasing ones were
		// evicted in this one.
		releasing += len(job.TaskStatusIndex[vapi.Releasing])
		n := len(job.TaskStatusIndex[vapi.Binding])
		dispatched += n
		// Volcano's own rule: a gang may bind its allocated members while the rest
		// are pipelined onto resources being released (preempt, reclaim).
		held := n + len(job.TaskStatusIndex[vapi.Bound]) + len(job.TaskStatusIndex[vapi.Running]) +
			len(job.TaskStatusIndex[vapi.Pipelined])
		if n > 0 && held < int(job.MinAvailable) {
			st := map[vapi.TaskStatus]int{}
			for _, tk := range job.Tasks {
				st[tk.Status]++
			}
			w.partial = fmt.Sprintf("gang %s dispatched with %d members holding, minimum %d (tasks %v, %d pods)", job.Name, held,
				job.MinAvailable, st, len(job.Tasks))
		}
	}
	w.preemptors = w.pipelinedOnto(ssn, vp)
	if w.beforeClose != nil {
		w.beforeClose(ssn)
	}
	framework.CloseSession(ssn)

	var bound, failed []*corev1.Pod
	for deadline := time.Now().Add(5 * time.Second); len(bound)+len(failed) < dispatched && time.Now().Before(deadline); {
		b, f := w.binder.take()
		bound, failed = append(bound, b...), append(failed, f...)
		time.Sleep(time.Millisecond)
	}
	for _, p := range bound {
		w.store(p)
	}
	w.stats.Bound += len(bound)
	w.stats.FailedBinds += len(failed)
	for _, p := range failed {
		// Volcano writes the session's copy back (the pod's condition) without a
		// node: the assignment it carries was never given.
		if w.r.Intn(2) == 0 {
			if cur := w.apiPod(p.Name); cur != nil {
				stale := cur.DeepCopy()
				for k, v := range p.Annotations {
					stale.Annotations[k] = v
				}
				w.store(stale)
				w.stats.StaleWrites++
			}
		}
	}
	// The cache hands evictions to the evictor asynchronously: wait for this
	// session's, so that each is judged against the session that made it.
	for deadline := time.Now().Add(5 * time.Second); len(w.evictor.Evicts())-w.evicted < releasing && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	w.useless = ""
	for _, key := range w.evictor.Evicts()[w.evicted:] {
		w.evicted++
		w.stats.Evicted++
		name := strings.TrimPrefix(key, "ns/")
		why, shed := w.preemptors.uselessEviction(w.apiPod(name), w.queueOf(name))
		if why != "" && w.useless == "" {
			w.useless = why
		}
		if shed {
			w.stats.ShedForQueue++
		}
		w.remove(name)
	}
	for len(w.evictor.Channel) > 0 {
		<-w.evictor.Channel
	}
}

// perturb changes the world between sessions: pods finish, nodes are cordoned or
// uncordoned, new jobs arrive.
func (w *soakWorld) perturb() {
	r := w.r
	for _, job := range w.jobs {
		if r.Intn(6) != 0 {
			continue
		}
		for _, name := range job.pods {
			if p := w.apiPod(name); p != nil && p.Spec.NodeName != "" {
				w.remove(name)
				w.stats.Finished++
			}
		}
	}
	if r.Intn(3) == 0 {
		names := make([]string, 0, len(w.nodes))
		for n := range w.nodes {
			names = append(names, n)
		}
		sort.Strings(names)
		old := w.nodes[names[r.Intn(len(names))]]
		n := old.DeepCopy()
		n.Spec.Unschedulable = !n.Spec.Unschedulable
		w.stats.Cordons++
		w.nodes[n.Name] = n
		if _, err := w.sc.Client().CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
			w.t.Fatal(err)
		}
		w.sc.UpdateNode(old, n)
	}
	if r.Intn(2) == 0 {
		w.addJob(fmt.Sprintf("j%02d", len(w.jobs)), []string{"qa", "qb"}[r.Intn(2)])
	}
}

// check verifies the invariants on the API server's view of the pods.
func (w *soakWorld) check() string {
	list, err := w.sc.Client().CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	type use struct {
		mem     int64
		cores   int
		tenants int
		whole   bool
	}
	cards := map[string]*use{}
	capacity := map[string]int64{}
	owner := map[string]string{}
	// migCard is each MIG device's card; migMode the cards in MIG mode; migHeld how
	// many bound pods name each MIG device.
	migCard, migMode, migHeld := map[string]string{}, map[string]bool{}, map[string]int{}
	for _, n := range w.nodes {
		inv, err := api.DecodeInventory(n.Annotations[api.AnnotationInventory])
		if err != nil {
			return err.Error()
		}
		for _, c := range inv.Cards {
			capacity[c.UUID] = c.MemoryMiB
			owner[c.UUID] = n.Name
			migMode[c.UUID] = c.MIG
		}
		if s, ok := n.Annotations[api.AnnotationMIGInstances]; ok {
			m, err := api.DecodeMIGInstances(s)
			if err != nil {
				return err.Error()
			}
			for card, list := range m.Cards {
				for _, in := range list {
					migCard[in.UUID] = card
				}
			}
		}
	}
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName == "" {
			continue
		}
		if !api.DefaultResourceNames().HasVGPURequest(p) {
			continue
		}
		s, ok := p.Annotations[api.AnnotationAssignment]
		if !ok {
			return fmt.Sprintf("vGPU pod %s is bound to %s without a card assignment", p.Name, p.Spec.NodeName)
		}
		a, err := api.DecodeAssignment(s)
		if err != nil {
			return fmt.Sprintf("pod %s: %v", p.Name, err)
		}
		if a.Node != p.Spec.NodeName {
			return fmt.Sprintf("pod %s is bound to %s with an assignment for %s", p.Name, p.Spec.NodeName, a.Node)
		}
		for _, c := range a.Containers {
			for _, card := range c.Cards {
				if owner[card.UUID] != p.Spec.NodeName {
					return fmt.Sprintf("pod %s on %s holds card %s of node %q", p.Name, p.Spec.NodeName, card.UUID, owner[card.UUID])
				}
				if card.IsMIG() {
					migHeld[card.MIG]++
					w.stats.MIGHeld++
					switch {
					case migCard[card.MIG] != card.UUID:
						return fmt.Sprintf("pod %s holds MIG device %s on card %s, whose layout lacks it", p.Name, card.MIG, card.UUID)
					case migHeld[card.MIG] > 1:
						return fmt.Sprintf("MIG device %s is held by %d pods", card.MIG, migHeld[card.MIG])
					case p.Annotations[api.AnnotationMIGProfile] == "":
						return fmt.Sprintf("pod %s holds MIG device %s without asking for a profile", p.Name, card.MIG)
					}
					continue
				}
				if migMode[card.UUID] {
					return fmt.Sprintf("pod %s shares card %s, which is in MIG mode", p.Name, card.UUID)
				}
				u := cards[card.UUID]
				if u == nil {
					u = &use{}
					cards[card.UUID] = u
				}
				u.mem += card.MemoryMiB
				u.cores += card.Cores
				u.tenants++
				u.whole = u.whole || card.Cores == 100
			}
		}
		if e, ok := testSched.inFlight.Get(p.UID); ok && e.Node != a.Node {
			return fmt.Sprintf("pod %s is bound on %s but the in-flight store says %s", p.Name, a.Node, e.Node)
		}
	}
	for uuid, u := range cards {
		switch {
		case u.mem > capacity[uuid]:
			return fmt.Sprintf("card %s: %d MiB assigned, %d MiB on the card", uuid, u.mem, capacity[uuid])
		case u.cores > 100:
			return fmt.Sprintf("card %s: %d%% cores assigned", uuid, u.cores)
		case u.whole && u.tenants > 1:
			return fmt.Sprintf("card %s: an exclusive assignment shares the card with %d others", uuid, u.tenants-1)
		case u.tenants > 10:
			return fmt.Sprintf("card %s: %d tenants on 10 shares", uuid, u.tenants)
		}
	}
	if w.useless != "" {
		return w.useless
	}
	// A failed bind may leave a gang partly bound until the retry: the scheduler's
	// part is to dispatch all of a gang's minimum or nothing.
	return w.partial
}

// preemptors are a session's pipelined tasks per node: those without vGPU requests
// (which free CPU, memory or slots may serve), and the cards the vGPU ones expect.
type preemptors struct {
	plain map[string]int
	cards map[string]map[string]bool
	// outranking is, per queue, the highest priority of a vGPU task pipelined there;
	// landed, the nodes its vGPU tasks were pipelined onto.
	outranking map[string]int32
	landed     map[string]map[string]bool
}

func (w *soakWorld) pipelinedOnto(ssn *framework.Session, vp *vgpuPlugin) preemptors {
	pr := preemptors{plain: map[string]int{}, cards: map[string]map[string]bool{}, outranking: map[string]int32{},
		landed: map[string]map[string]bool{}}
	for _, job := range ssn.Jobs {
		for _, t := range job.TaskStatusIndex[vapi.Pipelined] {
			if !api.DefaultResourceNames().HasVGPURequest(t.Pod) {
				pr.plain[t.NodeName]++
				continue
			}
			q := string(job.Queue)
			if t.Priority > pr.outranking[q] {
				pr.outranking[q] = t.Priority
			}
			if pr.landed[q] == nil {
				pr.landed[q] = map[string]bool{}
			}
			pr.landed[q][t.NodeName] = true
			fit, ok := vp.pipelined.Get(t.UID)
			if !ok {
				w.t.Fatalf("vGPU task %s was pipelined onto %s without the plugin choosing its cards", t.Name, t.NodeName)
			}
			if pr.cards[fit.Node] == nil {
				pr.cards[fit.Node] = map[string]bool{}
			}
			for _, c := range fit.Containers {
				for _, card := range c.Cards {
					pr.cards[fit.Node][card.UUID] = true
				}
			}
		}
	}
	return pr
}

// uselessEviction explains an evicted pod that made no room for any task pipelined
// onto its node: a vGPU pod must hold a card a pipelined vGPU task expects (or a
// task without vGPU requests was pipelined there, which its CPU may serve); a pod
// without vGPU requests must have some task pipelined onto its node.
//
// One exception is Volcano's preempt, not the plugin's choice: a queue that may not
// take its waiting task yet (over its share) sheds its lower-priority pods node by
// node, every victim offered on a node, until the queue admits the task, and then
// pipelines the task on the node it is at. A victim evicted on an earlier node made
// room in the queue, not on a card (seed 398 of the race soak: one card-freeing
// victim on n3 left the queue still full, the second, on n0, admitted the task
// there). Such a pod is in the queue of a task pipelined this session, below its
// priority, and that queue had a task pipelined onto another node than the pod's
// (preempt moved on). A victim whose cards no task uses on the only node its queue's
// tasks landed on is still a failure.
func (pr preemptors) uselessEviction(p *corev1.Pod, queue string) (why string, shed bool) {
	if p == nil || p.Spec.NodeName == "" {
		return "", false
	}
	node := p.Spec.NodeName
	if pr.plain[node] > 0 {
		return "", false
	}
	if !api.DefaultResourceNames().HasVGPURequest(p) {
		if len(pr.cards[node]) == 0 {
			return fmt.Sprintf("CPU-only pod %s was evicted from %s, where no task was pipelined", p.Name, node), false
		}
		return fmt.Sprintf("CPU-only pod %s was evicted from %s, where only vGPU tasks were pipelined (a card shortage)", p.Name, node), false
	}
	a, err := api.DecodeAssignment(p.Annotations[api.AnnotationAssignment])
	if err != nil {
		return fmt.Sprintf("evicted pod %s: %v", p.Name, err), false
	}
	for _, c := range a.Containers {
		for _, card := range c.Cards {
			if pr.cards[node][card.UUID] {
				return "", false
			}
		}
	}
	movedOn := false
	for n := range pr.landed[queue] {
		movedOn = movedOn || n != node
	}
	if top, ok := pr.outranking[queue]; ok && movedOn && p.Spec.Priority != nil && *p.Spec.Priority < top {
		return "", true
	}
	return fmt.Sprintf("vGPU pod %s was evicted from %s holding %v, but no task pipelined there expects its cards (%v expected)", p.Name, node,
		a.Containers, pr.cards[node]), false
}
