package suite

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tessera-gpu/tessera/admission"
	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// admissionConfig forbids best-effort in the scenario's namespace and caps its cores.
const admissionConfig = `version: v1
schedulerName: volcano
defaultQueue: default
limits:
  - namespace: admission
    allowedQoS: [fixed-share, burst-share]
    maxCores: 50
`

// vgpuPodSpec asks for one card, 4 GiB and 30% of its SMs, like a small inference server.
func vgpuPodSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "server", Image: "busybox", Command: []string{"sleep", "infinity"},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(workload.RequestCPU),
				corev1.ResourceMemory: resource.MustParse(workload.RequestMemory)},
			Limits: corev1.ResourceList{api.ResourceNumber: resource.MustParse("1"), api.ResourceMemory: resource.MustParse("4096"),
				api.ResourceCores: resource.MustParse("30")}}}}}
}

// Tessera's admission webhook (self-signed TLS, as the chart's default): a Deployment's
// vGPU pods, which name no scheduler or queue, get schedulerName volcano and their
// namespace's queue, and are placed on cards by Tessera with the handoff matching the
// CRI record; a malformed annotation is refused at create with the scheduler's own
// reason for the same pod; best-effort is refused where forbidden; CPU-only pods are
// never touched, even with the webhook down, while vGPU pods then wait (failurePolicy Fail).
func TestAdmissionWebhookRoutesADeploymentOntoCards(t *testing.T) {
	ctx := context.Background()
	n := ns(t, "admission")
	other := ns(t, "admission-off")
	queue(t, "adm-serving", 1)
	nsObj, err := cl.Client.CoreV1().Namespaces().Get(ctx, n, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Labels[cluster.AdmissionLabel] = "on"
	nsObj.Annotations = map[string]string{admission.PodQueueAnnotation: "adm-serving"}
	if _, err := cl.Client.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a, err := cl.StartAdmission(ctx, admissionConfig)
	if err != nil {
		t.Fatalf("start tessera-admission: %v", err)
	}
	t.Logf("tessera-admission serving (self-signed CA written into its configurations) in %s", time.Since(start).Round(100*time.Millisecond))
	stopped := false
	defer func() {
		if !stopped {
			a.Stop()
		}
		_ = cl.Client.AppsV1().Deployments(n).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = cl.Client.CoreV1().Pods(other).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}, metav1.ListOptions{})
		cleanup(t, n)
		cleanup(t, other)
		_ = cl.Volcano.SchedulingV1beta1().Queues().Delete(ctx, "adm-serving", metav1.DeleteOptions{})
	}()

	// A Deployment, as a serving stack would make it: no schedulerName, no queue.
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "infer", Namespace: n}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "infer"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "infer"}}, Spec: vgpuPodSpec()}}}
	if _, err := cl.Client.AppsV1().Deployments(n).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := cl.Client.CoreV1().Pods(n).List(ctx, metav1.ListOptions{LabelSelector: "app=infer"})
		if err != nil {
			return false, nil
		}
		pods = l.Items
		return workload.AllPhase(2, corev1.PodRunning)(pods), nil
	})
	if err != nil {
		t.Fatalf("the Deployment's pods never ran: %s", workload.Summary(pods))
	}
	for _, p := range pods {
		if p.Spec.SchedulerName != "volcano" || p.Annotations[admission.PodQueueAnnotation] != "adm-serving" {
			t.Errorf("pod %s: schedulerName %q, queue %q; want volcano and the namespace's adm-serving",
				p.Name, p.Spec.SchedulerName, p.Annotations[admission.PodQueueAnnotation])
		}
		if p.Annotations[api.AnnotationAssignment] == "" || p.Annotations[api.AnnotationHandoff] != api.HandoffDone {
			t.Errorf("pod %s: assignment %q, handoff %q", p.Name, p.Annotations[api.AnnotationAssignment], p.Annotations[api.AnnotationHandoff])
		}
		t.Logf("pod %s on %s: %s", p.Name, p.Spec.NodeName, p.Annotations[api.AnnotationAssignment])
	}
	pgs, err := cl.Volcano.SchedulingV1beta1().PodGroups(n).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pg := range pgs.Items {
		if pg.Spec.Queue != "adm-serving" {
			t.Errorf("PodGroup %s in queue %q, want adm-serving", pg.Name, pg.Spec.Queue)
		}
	}
	checkHandoff(t, pods)
	noOvercommit(t)

	// A malformed annotation: refused at create with the reason the scheduler gives the
	// same pod where the webhook does not run.
	bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bad-numa", Annotations: map[string]string{api.AnnotationNUMABind: "yes"}},
		Spec: vgpuPodSpec()}
	_, reqErr := pluginargs.Defaults().Request(bad)
	if reqErr == nil {
		t.Fatal("the scheduler's reader accepts the malformed annotation")
	}
	prefix := `admission webhook "` + admission.ValidatingWebhookName + `" denied the request: `
	_, err = cl.Client.CoreV1().Pods(n).Create(ctx, bad, metav1.CreateOptions{})
	var said string
	if err == nil || !strings.Contains(err.Error(), prefix) {
		t.Errorf("malformed annotation: %v, want a refusal by %s", err, admission.ValidatingWebhookName)
	} else {
		said = err.Error()[strings.Index(err.Error(), prefix)+len(prefix):]
		t.Logf("refused at create: %v", err)
	}
	if want := admission.SchedulerReason(bad, reqErr); said != want {
		t.Errorf("the webhook says %q, want %q", said, want)
	}
	unchecked := bad.DeepCopy()
	unchecked.Spec.SchedulerName = "volcano"
	if _, err := cl.Client.CoreV1().Pods(other).Create(ctx, unchecked, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := pendingReason(t, other, "bad-numa", "its annotation is malformed"); said == "" || !strings.Contains(got, said) {
		t.Errorf("the scheduler says %q, the webhook %q", got, said)
	} else {
		t.Logf("the scheduler's reason for the same pod: %s", got)
	}
	// A Deployment's pods are named from generateName before validation: the ReplicaSet
	// reports the refusal naming the pod it tried to create.
	badDep := dep.DeepCopy()
	badDep.Name = "bad-infer"
	badDep.Spec.Selector.MatchLabels = map[string]string{"app": "bad-infer"}
	badDep.Spec.Template.Labels = map[string]string{"app": "bad-infer"}
	badDep.Spec.Template.Annotations = map[string]string{api.AnnotationNUMABind: "yes"}
	if _, err := cl.Client.AppsV1().Deployments(n).Create(ctx, badDep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var rsSays string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		rss, err := cl.Client.AppsV1().ReplicaSets(n).List(ctx, metav1.ListOptions{LabelSelector: "app=bad-infer"})
		if err != nil {
			return false, nil
		}
		for _, rs := range rss.Items {
			for _, c := range rs.Status.Conditions {
				if c.Type == appsv1.ReplicaSetReplicaFailure {
					rsSays = c.Message
				}
			}
		}
		return rsSays != "", nil
	})
	if err != nil || !strings.Contains(rsSays, prefix+"vgpu: task bad-infer-") || !strings.Contains(rsSays, reqErr.Error()) {
		t.Errorf("the malformed Deployment's ReplicaSet says %q (%v), want the refusal naming its generated pod", rsSays, err)
	} else {
		t.Logf("the ReplicaSet says: %s", rsSays)
	}

	// Best-effort is forbidden in this namespace.
	be := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "be", Annotations: map[string]string{api.AnnotationQoS: string(api.QoSBestEffort)}},
		Spec: vgpuPodSpec()}
	_, err = cl.Client.CoreV1().Pods(n).Create(ctx, be, metav1.CreateOptions{})
	if want := "namespace admission allows tessera.io/qos fixed-share, burst-share; this pod asks best-effort"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("best-effort pod: %v, want a refusal saying %q", err, want)
	}

	// A CPU-only pod is never touched, and never waits on the webhook, even while it is down.
	cpu := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cpu"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(workload.RequestCPU)}}}}}}
	checkCPU := func(when string) {
		got, err := cl.Client.CoreV1().Pods(n).Create(ctx, cpu, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Errorf("CPU-only pod %s: %v", when, err)
			return
		}
		if got.Spec.SchedulerName != corev1.DefaultSchedulerName || got.Annotations[admission.PodQueueAnnotation] != "" {
			t.Errorf("CPU-only pod %s: schedulerName %q, annotations %v", when, got.Spec.SchedulerName, got.Annotations)
		}
	}
	checkCPU("with the webhook up")
	a.Kill()
	checkCPU("with the webhook down")
	down := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "while-down"}, Spec: vgpuPodSpec()}
	if _, err := cl.Client.CoreV1().Pods(n).Create(ctx, down, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil ||
		!strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("vGPU pod with the webhook down: %v, want the API server's failed-call refusal (failurePolicy Fail)", err)
	} else {
		t.Logf("with the webhook down a vGPU pod waits: %v", err)
	}
	a.Stop()
	stopped = true
}
