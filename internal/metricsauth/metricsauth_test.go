package metricsauth

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// fakeAuthn knows two tokens: "reader" (bound to the metrics-reader role) and "tenant".
type fakeAuthn struct{}

func (fakeAuthn) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, false, nil
	}
	switch tok {
	case "reader":
		return &authenticator.Response{User: &user.DefaultInfo{Name: "system:serviceaccount:monitoring:prometheus"}}, true, nil
	case "tenant":
		return &authenticator.Response{User: &user.DefaultInfo{Name: "system:serviceaccount:team-a:default"}}, true, nil
	}
	return nil, false, nil
}

// fakeAuthz allows Prometheus to get /metrics, nothing else, and records what it was asked.
type fakeAuthz struct{ asked []authorizer.Attributes }

func (f *fakeAuthz) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	f.asked = append(f.asked, a)
	if a.GetUser().GetName() == "system:serviceaccount:monitoring:prometheus" && a.GetVerb() == "get" &&
		a.GetPath() == "/metrics" && !a.IsResourceRequest() {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no RBAC rule", nil
}

// backend answers every path, and says whether it saw the caller's token.
func backend() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			http.Error(w, "token leaked to the backend", http.StatusTeapot)
			return
		}
		io.WriteString(w, "served "+r.URL.Path)
	})
}

func get(t *testing.T, h http.Handler, path, token string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

func TestMetricsNeedATokenAndPermissionProbesDoNot(t *testing.T) {
	authz := &fakeAuthz{}
	h := Handler(&Guard{Authenticator: fakeAuthn{}, Authorizer: authz}, backend(), "/healthz", "/readyz")
	for _, c := range []struct {
		path, token string
		code        int
	}{
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "forged", http.StatusUnauthorized},
		{"/metrics", "tenant", http.StatusForbidden},
		{"/metrics", "reader", http.StatusOK},
		{"/debug/pprof/", "reader", http.StatusForbidden}, // /metrics get does not reach other paths
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusOK},
	} {
		code, body := get(t, h, c.path, c.token)
		if code != c.code {
			t.Errorf("GET %s with token %q = %d %q, want %d", c.path, c.token, code, body, c.code)
		}
	}
	if code, body := get(t, h, "/metrics", "tenant"); !strings.Contains(body, "system:serviceaccount:team-a:default") ||
		!strings.Contains(body, "get non-resource URL /metrics") {
		t.Errorf("403 body %d %q does not say who may not do what", code, body)
	}
	for _, a := range authz.asked {
		if a.IsResourceRequest() || a.GetVerb() != "get" {
			t.Errorf("authorizer asked %+v, want a non-resource get", a)
		}
	}
	if w := httptest.NewRecorder(); true {
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("401 without a WWW-Authenticate: Bearer challenge: %v", w.Header())
		}
	}
}

func TestModeNoneServesEveryone(t *testing.T) {
	if code, _ := get(t, Handler(nil, backend(), "/healthz"), "/metrics", ""); code != http.StatusOK {
		t.Errorf("without a guard /metrics = %d, want 200", code)
	}
	for _, ok := range []string{ModeKubernetes, ModeNone} {
		if _, err := ParseMode(ok); err != nil {
			t.Errorf("ParseMode(%q): %v", ok, err)
		}
	}
	if _, err := ParseMode("tls"); err == nil {
		t.Error("ParseMode accepts an unknown mode")
	}
}

