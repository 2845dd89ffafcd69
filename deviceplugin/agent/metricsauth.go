package agent

import (
	"context"
	"net"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/internal/metricsauth"
)

// GuardMetrics serves address through Kubernetes authentication and authorization: a
// bearer token the API server authenticates (TokenReview) whose user may get the
// non-resource URL /metrics (SubjectAccessReview); /healthz and /readyz stay open. It
// returns the in-memory listener the agent serves its endpoints on (Deps.MetricsListener);
// the guard stops with ctx.
func GuardMetrics(ctx context.Context, address string, client kubernetes.Interface) net.Listener {
	inner := metricsauth.NewPipeListener()
	h := metricsauth.Handler(metricsauth.NewDelegating(client), metricsauth.Proxy(inner.Dial), "/healthz", "/readyz")
	go func() {
		if err := metricsauth.Serve(ctx, address, h); err != nil {
			klog.ErrorS(err, "Metrics and probe endpoint unavailable")
		}
	}()
	return inner
}
