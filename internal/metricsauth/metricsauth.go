// Package metricsauth puts Kubernetes delegated authentication and authorization in
// front of an HTTP endpoint such as /metrics, the way the Kubernetes components guard
// theirs: the caller's bearer token is checked with a TokenReview, and the user it names
// must be allowed the request's verb on its path as a non-resource URL (a
// SubjectAccessReview; for Prometheus, `get` on `/metrics`, which the chart's
// <release>-tessera-metrics-reader ClusterRole grants). Answers are cached, so a scrape
// every few seconds costs the API server one review per cache period, not one per
// scrape.
//
// The scheduler's and the node agent's /metrics name every tenant's namespaces, pods and
// card UUIDs; without this anyone who reaches the port reads them. The probes
// (/healthz, /readyz) stay open: the kubelet calls them without credentials.
package metricsauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Modes of the --metrics-auth style flags.
const (
	// ModeKubernetes checks every request but the public paths with a TokenReview and a
	// SubjectAccessReview.
	ModeKubernetes = "kubernetes"
	// ModeNone serves everything to anyone who reaches the port (the binaries' default,
	// for runs outside a cluster; the chart turns ModeKubernetes on).
	ModeNone = "none"
)

// ParseMode checks a mode flag's value.
func ParseMode(s string) (string, error) {
	switch s {
	case ModeKubernetes, ModeNone:
		return s, nil
	}
	return "", fmt.Errorf("metrics authentication %q, want %s or %s", s, ModeKubernetes, ModeNone)
}

// Cache periods of the delegated reviews. A token is reviewed again after TokenTTL; an
// allowed request after AllowTTL, a refused one after DenyTTL (short, so that a role
// just bound takes effect at the next scrapes).
const (
	TokenTTL = 2 * time.Minute
	AllowTTL = 2 * time.Minute
	DenyTTL  = 30 * time.Second
)

// Guard authenticates and authorizes requests.
type Guard struct {
	Authenticator authenticator.Request
	Authorizer    authorizer.Authorizer
}

// NewDelegating returns a Guard that asks the API server behind client: a TokenReview
// for the bearer token (no other credential is accepted, and no anonymous user) and a
// SubjectAccessReview for the request's non-resource URL, both cached. It needs
// `create` on tokenreviews.authentication.k8s.io and
// subjectaccessreviews.authorization.k8s.io, as the Kubernetes components' own
// delegated authentication does (k8s.io/apiserver's authenticatorfactory and
// authorizerfactory, whose webhook clients would link the API server's egress and
// tracing packages into the node agent; these are the same two reviews, asked with
// client-go, behind k8s.io/apiserver's token cache).
func NewDelegating(client kubernetes.Interface) *Guard {
	tokens := tokencache.New(&tokenReviewer{client: client}, false, TokenTTL, DenyTTL)
	return &Guard{
		Authenticator: group.NewAuthenticatedGroupAdder(bearertoken.New(tokens)),
		Authorizer:    &accessReviewer{client: client, cache: utilcache.NewLRUExpireCache(1024)},
	}
}

// tokenReviewer authenticates a token with a TokenReview (the API server's audiences).
type tokenReviewer struct{ client kubernetes.Interface }

func (t *tokenReviewer) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tr, err := t.client.AuthenticationV1().TokenReviews().Create(ctx,
		&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, false, fmt.Errorf("TokenReview: %w", err)
	}
	if !tr.Status.Authenticated {
		if tr.Status.Error != "" {
			return nil, false, errors.New(tr.Status.Error)
		}
		return nil, false, nil
	}
	u := tr.Status.User
	extra := make(map[string][]string, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = v
	}
	return &authenticator.Response{Audiences: tr.Status.Audiences,
		User: &user.DefaultInfo{Name: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra}}, true, nil
}

// accessReviewer authorizes a non-resource request with a SubjectAccessReview, and keeps
// each answer AllowTTL (allowed) or DenyTTL (not).
type accessReviewer struct {
	client kubernetes.Interface
	cache  *utilcache.LRUExpireCache
}

func (a *accessReviewer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	u := attrs.GetUser()
	spec := authzv1.SubjectAccessReviewSpec{User: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(),
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: attrs.GetPath(), Verb: attrs.GetVerb()}}
	if len(u.GetExtra()) > 0 {
		spec.Extra = map[string]authzv1.ExtraValue{}
		for k, v := range u.GetExtra() {
			spec.Extra[k] = v
		}
	}
	key, err := json.Marshal(spec)
	if err != nil {
		return authorizer.DecisionNoOpinion, "", err
	}
	if v, ok := a.cache.Get(string(key)); ok {
		d := v.(decision)
		return d.decision, d.reason, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sar, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return authorizer.DecisionNoOpinion, "", fmt.Errorf("SubjectAccessReview: %w", err)
	}
	d := decision{decision: authorizer.DecisionNoOpinion, reason: sar.Status.Reason}
	ttl := DenyTTL
	switch {
	case sar.Status.Allowed:
		d.decision, ttl = authorizer.DecisionAllow, AllowTTL
	case sar.Status.Denied:
		d.decision = authorizer.DecisionDeny
	}
	if sar.Status.EvaluationError != "" && d.decision != authorizer.DecisionAllow {
		return d.decision, d.reason, errors.New(sar.Status.EvaluationError)
	}
	a.cache.Add(string(key), d, ttl)
	return d.decision, d.reason, nil
}