// The proxy in front of a server that cannot be wrapped in-process (Volcano's, the
// agent's): an in-memory listener, the token stripped, the probe open.
func TestTheProxyGuardsAnInMemoryBackend(t *testing.T) {
	lis := NewPipeListener()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = ServeListener(ctx, lis, backend()) }()
	front := httptest.NewServer(Handler(&Guard{Authenticator: fakeAuthn{}, Authorizer: &fakeAuthz{}}, Proxy(lis.Dial), "/healthz"))
	defer front.Close()
	do := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, front.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do("/metrics", "reader"); code != http.StatusOK || body != "served /metrics" {
		t.Errorf("proxied /metrics = %d %q", code, body)
	}
	if code, _ := do("/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("proxied /metrics without a token = %d", code)
	}
	if code, _ := do("/healthz", ""); code != http.StatusOK {
		t.Errorf("proxied /healthz = %d", code)
	}
	cancel() // the backend server stops, as the agent's does when it exits
	lis.Close()
	deadline := time.Now().Add(5 * time.Second)
	for code, _ := do("/healthz", ""); code != http.StatusBadGateway; code, _ = do("/healthz", "") {
		if time.Now().After(deadline) {
			t.Fatalf("/healthz with the backend gone = %d, want 502 (the chart's cleanup container waits for it)", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCheckLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:8081": true, "[::1]:8081": true, "localhost:1": true,
		":8081": false, "0.0.0.0:8081": false, "10.0.0.1:80": false, "nonsense": false} {
		if err := CheckLoopback(addr); (err == nil) != ok {
			t.Errorf("CheckLoopback(%q) = %v", addr, err)
		}
	}
}

// fakeAPIServer answers TokenReviews and SubjectAccessReviews as a real API server
// would for one token bound to the metrics-reader role, and counts them.
type fakeAPIServer struct{ tokenReviews, accessReviews atomic.Int32 }

func (f *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		f.tokenReviews.Add(1)
		var tr authnv1.TokenReview
		decode(r, &tr)
		if tr.Spec.Token == "prometheus-token" {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true,
				User: authnv1.UserInfo{Username: "system:serviceaccount:monitoring:prometheus", Groups: []string{"system:serviceaccounts"}}}
		}
		tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
		_ = json.NewEncoder(w).Encode(&tr)
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		f.accessReviews.Add(1)
		var sar authzv1.SubjectAccessReview
		decode(r, &sar)
		nr := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "system:serviceaccount:monitoring:prometheus" && sar.Spec.ResourceAttributes == nil &&
			nr != nil && nr.Path == "/metrics" && nr.Verb == "get"
		sar.APIVersion, sar.Kind = "authorization.k8s.io/v1", "SubjectAccessReview"
		_ = json.NewEncoder(w).Encode(&sar)
	default:
		http.NotFound(w, r)
	}
}

// decode reads a request body in whichever encoding client-go sent (protobuf by default
// for built-in types, as in production).
func decode(r *http.Request, into runtime.Object) {
	b, _ := io.ReadAll(r.Body)
	if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(b, nil, into); err != nil {
		panic(fmt.Sprintf("decode %s: %v", r.Header.Get("Content-Type"), err))
	}
}

// NewDelegating asks the API server (TokenReview, SubjectAccessReview) and caches both
// answers: ten scrapes cost one review of each.
func TestDelegatingReviewsAreAskedOnceAndCached(t *testing.T) {
	api := &fakeAPIServer{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	h := Handler(NewDelegating(client), backend(), "/healthz")
	for i := 0; i < 10; i++ {
		if code, body := get(t, h, "/metrics", "prometheus-token"); code != http.StatusOK {
			t.Fatalf("scrape %d = %d %q", i, code, body)
		}
	}
	if n, m := api.tokenReviews.Load(), api.accessReviews.Load(); n != 1 || m != 1 {
		t.Errorf("10 scrapes made %d TokenReviews and %d SubjectAccessReviews, want 1 and 1 (cached)", n, m)
	}
	if code, _ := get(t, h, "/metrics", "stolen-token"); code != http.StatusUnauthorized {
		t.Errorf("unknown token = %d, want 401", code)
	}
	if code, _ := get(t, h, "/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("no token = %d, want 401", code)
	}
	if code, _ := get(t, h, "/debug/pprof/profile", "prometheus-token"); code != http.StatusForbidden {
		t.Errorf("pprof with a metrics-only token = %d, want 403", code)
	}
	if code, _ := get(t, h, "/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", code)
	}
}
