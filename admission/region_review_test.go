package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/tessera-gpu/tessera/api"
)

// admit does what the API server does with a pod being created: it posts the review to
// the mutating webhook, applies the patch to the object, and returns the review of the
// mutated pod (for the validating webhook) and the mutated pod.
func admit(t *testing.T, url string, review []byte) ([]byte, *corev1.Pod) {
	t.Helper()
	r := answer(t, mustPost(t, url+PathMutate, review))
	if !r.Allowed {
		t.Fatalf("mutation refused: %+v", r.Result)
	}
	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(review, &in); err != nil {
		t.Fatal(err)
	}
	if len(r.Patch) > 0 {
		if r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch {
			t.Fatalf("patch type %v", r.PatchType)
		}
		patch, err := jsonpatch.DecodePatch(r.Patch)
		if err != nil {
			t.Fatalf("patch %s: %v", r.Patch, err)
		}
		if in.Request.Object.Raw, err = patch.Apply(in.Request.Object.Raw); err != nil {
			t.Fatalf("patch %s does not apply: %v", r.Patch, err)
		}
	}
	var pod corev1.Pod
	if err := json.Unmarshal(in.Request.Object.Raw, &pod); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	return out, &pod
}

// Two pods as the API server sends them: the ReplicaSet's pod with no volumes at all,
// and one whose service account volume, cache volume, CPU init container and CPU
// sidecar are already listed. Each leaves the mutating webhook with the region volume
// mounted in every vGPU container, passes the validating webhook, and keeps everything
// else as it was.
func TestHTTPGivesTheAPIServersPodsTheirRegionVolume(t *testing.T) {
	srv := httptest.NewServer(NewMux(NewPolicy(DefaultConfig()), fixedQueues{"team-a": "research"}, func() bool { return true }))
	defer srv.Close()
	for _, c := range []struct {
		file       string
		vgpu       []string
		untouched  []string
		volumeSize int64
	}{
		{"testdata/create-vgpu-pod.json", []string{"server"}, nil, api.RegionBytesPerContainer},
		{"testdata/create-vgpu-pod-with-sidecar.json", []string{"trainer", "evaluator"}, []string{"fetch-weights", "log-shipper"}, 2 * api.RegionBytesPerContainer},
	} {
		t.Run(c.file, func(t *testing.T) {
			review, err := os.ReadFile(c.file)
			if err != nil {
				t.Fatal(err)
			}
			var in admissionv1.AdmissionReview
			if err := json.Unmarshal(review, &in); err != nil {
				t.Fatal(err)
			}
			before, err := decodePod(in.Request.Object.Raw, "object")
			if err != nil {
				t.Fatal(err)
			}
			validate, after := admit(t, srv.URL, review)
			for _, name := range c.vgpu {
				if err := api.CheckRegionVolume(after, name); err != nil {
					t.Errorf("container %s: %v", name, err)
				}
				was, now := containerNamed(before, name).VolumeMounts, containerNamed(after, name).VolumeMounts
				if len(now) != len(was)+1 || !equality.Semantic.DeepEqual(now[:len(was)], was) {
					t.Errorf("container %s mounts %+v, want %+v and the region volume", name, now, was)
				}
			}
			vols := after.Spec.Volumes
			if n := len(before.Spec.Volumes); len(vols) != n+1 || !equality.Semantic.DeepEqual(vols[:n], before.Spec.Volumes) ||
				vols[n].EmptyDir == nil || vols[n].EmptyDir.SizeLimit.Value() != c.volumeSize {
				t.Errorf("volumes %+v, want %+v and a region volume of %d bytes", vols, before.Spec.Volumes, c.volumeSize)
			}
			for _, name := range c.untouched {
				was, now := containerNamed(before, name), containerNamed(after, name)
				if !equality.Semantic.DeepEqual(was, now) {
					t.Errorf("container %s changed: %+v", name, now)
				}
			}
			r := answer(t, mustPost(t, srv.URL+PathValidate, validate))
			if !r.Allowed || len(r.Patch) != 0 {
				t.Errorf("the mutated pod: %+v", r.Result)
			}
		})
	}
}

// A pod that brings its own disk-backed volume under the reserved name keeps it through
// the mutating webhook, and the validating webhook refuses it with a 403 that names the
// field and its value.
func TestHTTPRefusesAPodWithItsOwnRegionVolume(t *testing.T) {
	review, err := os.ReadFile("testdata/create-vgpu-pod-with-sidecar.json")
	if err != nil {
		t.Fatal(err)
	}
	review = bytes.ReplaceAll(review, []byte(`"cache"`), []byte(`"tessera-region"`))
	srv := httptest.NewServer(NewMux(NewPolicy(DefaultConfig()), fixedQueues{}, func() bool { return true }))
	defer srv.Close()
	validate, after := admit(t, srv.URL, review)
	if v := after.Spec.Volumes[0]; v.Name != api.RegionVolumeName || v.EmptyDir == nil || v.EmptyDir.Medium != "" || len(after.Spec.Volumes) != 2 {
		t.Errorf("the pod's own volume was patched: %+v", after.Spec.Volumes)
	}
	r := answer(t, mustPost(t, srv.URL+PathValidate, validate))
	want := `volume "tessera-region" is reserved for Tessera's accounting region: spec.volumes[0] ("tessera-region").emptyDir.medium is "", want "Memory"`
	if r.Allowed || r.Result == nil || r.Result.Code != http.StatusForbidden || r.Result.Message != want {
		t.Errorf("answer %+v, want a 403 saying %q", r.Result, want)
	}
}

func containerNamed(pod *corev1.Pod, name string) *corev1.Container {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	return nil
}
