package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// admission is one of Volcano's admission webhooks, as its Helm chart
// (installer/helm/chart/volcano/templates/webhooks.yaml, v1.14.1) registers it.
type admission struct {
	path, name string
	mutating   bool
	group      string
	version    string
	resource   string
	operations []admissionv1.OperationType
}

// admissions are the webhooks the harness runs: all that vc-webhook-manager enables by
// default, in its order (v1.14.1 enables the same seven as v1.10.0; its chart enables a
// different set through --enabled-admission). The pod webhooks sit on the path of every pod of the 100- and
// 200-pod bursts; measured, those run as fast as without them (docs/e2e.md). Without an
// --admission-conf, /pods/mutate patches nothing.
var admissions = []admission{
	{"/jobs/mutate", "mutatejob.volcano.sh", true, "batch.volcano.sh", "v1alpha1", "jobs",
		[]admissionv1.OperationType{admissionv1.Create}},
	{"/jobs/validate", "validatejob.volcano.sh", false, "batch.volcano.sh", "v1alpha1", "jobs",
		[]admissionv1.OperationType{admissionv1.Create, admissionv1.Update}},
	{"/podgroups/mutate", "mutatepodgroup.volcano.sh", true, "scheduling.volcano.sh", "v1beta1", "podgroups",
		[]admissionv1.OperationType{admissionv1.Create}},
	{"/pods/validate", "validatepod.volcano.sh", false, "", "v1", "pods",
		[]admissionv1.OperationType{admissionv1.Create}},
	{"/pods/mutate", "mutatepod.volcano.sh", true, "", "v1", "pods",
		[]admissionv1.OperationType{admissionv1.Create}},
	{"/queues/mutate", "mutatequeue.volcano.sh", true, "scheduling.volcano.sh", "v1beta1", "queues",
		[]admissionv1.OperationType{admissionv1.Create}},
	{"/queues/validate", "validatequeue.volcano.sh", false, "scheduling.volcano.sh", "v1beta1", "queues",
		[]admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete}},
}

// startWebhook runs Volcano's vc-webhook-manager on a loopback port with a serving
// certificate of our own CA, registers its webhooks with the API server and waits until
// the API server reaches it.
func (c *Cluster) startWebhook(ctx context.Context) error {
	dir := filepath.Join(c.Opts.RunDir, "webhook")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caPEM, err := writeWebhookCerts(dir)
	if err != nil {
		return fmt.Errorf("webhook certificates: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	base := "https://127.0.0.1:" + strconv.Itoa(port)
	// The configurations carry the CA already: the manager only waits for them to exist
	// and would patch a missing caBundle, it never creates them.
	if err := c.registerWebhooks(ctx, base, caPEM); err != nil {
		return err
	}
	var paths []string
	for _, a := range admissions {
		paths = append(paths, a.path)
	}
	p, err := startProc(c.logDir, "vc-webhook-manager", c.Opts.Bin.VolcanoWebhook, "--kubeconfig="+c.Kubeconfig,
		"--listen-address=127.0.0.1", "--port="+strconv.Itoa(port), "--webhook-url="+base,
		"--tls-cert-file="+filepath.Join(dir, "tls.crt"), "--tls-private-key-file="+filepath.Join(dir, "tls.key"),
		"--ca-cert-file="+filepath.Join(dir, "ca.crt"), "--enabled-admission="+strings.Join(paths, ","),
		"--scheduler-name=volcano")
	if err != nil {
		return err
	}
	c.add(p)
	// The manager looks each configuration up after waiting a second, then registers
	// every handler before it listens, so it serves after ~7 s and one mutated object
	// means all of its webhooks do. A Queue without a weight comes back with weight 1
	// only if the API server called /queues/mutate over TLS and trusted our CA.
	probe := &schedulingv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe"}}
	return waitFor(ctx, "vc-webhook-manager mutating a dry-run Queue", 60*time.Second, p, func(ctx context.Context) (bool, error) {
		q, err := c.Volcano.SchedulingV1beta1().Queues().Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		if q.Spec.Weight != 1 {
			return false, fmt.Errorf("dry-run Queue not mutated (weight %d)", q.Spec.Weight)
		}
		return true, nil
	})
}

// registerWebhooks creates one Mutating- or ValidatingWebhookConfiguration per
// admission, named as vc-webhook-manager looks them up, with the chart's settings and
// a URL instead of a Service.
func (c *Cluster) registerWebhooks(ctx context.Context, base string, caPEM []byte) error {
	api := c.Client.AdmissionregistrationV1()
	for _, a := range admissions {
		name := "volcano-admission-service" + strings.ReplaceAll(a.path, "/", "-")
		url := base + a.path
		cc := admissionv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
		rules := []admissionv1.RuleWithOperations{{Operations: a.operations, Rule: admissionv1.Rule{
			APIGroups: []string{a.group}, APIVersions: []string{a.version}, Resources: []string{a.resource},
			Scope: ptrTo(admissionv1.AllScopes)}}}
		// The chart also leaves out its own release namespace; here nothing runs in one.
		nsSel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"}}}}
		fail, equivalent := admissionv1.Fail, admissionv1.Equivalent
		sideEffects := admissionv1.SideEffectClassNoneOnDryRun
		reviews, timeout := []string{"v1"}, int32(10)
		var err error
		if a.mutating {
			_, err = api.MutatingWebhookConfigurations().Create(ctx, &admissionv1.MutatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Webhooks: []admissionv1.MutatingWebhook{{Name: a.name, ClientConfig: cc, Rules: rules,
					FailurePolicy: &fail, MatchPolicy: &equivalent, NamespaceSelector: nsSel,
					ObjectSelector: &metav1.LabelSelector{}, SideEffects: &sideEffects, TimeoutSeconds: &timeout,
					AdmissionReviewVersions: reviews, ReinvocationPolicy: ptrTo(admissionv1.NeverReinvocationPolicy)}},
			}, metav1.CreateOptions{})
		} else {
			_, err = api.ValidatingWebhookConfigurations().Create(ctx, &admissionv1.ValidatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Webhooks: []admissionv1.ValidatingWebhook{{Name: a.name, ClientConfig: cc, Rules: rules,
					FailurePolicy: &fail, MatchPolicy: &equivalent, NamespaceSelector: nsSel,
					ObjectSelector: &metav1.LabelSelector{}, SideEffects: &sideEffects, TimeoutSeconds: &timeout,
					AdmissionReviewVersions: reviews}},
			}, metav1.CreateOptions{})
		}
		if err != nil {
			return fmt.Errorf("create webhook configuration %s: %w", name, err)
		}
	}
	return nil
}

// writeWebhookCerts writes a CA (ca.crt) and a serving certificate for 127.0.0.1
// signed by it (tls.crt, tls.key) into dir, and returns the CA in PEM.
func writeWebhookCerts(dir string) ([]byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	// A year: `make demo KEEP=1` may leave the cluster running for long.
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tessera-e2e webhook CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign CA: %w", err)
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serving := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "vc-webhook-manager"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, serving, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{"ca.crt", caPEM, 0o644},
		{"tls.crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644},
		{"tls.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return nil, err
		}
	}
	return caPEM, nil
}

func ptrTo[T any](v T) *T { return &v }
