package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tadmission "github.com/tessera-gpu/tessera/admission"
	"github.com/tessera-gpu/tessera/api"
)

// AdmissionLabel on a namespace sends its vGPU pods through Tessera's admission
// webhook while a scenario runs it; other scenarios' namespaces never meet it.
const AdmissionLabel = "tessera-e2e/admission"

// admissionNamespace holds the webhook's self-made CA and serving certificate, as the
// chart's release namespace does.
const admissionNamespace = "tessera-system"

// Admission is a running tessera-admission.
type Admission struct {
	c    *Cluster
	p    *proc
	name string
}

// StartAdmission runs Tessera's admission webhook with the configuration file's text
// in its self-signed TLS mode, as the chart's default does: the configurations are
// registered with the chart's settings, a URL instead of the Service, and no caBundle,
// and the webhook makes its CA, stores it in a Secret and writes the caBundle itself.
// It returns once the API server has called it over TLS (a dry-run vGPU pod in a
// labelled namespace comes back routed). Only namespaces with AdmissionLabel are
// selected.
func (c *Cluster) StartAdmission(ctx context.Context, config string) (*Admission, error) {
	dir := filepath.Join(c.Opts.RunDir, "admission")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, "admission.yaml")
	if err := os.WriteFile(confPath, []byte(config), 0o644); err != nil {
		return nil, err
	}
	cfg, err := tadmission.ParseConfig([]byte(config))
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	_, err = c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: admissionNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	a := &Admission{c: c, name: "tessera-admission-e2e"}
	url := "https://127.0.0.1:" + strconv.Itoa(port)
	m, v := tadmission.Webhooks(admissionregv1.WebhookClientConfig{URL: &url}, cfg.ResourceNames(),
		admissionregv1.Fail, admissionregv1.Fail, 10)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{AdmissionLabel: "on"}}
	m.NamespaceSelector, v.NamespaceSelector = sel, sel
	m.ObjectSelector, v.ObjectSelector = &metav1.LabelSelector{}, &metav1.LabelSelector{}
	reg := c.Client.AdmissionregistrationV1()
	if _, err := reg.MutatingWebhookConfigurations().Create(ctx, &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: a.name}, Webhooks: []admissionregv1.MutatingWebhook{m}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := reg.ValidatingWebhookConfigurations().Create(ctx, &admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: a.name}, Webhooks: []admissionregv1.ValidatingWebhook{v}}, metav1.CreateOptions{}); err != nil {
		a.unregister()
		return nil, err
	}
	a.p, err = startProc(c.logDir, "tessera-admission", c.Opts.Bin.Admission, "--kubeconfig="+c.Kubeconfig,
		"--config="+confPath, "--listen-address=127.0.0.1:"+strconv.Itoa(port), "-v=4",
		"--self-signed-secret="+admissionNamespace+"/tessera-admission-tls", "--self-signed-hosts=127.0.0.1",
		"--mutating-webhook-configuration="+a.name, "--validating-webhook-configuration="+a.name,
		"--self-signed-sync-period=5s")
	if err != nil {
		a.unregister()
		return nil, err
	}
	c.add(a.p)
	// The probe namespace is labelled like the scenarios' ones; a dry-run creates nothing.
	probeNS := "tessera-admission-probe"
	_, err = c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: probeNS,
		Labels: map[string]string{AdmissionLabel: "on"}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		a.Stop()
		return nil, err
	}
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: probeNS}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceName(api.ResourceNumber): resource.MustParse("1")}}}}}}
	err = waitFor(ctx, "tessera-admission routing a dry-run vGPU pod", 60*time.Second, a.p, func(ctx context.Context) (bool, error) {
		got, err := c.Client.CoreV1().Pods(probeNS).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		if got.Spec.SchedulerName != cfg.SchedulerName {
			return false, fmt.Errorf("dry-run pod not routed (schedulerName %q)", got.Spec.SchedulerName)
		}
		return true, nil
	})
	if err != nil {
		a.Stop()
		return nil, err
	}
	return a, nil
}

// Kill ends the webhook as a crash does, leaving it registered: the API server then
// meets the failure policy.
func (a *Admission) Kill() { a.p.kill() }

// Stop unregisters the webhooks and ends the process.
func (a *Admission) Stop() {
	a.unregister()
	if a.p != nil {
		a.p.stop(5 * time.Second)
	}
	_ = a.c.Client.CoreV1().Namespaces().Delete(context.Background(), "tessera-admission-probe", metav1.DeleteOptions{})
}

func (a *Admission) unregister() {
	ctx := context.Background()
	reg := a.c.Client.AdmissionregistrationV1()
	_ = reg.MutatingWebhookConfigurations().Delete(ctx, a.name, metav1.DeleteOptions{})
	_ = reg.ValidatingWebhookConfigurations().Delete(ctx, a.name, metav1.DeleteOptions{})
}
