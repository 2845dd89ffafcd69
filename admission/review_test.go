package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
)

// fixedQueues is a namespace lookup with fixed answers.
type fixedQueues map[string]string

func (f fixedQueues) NamespaceQueue(_ context.Context, ns string) (string, error) {
	q, ok := f[ns]
	if !ok {
		return "", fmt.Errorf("namespaces %q not found", ns)
	}
	return q, nil
}

func post(t *testing.T, url string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func answer(t *testing.T, b []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("response %s: %v", b, err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
		t.Fatalf("response is not an AdmissionReview with a response: %s", b)
	}
	return out.Response
}

func TestHTTPMutatesTheReplicaSetsPodFromTheAPIServersJSON(t *testing.T) {
	review, err := os.ReadFile("testdata/create-vgpu-pod.json")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewMux(NewPolicy(DefaultConfig()), fixedQueues{"team-a": "research"}, func() bool { return true }))
	defer srv.Close()

	code, b := post(t, srv.URL+PathMutate, review)
	if code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", code, b)
	}
	r := answer(t, b)
	if r.UID != "3f1c5a0e-9d0b-4a41-8f6e-1d2b2c3e4f50" || !r.Allowed || r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("response %+v", r)
	}
	if want := `[{"op":"add","path":"/spec/schedulerName","value":"volcano"},{"op":"add","path":"/metadata/annotations","value":{"scheduling.volcano.sh/queue-name":"research"}},` + regionOps(); string(r.Patch) != want {
		t.Errorf("patch %s, want %s", r.Patch, want)
	}

	// The validating webhook sees the pod as the API server does after mutation: the
	// default scheduler is refused there, the same pod routed is allowed.
	code, b = post(t, srv.URL+PathValidate, review)
	if r := answer(t, b); code != 200 || r.Allowed || r.Result.Code != 403 || !strings.Contains(r.Result.Message, `spec.schedulerName: "default-scheduler"`) {
		t.Errorf("validate before mutation: HTTP %d, %+v", code, r.Result)
	}
	routedReview := bytes.Replace(review, []byte(`"schedulerName": "default-scheduler"`), []byte(`"schedulerName": "volcano"`), 1)
	if r := answer(t, mustPost(t, srv.URL+PathValidate, routedReview)); !r.Allowed || len(r.Patch) != 0 {
		t.Errorf("validate after mutation: %+v", r)
	}
	// The validating webhook sees the name the API server generated.
	malformed := bytes.Replace(routedReview, []byte(`"labels"`), []byte(`"name": "infer-6b7c9d5f4-x2b8q", "annotations": {"tessera.io/numa-bind": "yes"}, "labels"`), 1)
	r = answer(t, mustPost(t, srv.URL+PathValidate, malformed))
	if want := `vgpu: task infer-6b7c9d5f4-x2b8q: invalid: annotation tessera.io/numa-bind: "yes", want true or false`; r.Allowed || r.Result.Message != want {
		t.Errorf("malformed annotation: %+v, want the message %q", r.Result, want)
	}
}

func mustPost(t *testing.T, url string, body []byte) []byte {
	t.Helper()
	code, b := post(t, url, body)
	if code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", code, b)
	}
	return b
}

func TestHTTPRefusesWhatIsNotAPodReview(t *testing.T) {
	review, err := os.ReadFile("testdata/create-vgpu-pod.json")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewMux(NewPolicy(DefaultConfig()), fixedQueues{}, func() bool { return false }))
	defer srv.Close()
	for _, c := range []struct {
		name, body, want string
	}{
		{"not JSON", "{", "bad AdmissionReview"},
		{"v1beta1", strings.Replace(string(review), "admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1), `apiVersion "admission.k8s.io/v1beta1"`},
		{"no request", `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}`, "no request"},
		{"a Secret", strings.Replace(string(review), `"resource": "pods"}`, `"resource": "secrets"}`, 1), "reviews pods only"},
	} {
		code, b := post(t, srv.URL+PathMutate, []byte(c.body))
		if code != http.StatusBadRequest || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: HTTP %d %s, want 400 with %q", c.name, code, b, c.want)
		}
	}
	// A namespace that cannot be read is the webhook's failure (500), said in the answer.
	r := answer(t, mustPost(t, srv.URL+PathMutate, review))
	if r.Allowed || r.Result.Code != 500 || !strings.Contains(r.Result.Message, "namespace team-a") {
		t.Errorf("unreadable namespace: %+v", r.Result)
	}
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the cache syncs: HTTP %d", resp.StatusCode)
	}
}

