package admission

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/tessera-gpu/tessera/api"
)

// claimObjects are team-a's template "share-4g" (a share of class vgpu.tessera.io) and
// claim "rdma" (a NIC of another driver), which claimsPod names.
func claimObjects() []runtime.Object {
	spec := func(class string) resourcev1.ResourceClaimSpec {
		return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
			{Name: "dev", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}}}}
	}
	return []runtime.Object{
		&resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "share-4g"},
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: spec(api.DRADriver)}},
		&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "rdma"}, Spec: spec("nic.example.com")},
	}
}

// claimReview is the AdmissionReview of pod being created, as the API server posts it.
func claimReview(t *testing.T, pod *corev1.Pod, dryRun bool) []byte {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	in := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "r-1", Operation: admissionv1.Create, Namespace: pod.Namespace, Name: pod.Name,
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Object: runtime.RawExtension{Raw: raw}, DryRun: &dryRun}}
	b, err := json.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func claimServer(t *testing.T, client *fake.Clientset) *httptest.Server {
	t.Helper()
	var opts []MuxOption
	if client != nil {
		opts = append(opts, WithClaimSpecs(&ClaimClient{Client: client.ResourceV1()}))
	}
	srv := httptest.NewServer(NewMux(NewPolicy(DefaultConfig()), fixedQueues{"team-a": "research"}, func() bool { return true }, opts...))
	t.Cleanup(srv.Close)
	return srv
}

// A pod that asks for a card only through a claim template of the vGPU class leaves the
// mutating webhook with the region volume mounted in the containers that use the claim
// (the init container too), the NIC-only container untouched and nothing else changed
// (no scheduler, queue or gate: the pod has no vGPU resources); the validating webhook
// admits it. A pod whose claims are all of another driver is not patched at all.
func TestHTTPGivesClaimPodsTheirRegionVolume(t *testing.T) {
	srv := claimServer(t, fake.NewClientset(claimObjects()...))
	before := claimsPod()
	validate, after := admit(t, srv.URL, claimReview(t, before, false))
	for _, name := range []string{"warm", "main"} {
		if err := api.CheckRegionVolume(after, name); err != nil {
			t.Errorf("container %s: %v", name, err)
		}
	}
	if !equality.Semantic.DeepEqual(containerNamed(before, "nic"), containerNamed(after, "nic")) {
		t.Errorf("the NIC-only container changed: %+v", containerNamed(after, "nic"))
	}
	if v := after.Spec.Volumes; len(v) != 1 || v[0].EmptyDir == nil || v[0].EmptyDir.SizeLimit.Value() != 2*api.RegionBytesPerContainer {
		t.Errorf("volumes %+v, want the region volume for two containers", v)
	}
	after.Spec.Volumes, containerNamed(after, "warm").VolumeMounts, containerNamed(after, "main").VolumeMounts = nil, nil, nil
	if !equality.Semantic.DeepEqual(before, after) {
		t.Errorf("the pod changed beyond its region volume:\n%+v\nwant\n%+v", after, before)
	}
	if r := answer(t, mustPost(t, srv.URL+PathValidate, validate)); !r.Allowed {
		t.Errorf("the mutated pod was refused: %+v", r.Result)
	}

	nicOnly := claimsPod()
	nicOnly.Spec.ResourceClaims = nicOnly.Spec.ResourceClaims[1:]
	nicOnly.Spec.InitContainers[0].Resources.Claims = nicOnly.Spec.InitContainers[0].Resources.Claims[:1]
	nicOnly.Spec.Containers[0].Resources.Claims = nil
	if r := answer(t, mustPost(t, srv.URL+PathMutate, claimReview(t, nicOnly, false))); !r.Allowed || len(r.Patch) != 0 {
		t.Errorf("a pod of another driver's claim: allowed %v, patch %s", r.Allowed, r.Patch)
	}
}

