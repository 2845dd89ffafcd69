package vgpu

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
)

// A session must not book cards on a node while Volcano's cache lacks some of the
// node's running vGPU pods: their cards look free, and the session would give them to
// another pod. Volcano v1.14.1 opens its first sessions as soon as its informers have
// listed the cluster, before its event handlers have added every node and pod they
// listed (volcano-sh/volcano#5174): at 1,000 nodes the first session after a restart
// held 19 of the nodes and 5,199 of the 9,238 pods. (An informer's relist after an API
// server outage may open the same window; that is not measured.) The informers' own store
// (the scheduler's shared pod informer) is complete once listed, so each session
// compares the two: a node whose bound vGPU pods are not all in the session takes no
// vGPU task, a job missing some of its pods sits the session out (sitOut), and while
// any such pod is missing the queue shares count too little, so the plugin evicts
// nothing and judges no gang on free cards.

// cacheGaps is what the scheduler's informer store holds that the session does not.
type cacheGaps struct {
	// byNode counts, for each node in the session, the bound vGPU pods on it that the
	// session does not hold.
	byNode map[string]int
	// elsewhere counts those whose node is not in the session (not loaded yet, or
	// not ready) and whose job is, without them: the queue shares miss their cards.
	elsewhere int
	// jobs are the session's jobs that lack some of their bound vGPU pods.
	jobs map[vapi.JobID]bool
}

// missing is how many bound vGPU pods the session lacks.
func (g cacheGaps) missing() int {
	n := g.elsewhere
	for _, c := range g.byNode {
		n += c
	}
	return n
}

// holdsCards reports whether a pod is one whose cards the ledger books: bound, not
// finished, asking for vGPU resources and carrying an assignment.
func (p *vgpuPlugin) holdsCards(pod *corev1.Pod) bool {
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	return book.HasAssignment(pod) && p.args.Resources.HasVGPURequest(pod)
}

// findCacheGaps compares the bound pods the API server holds (pods) with the
// session's nodes and jobs. A pod counts as held when its node in the session lists
// it under its name with the same UID (a pod deleted and created again under its
// name is a different pod). A pod whose node is not in the session counts as missing
// only when its PodGroup's job is in the session without it: pods of other
// schedulers' jobs, or bound to nodes this scheduler does not serve, never enter its
// cache and are no gap. holds picks the pods that hold cards.
func findCacheGaps(pods []*corev1.Pod, nodes map[string]*vapi.NodeInfo, jobs map[vapi.JobID]*vapi.JobInfo,
	holds func(*corev1.Pod) bool) cacheGaps {
	g := cacheGaps{byNode: map[string]int{}, jobs: map[vapi.JobID]bool{}}
	var key []byte
	for _, pod := range pods {
		if !holds(pod) {
			continue
		}
		node, onNode := nodes[pod.Spec.NodeName]
		if onNode && nodeHolds(node, pod, &key) {
			continue // the steady state: no lookup of the job
		}
		var job *vapi.JobInfo
		if group := pod.Annotations[schedulingv1beta1.KubeGroupNameAnnotationKey]; group != "" {
			job = jobs[vapi.JobID(pod.Namespace+"/"+group)]
		}
		switch {
		case onNode:
			g.byNode[node.Name]++
		case job == nil || job.Tasks[vapi.TaskID(pod.UID)] != nil:
			continue
		default:
			g.elsewhere++
		}
		if job != nil {
			g.jobs[job.UID] = true
		}
	}
	return g
}

// nodeHolds reports whether the session's node lists the pod itself, not an earlier
// pod of its name. The node's tasks are keyed by namespace/name (Volcano's PodKey);
// key is a buffer reused across calls, so the lookup allocates nothing.
func nodeHolds(node *vapi.NodeInfo, pod *corev1.Pod, key *[]byte) bool {
	b := (*key)[:0]
	if pod.Namespace != "" {
		b = append(append(b, pod.Namespace...), '/')
	}
	b = append(b, pod.Name...)
	*key = b
	t, ok := node.Tasks[vapi.TaskID(b)]
	return ok && t.UID == vapi.TaskID(pod.UID)
}

// sitOut takes the session's jobs that lack some of their bound vGPU pods out of it.
// Volcano would judge such a gang on the members it has loaded, and at the session's
// close write its PodGroup back from them: a running job with none loaded yet becomes
// Pending with 0 running, to be written back Running a session later. Across a
// 1,000-node restart in make scale the API server served 535 PodGroup writes before
// the job sat out and 224 after; those writes are the first sessions' slow closes and
// the job controller's queue. The job is back next session, complete.
func sitOut(ssn *framework.Session, g cacheGaps) {
	for id := range g.jobs {
		delete(ssn.Jobs, id)
	}
}

// cacheGaps finds the session's gaps against the scheduler's pod informer; it finds
// none when the session has no synced pod informer to compare with (unit-test caches).
func (p *vgpuPlugin) cacheGaps(ssn *framework.Session) cacheGaps {
	f := ssn.InformerFactory()
	if f == nil {
		return cacheGaps{}
	}
	inf := f.Core().V1().Pods()
	if !inf.Informer().HasSynced() {
		return cacheGaps{}
	}
	pods, err := inf.Lister().List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "Cannot list pods from the scheduler's informer; not checking the session against it")
		return cacheGaps{}
	}
	g := findCacheGaps(pods, ssn.Nodes, ssn.Jobs, p.holdsCards)
	if n := g.missing(); n > 0 {
		klog.V(2).InfoS("The scheduler's cache does not hold every bound vGPU pod yet; nodes and jobs missing some sit this session out, and no vGPU pod is evicted",
			"missingPods", n, "nodesMissingPods", len(g.byNode), "onNodesNotInSession", g.elsewhere, "jobsMissingPods", len(g.jobs))
	}
	return g
}

// loadingReason is why a node whose pods are not all in the session takes no vGPU task.
func loadingReason(missing int) string {
	return fmt.Sprintf("the scheduler's cache does not hold %d of the node's running vGPU pods yet, so its free cards are unknown", missing)
}