func TestServeAnswersOverTLSWithTheSelfMadeCertificate(t *testing.T) {
	kp, err := IssueSelfSigned([]string{"127.0.0.1", "tessera-admission.volcano-system.svc"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert := &Certificate{}
	if err := cert.Set(kp); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, addr, cert, NewMux(NewPolicy(DefaultConfig()), fixedQueues{}, func() bool { return true }))
	}()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(kp.CAPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	var resp *http.Response
	for i := 0; i < 50; i++ {
		if resp, err = client.Get("https://" + addr + "/healthz"); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("GET /healthz over TLS trusting the CA: %v", err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after shutdown: %v", err)
	}
}

// FuzzReview: whatever the API server (or anyone reaching the port) sends, the webhook
// answers without panicking, and an answer is a response to the request it got. A
// mutation's patch applies to the pod as the API server would send it, and gives a pod
// that did not use the region volume's name or path a region volume that every vGPU
// container passes the agent's check with.
func FuzzReview(f *testing.F) {
	review, err := os.ReadFile("testdata/create-vgpu-pod.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(review)
	f.Add(bytes.Replace(review, []byte(`"CREATE"`), []byte(`"UPDATE"`), 1))
	f.Add(bytes.Replace(review, []byte(`"8192"`), []byte(`"-3"`), 2))
	f.Add([]byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"x","resource":{"resource":"pods"},"object":{}}}`))
	sidecar, err := os.ReadFile("testdata/create-vgpu-pod-with-sidecar.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sidecar)
	f.Add(bytes.ReplaceAll(sidecar, []byte(`"cache"`), []byte(`"tessera-region"`)))
	f.Add(bytes.Replace(sidecar, []byte(`"/cache"`), []byte(`"/var/run/tessera-region/"`), 1))
	f.Add(bytes.Replace(review, []byte(`"labels"`), []byte(`"annotations": {}, "labels"`), 1))
	cfg := DefaultConfig()
	cfg.Limits = []Limit{{AllowedQoS: []api.QoSClass{api.QoSFixedShare}, MaxCores: 50, MaxMemoryMiB: 4096}}
	policy := NewPolicy(cfg)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, mutating := range []bool{true, false} {
			h := &Handler{Policy: policy, Namespaces: fixedQueues{"team-a": "q"}, Mutating: mutating}
			out, err := h.Review(context.Background(), body)
			if err != nil {
				if !errors.Is(err, errBadReview) {
					t.Fatalf("error %v is not a bad review", err)
				}
				continue
			}
			in, _ := DecodeReview(body)
			if out.Response == nil || out.Response.UID != in.Request.UID {
				t.Fatalf("response %+v does not answer request %s", out.Response, in.Request.UID)
			}
			if !out.Response.Allowed && (out.Response.Result == nil || out.Response.Result.Message == "") {
				t.Fatalf("refusal without a message: %+v", out.Response)
			}
			if out.Response.Patch != nil {
				var ops []PatchOp
				if err := json.Unmarshal(out.Response.Patch, &ops); err != nil || len(ops) == 0 {
					t.Fatalf("patch %s: %v", out.Response.Patch, err)
				}
				checkMutation(t, policy, in.Request.Object.Raw, ops)
			}
		}
	})
}

// checkMutation applies a mutation's patch to the pod in raw as the API server would
// send it (its own encoding of the decoded pod) and checks the region volume.
func checkMutation(t *testing.T, p *Policy, raw []byte, ops []PatchOp) {
	t.Helper()
	pod, err := decodePod(raw, "object")
	if err != nil {
		t.Fatalf("a pod that does not decode was patched: %v", err)
	}
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var after corev1.Pod
	if err := json.Unmarshal(applyPatch(t, doc, ops), &after); err != nil {
		t.Fatalf("the patched pod does not decode: %v", err)
	}
	cs := p.vgpuContainers(pod)
	names := map[string]bool{}
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		names[c.Name] = true
	}
	used := hasRegionVolume(pod)
	for _, pc := range cs {
		used = used || mountsRegion(pc.c) || overlay(pc) != ""
	}
	// Containers with one name (the API server refuses the pod) and more vGPU containers
	// than the largest volume the agent accepts holds are out of the claim.
	if used || len(names) != len(pod.Spec.InitContainers)+len(pod.Spec.Containers) ||
		int64(len(cs))*api.RegionBytesPerContainer > api.MaxRegionVolumeBytes {
		return
	}
	if why := p.regionRefusal(&after); why != "" {
		t.Fatalf("the patched pod is refused: %s", why)
	}
	for _, pc := range cs {
		if err := api.CheckRegionVolume(&after, pc.c.Name); err != nil {
			t.Fatalf("container %s: %v", pc.c.Name, err)
		}
	}
}
