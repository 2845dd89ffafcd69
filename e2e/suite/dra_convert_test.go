package suite

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/admission"
	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// draConvertConfig turns the admission webhook's conversion on; the rest is the defaults.
const draConvertConfig = `version: v1
draConversion:
  enabled: true
`

// Existing VolcanoJobs on DRA nodes, unchanged (docs/dra.md, "Running existing jobs on DRA
// nodes"): with the webhook's draConversion on, a VolcanoJob asking for vgpu-number 1,
// vgpu-memory 4096 and vgpu-cores 30 in a namespace annotated tessera.io/card-api: dra has
// its pods' requests rewritten into a claim of the DRA driver, from the template of that
// shape which the webhook made in the namespace. Volcano's scheduler allocates the claim on
// a DRA node, and the container gets exactly one card with 4096 MiB and 30 cores (the
// checks of the DRA scenarios). The same job in a namespace that is not opted in (but seen
// by the webhook) keeps its vGPU requests and runs on a device-plugin node with Tessera's
// assignment and handoff (checked by cleanup).
func TestExistingVolcanoJobRunsOnDRANodes(t *testing.T) {
	ctx := context.Background()
	defer startDRA(t)()
	opted := ns(t, "dra-convert")
	plain := ns(t, "dra-convert-off")
	for name, ann := range map[string]map[string]string{opted: {api.AnnotationCardAPI: api.CardAPIDRA}, plain: nil} {
		o, err := cl.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if o.Labels == nil {
			o.Labels = map[string]string{}
		}
		o.Labels[cluster.AdmissionLabel] = "on"
		o.Annotations = ann
		if _, err := cl.Client.CoreV1().Namespaces().Update(ctx, o, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := cl.StartAdmission(ctx, draConvertConfig)
	if err != nil {
		t.Fatalf("start tessera-admission: %v", err)
	}
	defer func() {
		a.Stop()
		cleanup(t, opted)
		cleanup(t, plain)
	}()
	job := func(namespace string) {
		submit(t, workload.Job(namespace, "train", "default", 1, workload.Task{Name: "t", Replicas: 1,
			Containers: []workload.Container{{Name: "main", Cards: 1, MemMiB: 4096, Cores: 30}}}))
	}

	start := time.Now()
	job(opted)
	pods := waitDRAPods(t, opted, "train", 1)
	p := pods[0]
	t.Logf("the unchanged job's pod Running on %s %s after submission", p.Spec.NodeName, time.Since(start).Round(100*time.Millisecond))
	if !slices.ContainsFunc(draNodes, func(n cluster.Node) bool { return n.Name == p.Spec.NodeName }) {
		t.Errorf("%s runs on %s, not a DRA node", p.Name, p.Spec.NodeName)
	}
	if requestsCards(p) {
		t.Errorf("%s still asks for vGPU resources: %+v", p.Name, p.Spec.Containers[0].Resources)
	}
	const template = admission.ClaimTemplatePrefix + "1x-4096mi-30c"
	if len(p.Spec.ResourceClaims) != 1 || p.Spec.ResourceClaims[0].ResourceClaimTemplateName == nil ||
		*p.Spec.ResourceClaims[0].ResourceClaimTemplateName != template {
		t.Errorf("%s: claims %+v, want one from %s", p.Name, p.Spec.ResourceClaims, template)
	}
	tmpl, err := cl.Client.ResourceV1().ResourceClaimTemplates(opted).Get(ctx, template, metav1.GetOptions{})
	if err != nil {
		t.Errorf("the webhook's template: %v", err)
	} else if tmpl.Labels[admission.ManagedByLabel] != admission.ManagedByValue {
		t.Errorf("template %s labels %v", template, tmpl.Labels)
	}
	checkDRAContainer(t, p, draCards(t, p.Spec.NodeName), 4096, 30)

	start = time.Now()
	job(plain)
	dp, err := workload.WaitPods(ctx, cl.Client, plain, "train", 2*time.Minute, workload.AllPhase(1, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	q := dp[0]
	t.Logf("the same job outside the opted-in namespace Running on %s %s after submission: %s", q.Spec.NodeName,
		time.Since(start).Round(100*time.Millisecond), q.Annotations[api.AnnotationAssignment])
	if slices.ContainsFunc(draNodes, func(n cluster.Node) bool { return n.Name == q.Spec.NodeName }) || !requestsCards(q) ||
		len(q.Spec.ResourceClaims) != 0 || q.Annotations[api.AnnotationAssignment] == "" {
		t.Errorf("%s on %s: claims %+v, assignment %q: want a device-plugin node, its vGPU requests and Tessera's assignment",
			q.Name, q.Spec.NodeName, q.Spec.ResourceClaims, q.Annotations[api.AnnotationAssignment])
	}
}
