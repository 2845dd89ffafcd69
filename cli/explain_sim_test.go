package cli

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/internal/sim"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// Explain must say what the scheduler says. Run Volcano's real scheduler with the
// vgpu plugin (internal/sim) until a job is left pending, then explain that job's pod
// against the nodes and bound pods the simulation produced: every per-node reason
// the CLI gives must be one the scheduler reported for the job.
func TestExplainAgreesWithTheSchedulerOnAPendingJob(t *testing.T) {
	s, err := sim.ParseScenario([]byte(`
nodes:
- {prefix: a100, count: 2, cards: 2, model: NVIDIA A100-SXM4-40GB, memoryMiB: 40960, shares: 4}
- {prefix: t4, count: 1, cards: 1, model: Tesla T4, memoryMiB: 15360, shares: 4}
queues:
- {name: research, weight: 1}
jobs:
- {name: fill, queue: research, replicas: 2, minAvailable: 1, cards: 2, memoryMiB: 30000, cores: 40,
   annotations: {tessera.io/gpu-type-include: a100}}
- {name: blocked, queue: research, replicas: 1, minAvailable: 1, cards: 1, memoryMiB: 20000, cores: 20}
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(s)
	if err != nil {
		t.Fatal(err)
	}
	// Volcano places the small job first, then one member of fill; fill-1 is left
	// pending with nothing tentatively allocated beside it.
	schedReason, pending := res.Pending["fill"]
	if !pending || len(res.Bound) != 2 || !strings.Contains(schedReason, "fill-1:") {
		t.Fatalf("scenario did not leave fill-1 pending: pending %v, bound %d", res.Pending, len(res.Bound))
	}
	snap := &Snapshot{Args: pluginargs.Defaults(), Now: time.Now()}
	for _, n := range res.Nodes {
		snap.Nodes = append(snap.Nodes, *n)
	}
	for _, p := range res.Bound {
		snap.Pods = append(snap.Pods, *p)
	}
	lim := corev1.ResourceList{
		api.ResourceNumber: *resource.NewQuantity(2, resource.DecimalSI),
		api.ResourceMemory: *resource.NewQuantity(30000, resource.DecimalSI),
		api.ResourceCores:  *resource.NewQuantity(40, resource.DecimalSI),
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: res.Bound[0].Namespace, Name: "fill-1",
		Annotations: map[string]string{api.AnnotationGPUTypeInclude: "a100"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: lim}}}}}
	v := snap.Explain(pod)
	if v.Status != ExplainNoNodeFits || len(v.Nodes) != 3 {
		t.Fatalf("explain: %s over %d nodes; the scheduler says: %s", v.Status, len(v.Nodes), schedReason)
	}
	var usage bool
	for _, n := range v.Nodes {
		usage = usage || strings.Contains(n.Reason, "insufficient memory")
		if !strings.Contains(schedReason, n.Reason) {
			t.Errorf("explain gives %s the reason %q, which the scheduler did not report: %s", n.Node, n.Reason, schedReason)
		}
	}
	if !usage {
		t.Errorf("no node refused for memory: the bound pods' cards were not accounted")
	}
}
