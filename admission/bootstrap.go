package admission

import (
	"bytes"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionregv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"
)

// Bootstrap is the self-signed TLS mode: the webhook keeps its CA and serving
// certificate in a Secret (shared by its replicas) and writes the CA into its webhook
// configurations' caBundle, which a `helm upgrade` may have emptied.
type Bootstrap struct {
	// Typed clients of the two API groups it writes (not the whole clientset: the
	// binary stays small).
	Core            corev1client.SecretsGetter
	Registration    admissionregv1client.AdmissionregistrationV1Interface
	Namespace, Name string   // the Secret
	Hosts           []string // names the serving certificate covers (the Service's DNS names)
	Mutating        []string // MutatingWebhookConfiguration names
	Validating      []string // ValidatingWebhookConfiguration names
	Now             func() time.Time
}

// EnsureSecret returns the Secret's key pair when it can serve Hosts, and otherwise
// issues a new one and writes it. Replicas racing to write it settle on the one the
// API server stored first.
func (b *Bootstrap) EnsureSecret(ctx context.Context) (*KeyPair, error) {
	secrets := b.Core.Secrets(b.Namespace)
	for attempt := 0; attempt < 3; attempt++ {
		s, err := secrets.Get(ctx, b.Name, metav1.GetOptions{})
		exists := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("secret %s/%s: %w", b.Namespace, b.Name, err)
		}
		if exists {
			kp := &KeyPair{CertPEM: s.Data[corev1.TLSCertKey], KeyPEM: s.Data[corev1.TLSPrivateKeyKey], CAPEM: s.Data["ca.crt"]}
			why := kp.Usable(b.Hosts, b.Now())
			if why == nil {
				return kp, nil
			}
			klog.InfoS("Renewing the webhook's serving certificate", "secret", klog.KRef(b.Namespace, b.Name), "reason", why)
		}
		kp, err := IssueSelfSigned(b.Hosts, b.Now())
		if err != nil {
			return nil, err
		}
		data := map[string][]byte{corev1.TLSCertKey: kp.CertPEM, corev1.TLSPrivateKeyKey: kp.KeyPEM, "ca.crt": kp.CAPEM}
		if exists {
			s.Data, s.Type = data, corev1.SecretTypeTLS
			_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		} else {
			_, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: b.Name, Namespace: b.Namespace},
				Type: corev1.SecretTypeTLS, Data: data}, metav1.CreateOptions{})
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			continue // another replica wrote it first: use theirs
		}
		if err != nil {
			return nil, fmt.Errorf("write secret %s/%s: %w", b.Namespace, b.Name, err)
		}
		return kp, nil
	}
	return nil, fmt.Errorf("secret %s/%s: kept changing under three attempts to write it", b.Namespace, b.Name)
}

// PatchCABundles writes ca into every webhook of the configurations that does not
// carry it already; it reports how many it changed.
func (b *Bootstrap) PatchCABundles(ctx context.Context, ca []byte) (int, error) {
	changed := 0
	api := b.Registration
	for _, name := range b.Mutating {
		c, err := api.MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return changed, fmt.Errorf("MutatingWebhookConfiguration %s: %w", name, err)
		}
		n := 0
		for i := range c.Webhooks {
			if !bytes.Equal(c.Webhooks[i].ClientConfig.CABundle, ca) {
				c.Webhooks[i].ClientConfig.CABundle, n = ca, n+1
			}
		}
		if n > 0 {
			if _, err := api.MutatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{}); err != nil {
				return changed, fmt.Errorf("MutatingWebhookConfiguration %s: %w", name, err)
			}
			changed += n
		}
	}
	for _, name := range b.Validating {
		c, err := api.ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return changed, fmt.Errorf("ValidatingWebhookConfiguration %s: %w", name, err)
		}
		n := 0
		for i := range c.Webhooks {
			if !bytes.Equal(c.Webhooks[i].ClientConfig.CABundle, ca) {
				c.Webhooks[i].ClientConfig.CABundle, n = ca, n+1
			}
		}
		if n > 0 {
			if _, err := api.ValidatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{}); err != nil {
				return changed, fmt.Errorf("ValidatingWebhookConfiguration %s: %w", name, err)
			}
			changed += n
		}
	}
	return changed, nil
}

// Run keeps the certificate and the caBundles current until ctx ends: every period it
// re-reads the Secret (renewing it when due, or taking another replica's renewal) and
// re-writes any caBundle that differs.
func (b *Bootstrap) Run(ctx context.Context, cert *Certificate, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := b.Sync(ctx, cert); err != nil {
			klog.ErrorS(err, "Keeping the webhook's certificate and caBundle current")
		}
	}
}

// Sync does one round of Run.
func (b *Bootstrap) Sync(ctx context.Context, cert *Certificate) error {
	kp, err := b.EnsureSecret(ctx)
	if err != nil {
		return err
	}
	if err := cert.Set(kp); err != nil {
		return err
	}
	n, err := b.PatchCABundles(ctx, kp.CAPEM)
	if n > 0 {
		klog.InfoS("Wrote the CA into the webhook configurations", "webhooks", n)
	}
	return err
}
