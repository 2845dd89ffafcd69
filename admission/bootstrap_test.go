package admission

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

var hosts = []string{"gpu-tessera-admission.volcano-system.svc", "127.0.0.1"}

func TestSelfSignedBootstrapWritesTheSecretOnceAndEveryCABundle(t *testing.T) {
	ctx := context.Background()
	mwc := &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "m"},
		Webhooks: []admissionregv1.MutatingWebhook{{Name: "mutate.tessera.io"}}}
	vwc := &admissionregv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "v"},
		Webhooks: []admissionregv1.ValidatingWebhook{{Name: "validate.tessera.io"}, {Name: "other.tessera.io"}}}
	client := fake.NewClientset(mwc, vwc)
	now := time.Now()
	b := &Bootstrap{Core: client.CoreV1(), Registration: client.AdmissionregistrationV1(), Namespace: "volcano-system", Name: "tls", Hosts: hosts,
		Mutating: []string{"m"}, Validating: []string{"v"}, Now: func() time.Time { return now }}
	cert := &Certificate{}
	if err := b.Sync(ctx, cert); err != nil {
		t.Fatal(err)
	}
	s, err := client.CoreV1().Secrets("volcano-system").Get(ctx, "tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("secret type %s", s.Type)
	}
	ca := s.Data["ca.crt"]
	m, _ := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "m", metav1.GetOptions{})
	v, _ := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "v", metav1.GetOptions{})
	for _, got := range [][]byte{m.Webhooks[0].ClientConfig.CABundle, v.Webhooks[0].ClientConfig.CABundle, v.Webhooks[1].ClientConfig.CABundle} {
		if !bytes.Equal(got, ca) {
			t.Errorf("caBundle %q, want the Secret's ca.crt", got)
		}
	}
	if cert.current() == nil {
		t.Fatal("no certificate served")
	}

	// A second replica, or the next round, keeps the same key pair and changes nothing.
	kp, err := b.EnsureSecret(ctx)
	if err != nil || !bytes.Equal(kp.CertPEM, s.Data[corev1.TLSCertKey]) {
		t.Errorf("second look re-issued the certificate (%v)", err)
	}
	if n, err := b.PatchCABundles(ctx, ca); n != 0 || err != nil {
		t.Errorf("second patch changed %d webhooks (%v)", n, err)
	}

	// helm upgrade empties a caBundle: the next round writes it back.
	m.Webhooks[0].ClientConfig.CABundle = nil
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.PatchCABundles(ctx, ca); n != 1 || err != nil {
		t.Errorf("after an upgrade: changed %d webhooks (%v), want 1", n, err)
	}

	// A month before expiry, or for a new Service name, the certificate is renewed.
	later := now.Add(servingLifetime - renewBefore + time.Hour)
	b.Now = func() time.Time { return later }
	kp2, err := b.EnsureSecret(ctx)
	if err != nil || bytes.Equal(kp2.CertPEM, kp.CertPEM) {
		t.Errorf("near expiry the certificate was not renewed (%v)", err)
	}
	if err := kp2.Usable(hosts, later); err != nil {
		t.Errorf("renewed certificate: %v", err)
	}
}

func TestUsableSaysWhyACertificateCannotServe(t *testing.T) {
	now := time.Now()
	kp, err := IssueSelfSigned(hosts, now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := IssueSelfSigned([]string{"elsewhere.svc"}, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		kp   KeyPair
		at   time.Time
		want string
	}{
		{"another name", *kp, now, ""},
		{"a key of another certificate", KeyPair{kp.CertPEM, other.KeyPEM, kp.CAPEM}, now, "tls.crt/tls.key"},
		{"another CA", KeyPair{kp.CertPEM, kp.KeyPEM, other.CAPEM}, now, "unknown authority"},
		{"no CA", KeyPair{kp.CertPEM, kp.KeyPEM, nil}, now, "ca.crt holds no PEM certificate"},
		{"about to expire", *kp, now.Add(servingLifetime - time.Hour), "expires at"},
	} {
		err := c.kp.Usable(hosts, c.at)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if err := kp.Usable([]string{"elsewhere.svc"}, now); err == nil || !strings.Contains(err.Error(), "elsewhere.svc") {
		t.Errorf("a host the certificate does not cover: %v", err)
	}
}
