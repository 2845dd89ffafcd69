package agent

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// readiness is what /readyz answers: ready once the kubelet has accepted the plugin's
// registration, otherwise the reason the agent does not serve yet.
type readiness struct {
	mu     sync.Mutex
	reason string
}

func newReadiness() *readiness { return &readiness{reason: "starting"} }

func (r *readiness) notReady(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reason != reason {
		klog.V(2).InfoS("Not ready", "reason", reason)
	}
	r.reason = reason
}

func (r *readiness) ready() { r.notReady("") }

func (r *readiness) get() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reason
}

func (r *readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if reason := r.get(); reason != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %s\n", reason)
		return
	}
	fmt.Fprintln(w, "ok")
}

// serveHTTP serves /metrics, /healthz (the process answers) and /readyz (readiness) on
// addr or lis, from the start of the agent: the probes answer while it still waits for
// another device plugin to leave the node. No address and no listener: nothing is served.
func serveHTTP(reg *prometheus.Registry, ready *readiness, addr string, lis net.Listener) (func(), error) {
	if lis == nil {
		if addr == "" {
			return func() {}, nil
		}
		var err error
		if lis, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("listen %s: %w", addr, err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("/readyz", ready)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Metrics and probe server stopped")
		}
	}()
	return func() { _ = srv.Close() }, nil
}