// A claim pod that brings its own disk-backed volume under the reserved name keeps it
// through the mutating webhook, and the validating webhook refuses it with a 403 naming
// the field, as it refuses a device-plugin pod.
func TestHTTPRefusesAClaimPodWithItsOwnRegionVolume(t *testing.T) {
	srv := claimServer(t, fake.NewClientset(claimObjects()...))
	pod := claimsPod()
	pod.Spec.Volumes = []corev1.Volume{{Name: api.RegionVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	validate, after := admit(t, srv.URL, claimReview(t, pod, false))
	if v := after.Spec.Volumes; len(v) != 1 || v[0].EmptyDir.Medium != "" {
		t.Errorf("the pod's own volume was patched: %+v", v)
	}
	r := answer(t, mustPost(t, srv.URL+PathValidate, validate))
	want := `volume "tessera-region" is reserved for Tessera's accounting region: spec.volumes[0] ("tessera-region").emptyDir.medium is "", want "Memory"`
	if r.Allowed || r.Result == nil || r.Result.Code != http.StatusForbidden || r.Result.Message != want {
		t.Errorf("answer %+v, want a 403 saying %q", r.Result, want)
	}
}

// A claim pod whose claims' class cannot be read (a template not created yet, an API
// server that does not answer, a webhook started without a reader) is admitted without
// the region volume, with a warning naming the entry: refusing it would hold back every
// driver's claim pods while the API server misbehaves, and without the volume a claim
// only loses its usage series (the agent keeps its region in /dev/shm). On a dry run, a
// missing template named as the conversion names its templates is the conversion's.
func TestHTTPAdmitsAClaimPodWhoseClassCannotBeReadWithAWarning(t *testing.T) {
	failing := fake.NewClientset(claimObjects()...)
	failing.PrependReactor("get", "resourceclaimtemplates", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcdserver: request timed out")
	})
	missing := claimsPod()
	missing.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To("share-8g")
	for _, c := range []struct {
		name   string
		client *fake.Clientset
		pod    *corev1.Pod
		says   string
	}{
		{"a template not created yet", fake.NewClientset(claimObjects()...), missing,
			`spec.resourceClaims[0] ("gpu"): ResourceClaimTemplate team-a/share-8g does not exist yet`},
		{"an API server that does not answer", failing, claimsPod(),
			`spec.resourceClaims[0] ("gpu"): ResourceClaimTemplate team-a/share-4g: reading its device class: etcdserver: request timed out`},
		{"no reader", nil, claimsPod(), errNoClaimReader.Error()},
	} {
		srv := claimServer(t, c.client)
		for _, path := range []string{PathMutate, PathValidate} {
			r := answer(t, mustPost(t, srv.URL+path, claimReview(t, c.pod, false)))
			if !r.Allowed || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], c.says) {
				t.Errorf("%s, %s: allowed %t, warnings %q, want allowed with a warning saying %q", c.name, path, r.Allowed, r.Warnings, c.says)
			}
			if path == PathMutate && len(r.Patch) > 0 && strings.Contains(string(r.Patch), api.RegionVolumeName) {
				t.Errorf("%s: patched in the region volume %s although the class is unknown", c.name, r.Patch)
			}
		}
	}

	srv := claimServer(t, fake.NewClientset(claimObjects()...))
	converted := claimsPod()
	converted.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To(ClaimTemplatePrefix + "1x-4096mi-30c")
	_, after := admit(t, srv.URL, claimReview(t, converted, true))
	if err := api.CheckRegionVolume(after, "main"); err != nil {
		t.Errorf("dry run of a converted pod: %v", err)
	}
}

// The API server sends the webhook every vGPU pod, and a pod that names claims when it is
// created: the match condition, evaluated with CEL over the pod as JSON (as the API server
// evaluates it), is true for those, false for a CPU pod, a pod whose claim list is empty
// and an update of a claim pod.
func TestMatchExpressionSendsPodsThatNameClaims(t *testing.T) {
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType), cel.Variable("request", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(MatchExpression(api.DefaultResourceNames()))
	if iss.Err() != nil {
		t.Fatal(iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	vgpu := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{api.ResourceNumber: resource.MustParse("1")}}}}}}
	cpu := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	for _, c := range []struct {
		name string
		op   string
		pod  *corev1.Pod
		want bool
	}{
		{"a vGPU pod created", "CREATE", vgpu, true},
		{"a vGPU pod updated", "UPDATE", vgpu, true},
		{"a claim pod created", "CREATE", claimsPod(), true},
		{"a claim pod updated", "UPDATE", claimsPod(), false},
		{"a CPU pod", "CREATE", cpu, false},
		{"a pod with an empty claim list", "CREATE", &corev1.Pod{Spec: corev1.PodSpec{Containers: cpu.Spec.Containers, ResourceClaims: []corev1.PodResourceClaim{}}}, false},
	} {
		b, err := json.Marshal(c.pod)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := json.Unmarshal(b, &obj); err != nil {
			t.Fatal(err)
		}
		out, _, err := prg.Eval(map[string]any{"object": obj, "request": map[string]any{"operation": c.op}})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got, _ := out.Value().(bool); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
