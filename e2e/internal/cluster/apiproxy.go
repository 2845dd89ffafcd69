package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The scheduler reaches kube-apiserver through a reverse proxy in the harness, so a
// scenario can hold its binds: with BindGate set, the first binds of a namespace go
// through and the later ones wait in the proxy. A scheduler killed meanwhile takes its
// waiting binds with it (they never reach the API server), which puts the kill between
// two binds of one gang deterministically. Everything else is passed on unchanged.

// bindGate decides which pods/binding requests the proxy forwards.
type bindGate struct {
	mu        sync.Mutex
	namespace string // gated namespace; "" lets everything through
	pass      int    // binds of namespace still let through
	open      chan struct{}
	held      int // binds waiting now
	dropped   int // binds whose client went away while they waited
}

// admit returns once the bind may be forwarded (true) or its client is gone (false).
func (g *bindGate) admit(ctx context.Context, namespace string) bool {
	g.mu.Lock()
	if g.namespace == "" || namespace != g.namespace || g.pass > 0 {
		if g.namespace != "" && namespace == g.namespace {
			g.pass--
		}
		g.mu.Unlock()
		return true
	}
	g.held++
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		g.mu.Lock()
		g.held--
		g.mu.Unlock()
		return true
	case <-ctx.Done():
		g.mu.Lock()
		g.held--
		g.dropped++
		g.mu.Unlock()
		return false
	}
}

// BindGate lets the next pass binds of pods in namespace reach the API server and holds
// every later one until OpenBinds, or drops it when the scheduler that sent it is gone.
func (c *Cluster) BindGate(namespace string, pass int) {
	g := c.binds
	g.mu.Lock()
	defer g.mu.Unlock()
	g.namespace, g.pass, g.held, g.dropped = namespace, pass, 0, 0
	g.open = make(chan struct{})
}

// OpenBinds releases the held binds and lets every later one through.
func (c *Cluster) OpenBinds() {
	g := c.binds
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.namespace != "" {
		close(g.open)
	}
	g.namespace = ""
}

// HeldBinds says how many binds wait in the proxy now and how many were dropped because
// their client went away, since the last BindGate.
func (c *Cluster) HeldBinds() (held, dropped int) {
	g := c.binds
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held, g.dropped
}

// bindingNamespace returns the namespace of a pods/binding create request.
func bindingNamespace(r *http.Request) (string, bool) {
	if r.Method != http.MethodPost {
		return "", false
	}
	// /api/v1/namespaces/<ns>/pods/<name>/binding
	p := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(p) != 7 || p[0] != "api" || p[1] != "v1" || p[2] != "namespaces" || p[4] != "pods" || p[6] != "binding" {
		return "", false
	}
	return p[3], true
}

// startAPIProxy serves a TLS reverse proxy to kube-apiserver on a loopback port, with the
// webhook's serving certificate for 127.0.0.1, logging to logs/api-proxy.log, and writes
// kubeconfig-scheduler for it.
func (c *Cluster) startAPIProxy() error {
	target, err := url.Parse(c.Rest.Host)
	if err != nil {
		return err
	}
	dir := filepath.Join(c.Opts.RunDir, "webhook")
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return fmt.Errorf("proxy certificate: %w", err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true,
		Proxy: nil, MaxIdleConnsPerHost: 100}
	f, err := os.OpenFile(filepath.Join(c.logDir, "api-proxy.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	logger := log.New(f, "", log.LstdFlags|log.Lmicroseconds)
	rp.FlushInterval = -1 // watches stream
	rp.ErrorLog = logger
	c.binds = &bindGate{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ns, ok := bindingNamespace(r); ok && !c.binds.admit(r.Context(), ns) {
			logger.Printf("dropped a held bind, its client went away: %s", r.URL.Path)
			return
		}
		rp.ServeHTTP(w, r)
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Close()
		return err
	}
	srv := &http.Server{Handler: handler, ErrorLog: logger,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}}
	go func() {
		if err := srv.ServeTLS(lis, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Printf("proxy stopped: %v", err)
		}
	}()
	logger.Printf("proxy on %s for %s", lis.Addr(), target)
	c.mu.Lock()
	c.closers = append(c.closers, func() { _ = srv.Close(); f.Close() })
	c.mu.Unlock()
	path := filepath.Join(c.Opts.RunDir, "kubeconfig-scheduler")
	if c.Opts.ChartDir != "" {
		if err := c.accountKubeconfig(context.Background(), path, "https://"+lis.Addr().String(), schedulerAccount, nil); err != nil {
			return err
		}
		c.schedKubeconfig = path
		return nil
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["tessera-e2e"] = &clientcmdapi.Cluster{Server: "https://" + lis.Addr().String(), InsecureSkipTLSVerify: true}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: c.Rest.BearerToken}
	kc.Contexts["tessera-e2e"] = &clientcmdapi.Context{Cluster: "tessera-e2e", AuthInfo: "admin"}
	kc.CurrentContext = "tessera-e2e"
	c.schedKubeconfig = path
	return clientcmd.WriteToFile(*kc, c.schedKubeconfig)
}
