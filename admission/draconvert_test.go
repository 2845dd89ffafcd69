package admission

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/tessera-gpu/tessera/api"
)

// fixedNamespaces answers namespaces' default queue and card API.
type fixedNamespaces map[string][2]string

func (f fixedNamespaces) NamespaceQueue(_ context.Context, ns string) (string, error) {
	v, ok := f[ns]
	if !ok {
		return "", errors.New("namespaces \"" + ns + "\" not found")
	}
	return v[0], nil
}

func (f fixedNamespaces) NamespaceCardAPI(ctx context.Context, ns string) (string, error) {
	if _, err := f.NamespaceQueue(ctx, ns); err != nil {
		return "", err
	}
	return f[ns][1], nil
}

// The namespaces of these tests: team-dra is opted in, team-a is not.
var draNamespaces = fixedNamespaces{"team-dra": {"research", api.CardAPIDRA}, "team-a": {"research", ""}}

// reviewIn is testdata's ReplicaSet pod (8192 MiB, 30 cores, the vGPU requests the API
// server's defaulting copied from the limits) under review in namespace, edited by edit.
func reviewIn(t *testing.T, namespace string, dryRun bool, edit func(*corev1.Pod)) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/create-vgpu-pod.json")
	if err != nil {
		t.Fatal(err)
	}
	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(in.Request.Object.Raw, &pod); err != nil {
		t.Fatal(err)
	}
	pod.Namespace, in.Request.Namespace, in.Request.DryRun = namespace, namespace, &dryRun
	if edit != nil {
		edit(&pod)
	}
	if in.Request.Object.Raw, err = json.Marshal(&pod); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func draServer(t *testing.T, cfg Config, client *fake.Clientset, opts ...MuxOption) *httptest.Server {
	t.Helper()
	if client != nil {
		opts = append(opts, WithClaimTemplates(&TemplateClient{Client: client.ResourceV1()}))
	}
	srv := httptest.NewServer(NewMux(NewPolicy(cfg), draNamespaces, func() bool { return true }, opts...))
	t.Cleanup(srv.Close)
	return srv
}

func draConfig() Config {
	c := DefaultConfig()
	c.DRAConversion.Enabled = true
	return c
}

