package admission

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
)

// MuxOption adds what a configured feature needs to NewMux.
type MuxOption func(*muxOptions)

type muxOptions struct {
	templates ClaimTemplates
	claims    ClaimSpecs
}

// WithClaimTemplates gives the DRA conversion (draConversion) the client it makes the
// claims' templates with; without it, pods to convert are refused with the reason.
func WithClaimTemplates(t ClaimTemplates) MuxOption {
	return func(o *muxOptions) { o.templates = t }
}

// WithClaimSpecs gives both webhooks the reader of the claims and claim templates that
// pods name (claims.go); without it, a pod being created that names claims is refused
// with the reason.
func WithClaimSpecs(s ClaimSpecs) MuxOption {
	return func(o *muxOptions) { o.claims = s }
}

// NewMux routes the two webhooks and the health endpoints the kubelet probes. Where ns
// also tells namespaces' card API (ListerQueues does), the mutating path converts the
// pods sent to DRA nodes, or refuses them with draConversion off (draconvert.go).
func NewMux(p *Policy, ns NamespaceQueues, ready func() bool, opts ...MuxOption) *http.ServeMux {
	var o muxOptions
	for _, opt := range opts {
		opt(&o)
	}
	mux := http.NewServeMux()
	mutate := &Handler{Policy: p, Namespaces: ns, Claims: o.claims, Mutating: true}
	if cardAPIs, ok := ns.(NamespaceCardAPIs); ok {
		mux.Handle(PathMutate, &Converter{Mutate: mutate, CardAPIs: cardAPIs, Templates: o.templates})
	} else {
		mux.Handle(PathMutate, mutate)
	}
	mux.Handle(PathValidate, &Handler{Policy: p, Namespaces: ns, Claims: o.claims})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "namespace cache not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

// Serve answers over TLS on addr until ctx ends, then drains for up to five seconds.
func Serve(ctx context.Context, addr string, cert *Certificate, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cert.GetCertificate}}
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServeTLS("", "") }()
	klog.InfoS("Serving the admission webhooks", "address", addr, "paths", []string{PathMutate, PathValidate})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ListerQueues reads namespaces' default queues from an informer's lister, asking the
// API server for a namespace the cache has not seen yet (one created a moment ago).
type ListerQueues struct {
	Lister listerscorev1.NamespaceLister
	Client corev1client.NamespacesGetter
}

// NamespaceQueue implements NamespaceQueues.
func (l *ListerQueues) NamespaceQueue(ctx context.Context, namespace string) (string, error) {
	ns, err := l.Lister.Get(namespace)
	if apierrors.IsNotFound(err) {
		ns, err = l.Client.Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	}
	if err != nil {
		return "", err
	}
	return ns.Annotations[PodQueueAnnotation], nil
}
