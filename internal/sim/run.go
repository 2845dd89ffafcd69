package sim

import (
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/cmd/scheduler/app/options"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/actions/enqueue"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/metrics"
	"volcano.sh/volcano/pkg/scheduler/plugins"
	"volcano.sh/volcano/pkg/scheduler/plugins/gang"
	"volcano.sh/volcano/pkg/scheduler/plugins/nodeorder"
	"volcano.sh/volcano/pkg/scheduler/plugins/predicates"
	"volcano.sh/volcano/pkg/scheduler/plugins/proportion"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/plugins/vgpu"
)

// Result is what a simulation produced.
type Result struct {
	Sessions int
	// Bound holds every pod the sessions bound, as the API server would store it.
	Bound []*corev1.Pod
	// Held are the jobs' members that were bound before the first session.
	Held []*corev1.Pod
	// Pending maps each job (by Job.Key) that is not fully placed to the scheduler's reason.
	Pending map[string]string
	Nodes   []*corev1.Node
	Jobs    []Job
}

// recordingBinder stands in for the API server's binding subresource: it keeps the
// pod with the Binding's annotations and node, as the API server would.
type recordingBinder struct {
	mu    sync.Mutex
	bound []*corev1.Pod
}

func (b *recordingBinder) Bind(_ kubernetes.Interface, tasks []*vapi.TaskInfo) map[vapi.TaskID]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range tasks {
		p := t.Pod.DeepCopy()
		p.Spec.NodeName = t.NodeName
		p.Status.Phase = corev1.PodRunning
		b.bound = append(b.bound, p)
	}
	return nil
}

func (b *recordingBinder) take() []*corev1.Pod {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.bound
	b.bound = nil
	return out
}

// Run schedules the scenario: up to s.Sessions sessions of enqueue + allocate, each
// followed by the bound pods flowing back into the cache.
func Run(s *Scenario) (*Result, error) {
	// Volcano's actions read their tuning from the scheduler's global options.
	if options.ServerOpts == nil {
		options.Default()
	}
	// The Kubernetes predicates Volcano wraps report to kube-scheduler's metrics, which are
	// nil until Volcano initialises them (its scheduler's main does this at start).
	metrics.InitKubeSchedulerRelatedMetrics()
	now := time.Now()
	binder := &recordingBinder{}
	sc := cache.NewCustomMockSchedulerCache("volcano", binder, util.NewFakeEvictor(0), &util.FakeStatusUpdater{}, nil, &record.FakeRecorder{})
	res := &Result{Pending: map[string]string{}, Jobs: s.Jobs}
	for _, g := range s.Nodes {
		for i := 0; i < g.Count; i++ {
			n, err := gpuNode(g, i, now)
			if err != nil {
				return nil, err
			}
			sc.AddOrUpdateNode(n)
			res.Nodes = append(res.Nodes, n)
		}
	}
	for _, h := range s.Hosts {
		n, err := hostNode(h, now)
		if err != nil {
			return nil, err
		}
		sc.AddOrUpdateNode(n)
		res.Nodes = append(res.Nodes, n)
	}
	if !slices.ContainsFunc(s.Queues, func(q Queue) bool { return q.Name == "default" }) {
		sc.AddQueueV1beta1(util.BuildQueue("default", 1, nil))
	}
	for _, q := range s.Queues {
		sc.AddQueueV1beta1(volcanoQueue(q))
	}
	pods := map[string]*corev1.Pod{}
	for ji, j := range s.Jobs {
		sc.AddPodGroupV1beta1(podGroup(j))
		for i := 0; i < j.Replicas; i++ {
			created := now.Add(time.Duration(ji*1000+i) * time.Millisecond)
			p := jobPod(j, i, created)
			if i < len(j.Bound) {
				var err error
				if p, err = boundPod(j, i, created); err != nil {
					return nil, err
				}
				res.Held = append(res.Held, p)
			}
			pods[p.Namespace+"/"+p.Name] = p
			sc.AddPod(p)
		}
	}
	stop := make(chan struct{})
	defer close(stop)
	sc.Run(stop)
	framework.CleanupPluginBuilders()
	for name, b := range map[string]framework.PluginBuilder{gang.PluginName: gang.New, proportion.PluginName: proportion.New,
		predicates.PluginName: predicates.New, nodeorder.PluginName: nodeorder.New, vgpu.PluginName: vgpu.NewScheduler().New} {
		framework.RegisterPluginBuilder(name, b)
	}
	tiers := simTiers(s.Plugin)

	for res.Sessions < s.Sessions {
		res.Sessions++
		ssn := framework.OpenSession(sc, tiers, nil)
		for _, a := range []framework.Action{enqueue.New(), allocate.New()} {
			a.Initialize()
			a.Execute(ssn)
			a.UnInitialize()
		}
		reasons := pendingReasons(ssn)
		dispatched := countBinding(ssn)
		framework.CloseSession(ssn)
		bound := waitForBinds(binder, dispatched)
		for _, p := range bound {
			key := p.Namespace + "/" + p.Name
			sc.UpdatePod(pods[key], p)
			pods[key] = p
			res.Bound = append(res.Bound, p)
		}
		res.Pending = reasons
		if len(bound) == 0 {
			break
		}
	}
	sort.Slice(res.Bound, func(i, j int) bool {
		a, b := res.Bound[i], res.Bound[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return res, nil
}

// volcanoQueue is the scenario's queue as Volcano's Queue, open.
func volcanoQueue(q Queue) *schedulingv1.Queue {
	v := util.BuildQueue(q.Name, q.Weight, q.Capability)
	v.Spec.Guarantee.Resource = q.Guarantee
	v.Spec.Reclaimable = q.Reclaimable
	return v
}

func simTiers(args map[string]any) []conf.Tier {
	var opts []conf.PluginOption
	for _, n := range []string{gang.PluginName, proportion.PluginName, predicates.PluginName, nodeorder.PluginName, vgpu.PluginName} {
		o := conf.PluginOption{Name: n}
		if n == vgpu.PluginName {
			o.Arguments = framework.Arguments(args)
		}
		plugins.ApplyPluginConfDefaults(&o)
		opts = append(opts, o)
	}
	return []conf.Tier{{Plugins: opts}}
}

func countBinding(ssn *framework.Session) int {
	n := 0
	for _, job := range ssn.Jobs {
		n += len(job.TaskStatusIndex[vapi.Binding])
	}
	return n
}

// waitForBinds collects the binds the session dispatched; Volcano binds asynchronously.
func waitForBinds(b *recordingBinder, want int) []*corev1.Pod {
	var got []*corev1.Pod
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		got = append(got, b.take()...)
		time.Sleep(5 * time.Millisecond)
	}
	return got
}

// pendingReasons is what the gang plugin writes on each unready PodGroup.
func pendingReasons(ssn *framework.Session) map[string]string {
	out := map[string]string{}
	for _, job := range ssn.Jobs {
		if len(job.TaskStatusIndex[vapi.Pending]) == 0 {
			continue
		}
		msg := job.FitError()
		if job.PodGroup != nil && string(job.PodGroup.Status.Phase) == string(schedulingv1.PodGroupPending) && job.JobFitErrors == "" {
			msg = "not enqueued: " + msg
		}
		out[(&Job{Name: job.Name, Namespace: job.Namespace}).Key()] = msg
	}
	return out
}
