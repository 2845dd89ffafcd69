package vgpu

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler"
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// TestSharesConvergeToWeightedMaxMin: under sustained contention, the shipped conf's
// actions bring every queue to within one task of its weighted max-min share of card
// cores. One queue fills every card first with elastic jobs; one or two queues of
// random weights then ask, like it, for more than the whole cluster, in one-pod jobs
// of 25, 50 or 100 card cores (memory in proportion), and 14 sessions run on (binds
// failing at random, evicted pods going away). Volcano's gang plugin keeps one pod
// of every elastic job from reclaim; the first queue asks for a little more than the
// cluster, so those minimum pods fit within its share. (With twice the cluster
// asked, its protected minimums alone can exceed its share, and the others stay
// below theirs by design.)
func TestSharesConvergeToWeightedMaxMin(t *testing.T) {
	actions, tiers, cfg, _, err := scheduler.UnmarshalSchedulerConf(exampleConf(t, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	builders := confPlugins(t, tiers)
	seeds := *soakSeeds / 10
	for seed := int64(1); seed <= int64(seeds); seed++ {
		convergeSeed(t, seed, builders, actions, tiers, cfg)
	}
}

func convergeSeed(t *testing.T, seed int64, builders map[string]framework.PluginBuilder, actions []framework.Action, tiers []conf.Tier,
	cfg []conf.Configuration) {
	{
		r := rand.New(rand.NewSource(seed))
		w := newShareWorld(t, r)
		queues := []string{"qa", "qb", "qc"}[:2+r.Intn(2)]
		weights := map[string]int32{}
		for _, q := range queues {
			weights[q] = int32(1 + r.Intn(3))
			w.sc.AddQueueV1beta1(util.BuildQueue(q, weights[q], nil))
		}
		w.sc.Run(w.stop)
		total := 100 * 4 * len(w.nodes)
		ask := map[string]int{}
		// The first queue runs elastic jobs (six pods, minimum one): Volcano's gang
		// plugin lets reclaim take all but one of each. The others submit one-pod jobs,
		// each starving until it runs.
		submit := func(q string, pods int) {
			for ask[q] < total+100 {
				var cores []int64
				for i := 0; i < pods; i++ {
					cores = append(cores, []int64{25, 50, 100}[r.Intn(3)])
					ask[q] += int(cores[i])
				}
				w.elasticJob(fmt.Sprintf("%s-%03d", q, len(w.jobs)), q, cores)
			}
		}
		submit(queues[0], 6)
		for s := 0; s < 3; s++ {
			w.session(builders, actions, tiers, cfg)
		}
		for _, q := range queues[1:] {
			submit(q, 1)
		}
		var held map[string]int
		for s := 0; s < 14; s++ {
			w.session(builders, actions, tiers, cfg)
			if msg := w.check(); msg != "" {
				t.Fatalf("seed %d, session %d: %s", seed, s, msg)
			}
			held = w.coresPerQueue()
		}
		claims := make([]fairshare.Claim, len(queues))
		for i, q := range queues {
			claims[i] = fairshare.Claim{Weight: float64(weights[q]), Request: fairshare.Amount{Cores: float64(ask[q])},
				Capability: fairshare.Unlimited}
		}
		deserved := fairshare.Divide(fairshare.Amount{Cores: float64(total)}, claims)
		for i, q := range queues {
			if got, want := float64(held[q]), deserved[i].Cores; got < want-100 {
				t.Errorf("seed %d: queue %s (weight %d) holds %v of %d card cores, deserves %v: more than one task below its share (weights %v, held %v)",
					seed, q, weights[q], got, total, want, weights, held)
			}
		}
		w.close()
	}
}

// newShareWorld is 2 to 4 nodes of four 40 GiB cards, no jobs yet.
func newShareWorld(t *testing.T, r *rand.Rand) *soakWorld {
	testSched = NewScheduler()
	w := &soakWorld{t: t, r: r, binder: &soakBinder{r: rand.New(rand.NewSource(r.Int63()))},
		evictor: util.NewFakeEvictor(10000), stop: make(chan struct{}), nodes: map[string]*corev1.Node{}, stats: &soakStats{}}
	w.sc = cache.NewCustomMockSchedulerCache("volcano", w.binder, w.evictor, &util.FakeStatusUpdater{}, nil, &record.FakeRecorder{})
	for i, n := 0, 2+r.Intn(3); i < n; i++ {
		node := gpuNode(fmt.Sprintf("n%d", i), 4, "NVIDIA A100", 40960)
		w.nodes[node.Name] = node
		if _, err := w.sc.Client().CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		w.sc.AddOrUpdateNode(node)
	}
	return w
}

// elasticJob submits a job of minimum one whose pods ask for cores[i]% of one card
// (and as much of its memory).
func (w *soakWorld) elasticJob(name, queue string, cores []int64) {
	pg := util.BuildPodGroup(name, "ns", queue, 1, nil, schedulingv1.PodGroupPending)
	w.sc.AddPodGroupV1beta1(pg)
	job := &soakJob{name: name, queue: queue, min: 1}
	for i, c := range cores {
		p := vgpuPod(fmt.Sprintf("%s-%d", name, i), name, 1, 40960*c/100, c, nil)
		w.sc.AddPod(p)
		if _, err := w.sc.Client().CoreV1().Pods("ns").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			w.t.Fatal(err)
		}
		job.pods = append(job.pods, p.Name)
	}
	w.jobs = append(w.jobs, job)
}

// coresPerQueue sums the card cores of the bound pods, by queue.
func (w *soakWorld) coresPerQueue() map[string]int {
	queueOf := map[string]string{}
	for _, j := range w.jobs {
		queueOf[j.name] = j.queue
	}
	out := map[string]int{}
	for job, cores := range w.coresPerJob() {
		out[queueOf[job]] += cores
	}
	return out
}

// coresPerJob sums the card cores assigned to each job's bound pods.
func (w *soakWorld) coresPerJob() map[string]int {
	jobOf := map[string]string{}
	for _, j := range w.jobs {
		for _, p := range j.pods {
			jobOf[p] = j.name
		}
	}
	list, err := w.sc.Client().CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range list.Items {
		if p.Spec.NodeName == "" {
			continue
		}
		a, err := api.DecodeAssignment(p.Annotations[api.AnnotationAssignment])
		if err != nil {
			w.t.Fatalf("pod %s: %v", p.Name, err)
		}
		for _, c := range a.Containers {
			for _, card := range c.Cards {
				out[jobOf[p.Name]] += card.Cores
			}
		}
	}
	return out
}