type decision struct {
	decision authorizer.Decision
	reason   string
}

// Wrap returns a handler that serves next only to authenticated callers allowed the
// request: 401 without a valid bearer token, 403 when the user may not, for example,
// `get` the non-resource URL `/metrics`, 500 when the API server cannot answer. The
// Authorization header is removed before next sees the request.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, ok, err := g.Authenticator.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				klog.V(3).InfoS("Metrics request not authenticated", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="tessera-metrics"`)
			http.Error(w, "Unauthorized: a bearer token the API server accepts (TokenReview) is required", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{User: resp.User, Verb: verb(r.Method), Path: r.URL.Path, ResourceRequest: false}
		decision, reason, err := g.Authorizer.Authorize(r.Context(), attrs)
		if err != nil {
			klog.ErrorS(err, "Metrics request not authorized: the SubjectAccessReview failed", "user", resp.User.GetName(), "path", r.URL.Path)
			http.Error(w, "Internal Server Error: authorization (SubjectAccessReview) failed", http.StatusInternalServerError)
			return
		}
		if decision != authorizer.DecisionAllow {
			klog.V(3).InfoS("Metrics request forbidden", "user", resp.User.GetName(), "verb", attrs.Verb, "path", r.URL.Path, "reason", reason)
			http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s non-resource URL %s", resp.User.GetName(), attrs.Verb, r.URL.Path),
				http.StatusForbidden)
			return
		}
		r = r.Clone(r.Context())
		r.Header.Del("Authorization")
		next.ServeHTTP(w, r)
	})
}

// verb maps an HTTP method to a non-resource-URL verb, as the API server does.
func verb(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		return "get"
	case http.MethodPost:
		return "post"
	case http.MethodPut:
		return "put"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(method)
}

// Handler serves backend: the paths in public to anyone (the probes), everything else
// through the guard. A nil guard serves everything to anyone (ModeNone).
func Handler(g *Guard, backend http.Handler, public ...string) http.Handler {
	if g == nil {
		return backend
	}
	guarded := g.Wrap(backend)
	open := map[string]bool{}
	for _, p := range public {
		open[p] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if open[r.URL.Path] {
			backend.ServeHTTP(w, r)
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

// Proxy forwards requests to the HTTP server that dial reaches (any host in the URL;
// dial decides where the connection goes), for servers whose handler cannot be wrapped
// in-process: Volcano's metrics server, or the node agent's, on a loopback address or
// a PipeListener.
func Proxy(dial func(ctx context.Context) (net.Conn, error)) http.Handler {
	target := &url.URL{Scheme: "http", Host: "backend"}
	p := httputil.NewSingleHostReverseProxy(target)
	p.Transport = &http.Transport{
		DialContext:        func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConns:       4,
		IdleConnTimeout:    90 * time.Second,
		DisableCompression: true, // pass the caller's Accept-Encoding and the backend's encoding through
	}
	p.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		klog.V(2).InfoS("Metrics backend unavailable", "path", r.URL.Path, "err", err)
		http.Error(w, "Bad Gateway: the metrics server behind this endpoint does not answer", http.StatusBadGateway)
	}
	return p
}

// DialTCP dials addr for Proxy.
func DialTCP(addr string) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

// CheckLoopback reports an error unless addr ("host:port") listens on a loopback
// address only: the unguarded server behind a Proxy must not be reachable from outside
// the pod.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("address %q is reachable from outside the pod: bind it to 127.0.0.1 when a guarded proxy serves it", addr)
}

// Serve serves h on addr until ctx ends.
func Serve(ctx context.Context, addr string, h http.Handler) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	return ServeListener(ctx, lis, h)
}

// ServeListener serves h on lis until ctx ends.
func ServeListener(ctx context.Context, lis net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// PipeListener is an in-memory net.Listener: an HTTP server serves on it, and Dial
// connects to it, without a port anyone else could reach.
type PipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewPipeListener returns an open PipeListener.
func NewPipeListener() *PipeListener {
	return &PipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept implements net.Listener.
func (l *PipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *PipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener.
func (l *PipeListener) Addr() net.Addr { return pipeAddr{} }

// Dial connects to the server accepting on l.
func (l *PipeListener) Dial(ctx context.Context) (net.Conn, error) {
	server, client := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		server.Close()
		client.Close()
		return nil, net.ErrClosed
	case <-ctx.Done():
		server.Close()
		client.Close()
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "in-memory" }
