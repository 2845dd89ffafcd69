package admission

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tessera-gpu/tessera/api"
)

func TestClaimRequestsClass(t *testing.T) {
	exactly := func(class string) resourcev1.DeviceRequest {
		return resourcev1.DeviceRequest{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}
	}
	spec := func(rs ...resourcev1.DeviceRequest) *resourcev1.ResourceClaimSpec {
		return &resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: rs}}
	}
	alternatives := resourcev1.DeviceRequest{Name: "any", FirstAvailable: []resourcev1.DeviceSubRequest{
		{Name: "nvidia", DeviceClassName: "gpu.nvidia.com"}, {Name: "share", DeviceClassName: api.DRADriver}}}
	cases := map[string]struct {
		spec *resourcev1.ResourceClaimSpec
		want bool
	}{
		"a request of the class":                      {spec(exactly(api.DRADriver)), true},
		"a NIC and a share":                           {spec(exactly("nic.example.com"), exactly(api.DRADriver)), true},
		"the class among the alternatives":            {spec(alternatives), true},
		"another driver's class only":                 {spec(exactly("gpu.nvidia.com")), false},
		"no requests (a claim of no devices)":         {spec(), false},
		"a class whose name only starts like the one": {spec(exactly(api.DRADriver + "-other")), false},
	}
	for name, c := range cases {
		if got := ClaimRequestsClass(c.spec, api.DRADriver); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}

// claimsPod is a pod of two app containers and an init container: "main" references the
// claim entry "gpu", "nic" the entry "net", "warm" (init) both.
func claimsPod() *corev1.Pod {
	use := func(name string, entries ...string) corev1.Container {
		c := corev1.Container{Name: name}
		for _, e := range entries {
			c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: e})
		}
		return c
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "train"},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("share-4g")},
				{Name: "net", ResourceClaimName: ptr.To("rdma")}},
			InitContainers: []corev1.Container{use("warm", "net", "gpu")},
			Containers:     []corev1.Container{use("main", "gpu"), use("nic", "net")}}}
}

func patched(t *testing.T, pod *corev1.Pod, ops []PatchOp) *corev1.Pod {
	t.Helper()
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var out corev1.Pod
	if err := json.Unmarshal(applyPatch(t, doc, ops), &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// A pod that asks for cards only through a vGPU claim gets the region volume, sized for
// and mounted in exactly the containers that reference the claim (an init container
// included), so that the driver can put the claim's regions where the agent reads them;
// the container of another driver's claim is left alone, and nothing else changes.
func TestRegionPatchWithClaimsGivesClaimContainersTheVolume(t *testing.T) {
	p := NewPolicy(DefaultConfig())
	pod := claimsPod()
	if ops := p.regionPatch(pod); len(ops) != 0 {
		t.Fatalf("the vGPU-resource patch changes a claims-only pod: %+v", ops)
	}
	vgpu := map[string]bool{"gpu": true}
	out := patched(t, pod, p.RegionPatchWithClaims(pod, vgpu))
	for _, c := range []string{"warm", "main"} {
		if err := api.CheckRegionVolume(out, c); err != nil {
			t.Errorf("container %s after the patch: %v", c, err)
		}
	}
	if len(out.Spec.Containers[1].VolumeMounts) != 0 {
		t.Errorf("the NIC container got mounts %+v", out.Spec.Containers[1].VolumeMounts)
	}
	if want := api.RegionVolume(2); !equality.Semantic.DeepEqual(out.Spec.Volumes, []corev1.Volume{want}) {
		t.Errorf("volumes %+v, want the region volume for two containers", out.Spec.Volumes)
	}
	// Nothing but the volume and the two mounts changed.
	out.Spec.Volumes, out.Spec.InitContainers[0].VolumeMounts, out.Spec.Containers[0].VolumeMounts = nil, nil, nil
	if !equality.Semantic.DeepEqual(out, claimsPod()) {
		t.Errorf("the patch changed more than the region volume:\n%+v", out)
	}
	// Patched once, the pod needs nothing more.
	if ops := p.RegionPatchWithClaims(patched(t, pod, p.RegionPatchWithClaims(pod, vgpu)), vgpu); len(ops) != 0 {
		t.Errorf("a patched pod is patched again: %+v", ops)
	}
	// Without a vGPU claim entry it is not Tessera's pod.
	if ops := p.RegionPatchWithClaims(pod, map[string]bool{"other": true}); len(ops) != 0 {
		t.Errorf("a pod of other drivers' claims is patched: %+v", ops)
	}
	// A vGPU-resource container and a claim container share one volume sized for both.
	mixed := routed(nil, half)
	mixed.Spec.ResourceClaims = pod.Spec.ResourceClaims
	mixed.Spec.Containers = append(mixed.Spec.Containers, pod.Spec.Containers[0])
	if out := patched(t, mixed, p.RegionPatchWithClaims(mixed, vgpu)); !equality.Semantic.DeepEqual(out.Spec.Volumes, []corev1.Volume{api.RegionVolume(2)}) {
		t.Errorf("mixed pod volumes %+v, want one region volume for two containers", out.Spec.Volumes)
	}
}

// A claims pod that uses the reserved name or path must use it as the agent reads it in
// every container of a vGPU claim; one that does not use it at all is admitted (its
// regions then stay in its /dev/shm).
func TestClaimRegionRefusal(t *testing.T) {
	p := NewPolicy(DefaultConfig())
	vgpu := map[string]bool{"gpu": true}
	if why := p.ClaimRegionRefusal(claimsPod(), vgpu); why != "" {
		t.Errorf("a claims pod without the volume is refused: %s", why)
	}
	ok := patched(t, claimsPod(), p.RegionPatchWithClaims(claimsPod(), vgpu))
	if why := p.ClaimRegionRefusal(ok, vgpu); why != "" {
		t.Errorf("the patched pod is refused: %s", why)
	}
	ro := ok.DeepCopy()
	ro.Spec.Containers[0].VolumeMounts[0].ReadOnly = true
	over := ok.DeepCopy()
	over.Spec.Volumes = append(over.Spec.Volumes, corev1.Volume{Name: "scratch"})
	over.Spec.InitContainers[0].VolumeMounts = append(over.Spec.InitContainers[0].VolumeMounts,
		corev1.VolumeMount{Name: "scratch", MountPath: api.RegionMountPath + "/tessera-claim-x.region"})
	for name, c := range map[string]struct {
		pod  *corev1.Pod
		want string
	}{
		"read-only mount":             {ro, `mounts "tessera-region" read-only`},
		"a file mounted over its own": {over, `spec.initContainers[0].volumeMounts[1] mounts volume "scratch"`},
	} {
		if why := p.ClaimRegionRefusal(c.pod, vgpu); !strings.HasPrefix(why, regionRefusalPrefix) || !strings.Contains(why, c.want) {
			t.Errorf("%s: refusal %q, want one containing %q", name, why, c.want)
		}
	}
}