func templates(t *testing.T, client *fake.Clientset, namespace string) []resourcev1.ResourceClaimTemplate {
	t.Helper()
	l, err := client.ResourceV1().ResourceClaimTemplates(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// A ReplicaSet's pod in an opted-in namespace comes back from the mutating webhook routed
// (volcano, the namespace's queue), without vGPU resources in its limits or requests,
// with a claim from the template of its shape, which the webhook made, and the region
// volume mounted in the converted container; no queue gate. A second pod of the shape
// reuses the template.
func TestHTTPConvertsAPodOfAnOptedInNamespace(t *testing.T) {
	enableDRAGates(t)
	client := fake.NewClientset()
	cfg := draConfig()
	cfg.QueueGate = true
	srv := draServer(t, cfg, client)
	for i := range 2 {
		_, pod := admit(t, srv.URL, reviewIn(t, "team-dra", false, nil))
		if pod.Spec.SchedulerName != "volcano" || pod.Annotations[PodQueueAnnotation] != "research" {
			t.Errorf("pod %d: scheduler %q, queue %q", i, pod.Spec.SchedulerName, pod.Annotations[PodQueueAnnotation])
		}
		if NewPolicy(cfg).IsVGPU(pod) {
			t.Errorf("pod %d still asks for vGPU resources: %+v", i, pod.Spec.Containers[0].Resources)
		}
		c := pod.Spec.Containers[0]
		if cpu := c.Resources.Requests[corev1.ResourceCPU]; cpu.String() != "500m" || len(c.Resources.Claims) != 1 || c.Resources.Claims[0].Name != "tessera-vgpu-0" {
			t.Errorf("pod %d: container resources %+v", i, c.Resources)
		}
		if len(pod.Spec.ResourceClaims) != 1 || *pod.Spec.ResourceClaims[0].ResourceClaimTemplateName != "tessera-vgpu-1x-8192mi-30c" {
			t.Errorf("pod %d: claims %+v", i, pod.Spec.ResourceClaims)
		}
		// The claim's limits name its region on the region volume, which the agent reads.
		if err := api.CheckRegionVolume(pod, c.Name); err != nil || len(pod.Spec.Volumes) != 1 || len(c.VolumeMounts) != 1 {
			t.Errorf("pod %d: volumes %+v, mounts %+v: a converted pod keeps its region volume: %v", i, pod.Spec.Volumes, c.VolumeMounts, err)
		}
		if len(pod.Spec.SchedulingGates) != 0 {
			t.Errorf("pod %d: gates %+v: a converted pod gets no queue gate", i, pod.Spec.SchedulingGates)
		}
	}
	got := templates(t, client, "team-dra")
	if len(got) != 1 || got[0].Name != "tessera-vgpu-1x-8192mi-30c" {
		t.Fatalf("templates %+v, want the one of the shape", got)
	}
	s := shapeOf(t, got[0])
	if s.memory != "8Gi" || s.cores != "30" || s.count != 1 {
		t.Errorf("template %+v", s)
	}
}

// A pod of a namespace that is not opted in gets exactly the answer the mutating
// Handler gives: routed, with its region volume.
func TestHTTPLeavesOtherNamespacesPodsToTheDevicePluginPath(t *testing.T) {
	client := fake.NewClientset()
	srv := draServer(t, draConfig(), client)
	plain := httptest.NewServer(NewMux(NewPolicy(draConfig()), fixedQueues{"team-a": "research"}, func() bool { return true }))
	defer plain.Close()
	review := reviewIn(t, "team-a", false, nil)
	got, want := answer(t, mustPost(t, srv.URL+PathMutate, review)), answer(t, mustPost(t, plain.URL+PathMutate, review))
	if string(got.Patch) != string(want.Patch) || got.Allowed != want.Allowed {
		t.Errorf("patch %s, want the Handler's %s", got.Patch, want.Patch)
	}
	if !strings.Contains(string(got.Patch), api.RegionVolumeName) {
		t.Errorf("patch %s has no region volume", got.Patch)
	}
	if n := len(templates(t, client, "team-a")); n != 0 {
		t.Errorf("%d templates made for a pod of the device-plugin path", n)
	}
	// The validating path and CPU-only pods are never converted.
	v := answer(t, mustPost(t, srv.URL+PathValidate, reviewIn(t, "team-dra", false, func(p *corev1.Pod) { p.Spec.SchedulerName = "volcano" })))
	if !v.Allowed || len(v.Patch) != 0 {
		t.Errorf("validating answer %+v", v)
	}
	cpu := answer(t, mustPost(t, srv.URL+PathMutate, reviewIn(t, "team-dra", false, func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	})))
	if !cpu.Allowed || len(cpu.Patch) != 0 {
		t.Errorf("CPU-only pod: %+v", cpu)
	}
}

// What the conversion cannot do, or the namespace's rules forbid, is refused at create
// with the reason, and nothing is made: the tenant's annotation takes no pod past its
// namespace's limits, a tenant's lookalike template is not used, and a dry run makes
// nothing.
func TestHTTPRefusesWhatItCannotConvertAndMakesNothing(t *testing.T) {
	enableDRAGates(t)
	limited := draConfig()
	limited.Limits = []Limit{{Namespace: "team-dra", MaxCores: 20}}
	optIn := draConfig()
	optIn.DRAConversion.PodOptIn = true
	for _, c := range []struct {
		name     string
		cfg      Config
		ns       string
		existing *resourcev1.ResourceClaimTemplate
		edit     func(*corev1.Pod)
		noClient bool
		code     int32
		want     string
	}{
		{name: "a converted pod beyond its namespace's limits", cfg: limited, ns: "team-dra", code: http.StatusForbidden,
			want: `namespace team-dra allows at most 20% of a card's cores (volcano.sh/vgpu-cores); container "server" asks 30%`},
		{name: "a pod of an opted-in namespace with a percentage", cfg: draConfig(), ns: "team-dra", code: http.StatusForbidden,
			edit: func(p *corev1.Pod) {
				for _, rl := range []corev1.ResourceList{p.Spec.Containers[0].Resources.Limits, p.Spec.Containers[0].Resources.Requests} {
					delete(rl, api.ResourceMemory)
					rl[api.ResourceMemoryPercentage] = rl[api.ResourceCores]
				}
			}, want: `memory-percentage: 30%: a percentage needs the card's size`},
		{name: "a pod asking for DRA nodes in a namespace that is not opted in", cfg: draConfig(), ns: "team-a", code: http.StatusForbidden,
			edit: func(p *corev1.Pod) { p.Annotations = map[string]string{api.AnnotationCardAPI: api.CardAPIDRA} },
			want: "draConversion.podOptIn is off"},
		{name: "a pod opted in by itself still meets its namespace's limits", cfg: func() Config {
			c := optIn
			c.Limits = []Limit{{Namespace: "team-a", MaxCards: 1, MaxCores: 10}}
			return c
		}(), ns: "team-a", code: http.StatusForbidden,
			edit: func(p *corev1.Pod) { p.Annotations = map[string]string{api.AnnotationCardAPI: api.CardAPIDRA} },
			want: `namespace team-a allows at most 10% of a card's cores`},
		{name: "a tenant's template under the conversion's name", cfg: draConfig(), ns: "team-dra", code: http.StatusForbidden,
			existing: &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "tessera-vgpu-1x-8192mi-30c", Namespace: "team-dra"},
				Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
					Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: api.DRADriver,
						AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}}},
			want: "ResourceClaimTemplate team-dra/tessera-vgpu-1x-8192mi-30c exists with a spec other than the conversion's"},
		{name: "a webhook started without a template client", cfg: draConfig(), ns: "team-dra", noClient: true,
			code: http.StatusInternalServerError, want: "without a ResourceClaimTemplate client"},
		{name: "a namespace the webhook cannot read", cfg: draConfig(), ns: "gone", code: http.StatusInternalServerError,
			want: `namespace gone: reading its tessera.io/card-api`},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := fake.NewClientset()
			if c.existing != nil {
				client = fake.NewClientset(c.existing)
			}
			var srv *httptest.Server
			if c.noClient {
				srv = draServer(t, c.cfg, nil)
			} else {
				srv = draServer(t, c.cfg, client)
			}
			r := answer(t, mustPost(t, srv.URL+PathMutate, reviewIn(t, c.ns, false, c.edit)))
			if r.Allowed || r.Result == nil || r.Result.Code != c.code || !strings.Contains(r.Result.Message, c.want) {
				t.Fatalf("answer %+v, want %d saying %q", r.Result, c.code, c.want)
			}
			if l := templates(t, client, c.ns); len(l) > 1 || (len(l) == 1 && c.existing == nil) {
				t.Errorf("templates made for a refused pod: %+v", l)
			}
		})
	}
	t.Run("a dry run is converted and makes nothing", func(t *testing.T) {
		client := fake.NewClientset()
		srv := draServer(t, draConfig(), client)
		r := answer(t, mustPost(t, srv.URL+PathMutate, reviewIn(t, "team-dra", true, nil)))
		if !r.Allowed || !strings.Contains(string(r.Patch), "tessera-vgpu-1x-8192mi-30c") {
			t.Fatalf("dry run answer %+v", r)
		}
		if l := templates(t, client, "team-dra"); len(l) != 0 {
			t.Errorf("a dry run made %+v", l)
		}
	})
}

func TestNamespaceCardAPIReadsTheCacheThenTheAPIServer(t *testing.T) {
	cached := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "old", Annotations: map[string]string{api.AnnotationCardAPI: "dra"}}}
	fresh := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "new", Annotations: map[string]string{api.AnnotationCardAPI: "device-plugin"}}}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := idx.Add(cached); err != nil {
		t.Fatal(err)
	}
	q := &ListerQueues{Lister: listerscorev1.NewNamespaceLister(idx), Client: fake.NewClientset(fresh).CoreV1()}
	for ns, want := range map[string]string{"old": "dra", "new": "device-plugin"} {
		if got, err := q.NamespaceCardAPI(context.Background(), ns); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", ns, got, err, want)
		}
	}
	if _, err := q.NamespaceCardAPI(context.Background(), "gone"); err == nil {
		t.Error("a namespace that exists nowhere has a card API")
	}
}
