package admission

import (
	"bytes"
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

func TestNamespaceQueueAsksTheAPIServerForANamespaceTheCacheHasNotSeen(t *testing.T) {
	cached := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "old", Annotations: map[string]string{PodQueueAnnotation: "q-old"}}}
	fresh := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "new", Annotations: map[string]string{PodQueueAnnotation: "q-new"}}}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := idx.Add(cached); err != nil {
		t.Fatal(err)
	}
	q := &ListerQueues{Lister: listerscorev1.NewNamespaceLister(idx), Client: fake.NewClientset(fresh).CoreV1()}
	for ns, want := range map[string]string{"old": "q-old", "new": "q-new"} {
		got, err := q.NamespaceQueue(context.Background(), ns)
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", ns, got, err, want)
		}
	}
	if _, err := q.NamespaceQueue(context.Background(), "gone"); err == nil {
		t.Error("a namespace that exists nowhere has a queue")
	}
}

func TestFileCertificateServesWhatCertManagerRotatesIn(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(kp *KeyPair, mtime time.Time) {
		t.Helper()
		for f, b := range map[string][]byte{certFile: kp.CertPEM, keyFile: kp.KeyPEM} {
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(f, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
	}
	leaf := func(c *Certificate) []byte {
		t.Helper()
		got, err := c.GetCertificate(nil)
		if err != nil || got == nil {
			t.Fatalf("no certificate: %v", err)
		}
		if _, err := x509.ParseCertificate(got.Certificate[0]); err != nil {
			t.Fatal(err)
		}
		return got.Certificate[0]
	}
	first, err := IssueSelfSigned(hosts, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	write(first, time.Now().Add(-time.Hour))
	c, err := NewFileCertificate(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	before := leaf(c)
	second, err := IssueSelfSigned(hosts, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	write(second, time.Now())
	c.mu.Lock()
	c.checked = time.Time{} // the ten-second throttle has passed
	c.mu.Unlock()
	rotated := leaf(c)
	if bytes.Equal(rotated, before) {
		t.Error("the rotated certificate is not served")
	}
	// A half-written rotation (a key that does not match) keeps the last good pair.
	if err := os.WriteFile(keyFile, first.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(certFile, time.Now().Add(time.Minute), time.Now().Add(time.Minute))
	c.mu.Lock()
	c.checked = time.Time{}
	c.mu.Unlock()
	if !bytes.Equal(leaf(c), rotated) {
		t.Error("a broken rotation replaced the last good certificate")
	}
	if _, err := NewFileCertificate(certFile, filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing key file was accepted at start")
	}
}
