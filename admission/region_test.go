package admission

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tessera-gpu/tessera/api"
)

// applyPatch applies a decision's patch to the pod's JSON with the JSON patch library
// the API server applies a mutating webhook's patch with.
func applyPatch(t *testing.T, doc []byte, ops []PatchOp) []byte {
	t.Helper()
	b, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(b)
	if err != nil {
		t.Fatalf("patch %s: %v", b, err)
	}
	out, err := patch.Apply(doc)
	if err != nil {
		t.Fatalf("patch %s does not apply to %s: %v", b, doc, err)
	}
	return out
}

// mutated is the pod as the API server holds it after the mutating webhook: its JSON
// (as the API server sends it) patched.
func mutated(t *testing.T, p *Policy, pod *corev1.Pod) (*corev1.Pod, Decision) {
	t.Helper()
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	d := p.Mutate(Review{Operation: Create, Pod: pod})
	if !d.Allowed {
		t.Fatalf("mutation refused: %s", d.Message)
	}
	var out corev1.Pod
	if err := json.Unmarshal(applyPatch(t, doc, d.Patch), &out); err != nil {
		t.Fatal(err)
	}
	return &out, d
}

func withMounts(c corev1.Container, ms ...corev1.VolumeMount) corev1.Container {
	c.VolumeMounts = append(c.VolumeMounts, ms...)
	return c
}

var (
	apiAccess      = corev1.Volume{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}
	apiAccessMount = corev1.VolumeMount{Name: "kube-api-access-x7k2p", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}
	quarter        = map[string]int64{api.ResourceNumber: 1, api.ResourceMemoryPercentage: 25}
	cpuOnly        = map[string]int64{"cpu": 1}
)

// Whatever a vGPU pod holds, the patched pod passes the agent's check for every vGPU
// container (init containers included), its volume has room for each of them, and
// nothing else in the pod changes.
func TestRegionPatchGivesEveryVGPUContainerTheAgentsVolume(t *testing.T) {
	p := NewPolicy(DefaultConfig())
	cases := []struct {
		name string
		pod  func() *corev1.Pod
		// vgpu are the pod's vGPU containers; ops the number of region patch operations.
		vgpu []string
		ops  int
		// refused is the scheduler's refusal of the pod, "" when the pod passes.
		refused string
	}{
		{"one vGPU container, no volumes or mounts anywhere",
			func() *corev1.Pod { return routed(nil, half) }, []string{"main"}, 2, ""},
		{"volumes and mounts already listed (the service account's) are appended to",
			func() *corev1.Pod {
				pod := routed(nil, half, cpuOnly)
				pod.Spec.Volumes = []corev1.Volume{apiAccess}
				pod.Spec.Containers[0] = withMounts(pod.Spec.Containers[0], apiAccessMount)
				pod.Spec.Containers[1] = withMounts(pod.Spec.Containers[1], apiAccessMount)
				return pod
			}, []string{"main"}, 2, ""},
		{"several vGPU containers each get a mount and their share of the volume",
			func() *corev1.Pod {
				pod := routed(nil, half, quarter, half)
				pod.Spec.Containers[1] = withMounts(pod.Spec.Containers[1], apiAccessMount)
				return pod
			}, []string{"main", "side", "third"}, 4, ""},
		{"a CPU sidecar between vGPU containers is left alone",
			func() *corev1.Pod { return routed(nil, half, cpuOnly, quarter) }, []string{"main", "third"}, 3, ""},
		{"a vGPU init container is counted and mounted",
			func() *corev1.Pod {
				pod := routed(nil, half)
				warm := vgpuPod(nil, quarter).Spec.Containers[0]
				warm.Name = "warm"
				pod.Spec.InitContainers = []corev1.Container{{Name: "fetch"}, warm}
				return pod
			}, []string{"warm", "main"}, 3, `init container "warm" requests vGPU resources; only app containers may`},
		{"a container asking only in requests is a vGPU container",
			func() *corev1.Pod {
				pod := routed(nil, half, cpuOnly)
				pod.Spec.Containers[1].Resources.Requests = corev1.ResourceList{api.ResourceNumber: resource.MustParse("1")}
				return pod
			}, []string{"main", "side"}, 3, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := c.pod()
			after, d := mutated(t, p, c.pod())
			if got := len(p.regionPatch(before)); got != c.ops {
				t.Errorf("%d region operations, want %d: %+v", got, c.ops, d.Patch)
			}
			for _, name := range c.vgpu {
				if err := api.CheckRegionVolume(after, name); err != nil {
					t.Errorf("container %s: %v", name, err)
				}
			}
			vol := after.Spec.Volumes[len(after.Spec.Volumes)-1]
			if want := int64(len(c.vgpu)) * api.RegionBytesPerContainer; vol.EmptyDir == nil || vol.EmptyDir.SizeLimit.Value() != want {
				t.Errorf("region volume %+v, want %d bytes", vol, want)
			}
			if !equality.Semantic.DeepEqual(after.Spec.Volumes[:len(before.Spec.Volumes)], before.Spec.Volumes) && len(before.Spec.Volumes) > 0 {
				t.Errorf("volumes before the region volume changed: %+v", after.Spec.Volumes)
			}
			for _, list := range [][2][]corev1.Container{{before.Spec.Containers, after.Spec.Containers}, {before.Spec.InitContainers, after.Spec.InitContainers}} {
				for i, was := range list[0] {
					now := list[1][i]
					if p.vgpuContainer(&was) {
						if n := len(was.VolumeMounts); !equality.Semantic.DeepEqual(now.VolumeMounts[:n], was.VolumeMounts) || len(now.VolumeMounts) != n+1 {
							t.Errorf("container %s mounts %+v, want %+v and the region volume", was.Name, now.VolumeMounts, was.VolumeMounts)
						}
						now.VolumeMounts = was.VolumeMounts
					}
					if !equality.Semantic.DeepEqual(now, was) {
						t.Errorf("container %s changed:\n%+v\nwas\n%+v", was.Name, now, was)
					}
				}
			}
			// The scheduler's refusal, if any, is the only one: the region volume passes.
			if v := p.Validate(Review{Operation: Create, Pod: after}); v.Allowed != (c.refused == "") || !strings.Contains(v.Message, c.refused) {
				t.Errorf("the patched pod: allowed %v, %q; want the refusal %q", v.Allowed, v.Message, c.refused)
			}
		})
	}
}

// The API server omits empty lists and maps from the object it sends, but a client may
// send them empty or null: "add" of the whole list (or map) works on all three.
func TestRegionPatchAppliesToEmptyAndNullLists(t *testing.T) {
	p := NewPolicy(DefaultConfig())
	for _, doc := range []string{
		`{"metadata":{},"spec":{"volumes":[],"containers":[{"name":"main","volumeMounts":[],"resources":{"limits":{"volcano.sh/vgpu-number":"1"}}}]}}`,
		`{"metadata":{"annotations":{}},"spec":{"volumes":null,"containers":[{"name":"main","volumeMounts":null,"resources":{"limits":{"volcano.sh/vgpu-number":"1"}}}]}}`,
	} {
		var pod corev1.Pod
		if err := json.Unmarshal([]byte(doc), &pod); err != nil {
			t.Fatal(err)
		}
		var after corev1.Pod
		if err := json.Unmarshal(applyPatch(t, []byte(doc), p.Mutate(Review{Operation: Create, Pod: &pod}).Patch), &after); err != nil {
			t.Fatal(err)
		}
		if err := api.CheckRegionVolume(&after, "main"); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

// What the pod spec already holds under the reserved name or path is never patched.
func TestRegionPatchKeepsWhatThePodAlreadyHas(t *testing.T) {
	p := NewPolicy(DefaultConfig())
	t.Run("a pod made from a mutated pod's spec is not patched again and passes", func(t *testing.T) {
		pod := routed(map[string]string{PodQueueAnnotation: "q"}, half, quarter)
		pod.Spec.Volumes = []corev1.Volume{api.RegionVolume(2)}
		for i := range pod.Spec.Containers {
			pod.Spec.Containers[i] = withMounts(pod.Spec.Containers[i], api.RegionVolumeMount())
		}
		if ops := p.regionPatch(pod); len(ops) != 0 {
			t.Errorf("patched: %+v", ops)
		}
		if d := p.Validate(Review{Operation: Create, Pod: pod}); !d.Allowed {
			t.Errorf("refused: %s", d.Message)
		}
	})
	t.Run("the pod's own volume is kept; containers that do not mount it get the mount", func(t *testing.T) {
		pod := routed(nil, half, quarter)
		pod.Spec.Volumes = []corev1.Volume{apiAccess, api.RegionVolume(2)}
		pod.Spec.Containers[0] = withMounts(pod.Spec.Containers[0], api.RegionVolumeMount())
		ops := p.regionPatch(pod)
		b, _ := json.Marshal(ops)
		if want := `[{"op":"add","path":"/spec/containers/1/volumeMounts","value":[{"name":"tessera-region","mountPath":"/var/run/tessera-region"}]}]`; string(b) != want {
			t.Errorf("patch %s, want %s", b, want)
		}
	})
	t.Run("a container that mounts something at the path is not given a second mount", func(t *testing.T) {
		for _, at := range []string{api.RegionMountPath, api.RegionMountPath + "/", "/var/run/../run/tessera-region"} {
			pod := routed(nil, half)
			pod.Spec.Containers[0] = withMounts(pod.Spec.Containers[0], corev1.VolumeMount{Name: "data", MountPath: at})
			b, _ := json.Marshal(p.regionPatch(pod))
			vol, _ := json.Marshal(api.RegionVolume(1))
			if want := `[{"op":"add","path":"/spec/volumes","value":[` + string(vol) + `]}]`; string(b) != want {
				t.Errorf("%s: patch %s, want %s", at, b, want)
			}
		}
	})
}

// A vGPU pod that uses the reserved name or path in a way the agent would not accept
// is refused at creation with the field and the value as written; the rest of the
// pod's request is still checked.
func TestValidateRefusesAPodThatMisusesTheRegionVolume(t *testing.T) {
	p := NewPolicy(DefaultConfig())
	data := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	cases := []struct {
		name string
		mut  func(*corev1.Pod)
		want string // the whole refusal
	}{
		{"a disk-backed emptyDir under the reserved name",
			func(pod *corev1.Pod) {
				pod.Spec.Volumes = []corev1.Volume{data, {Name: api.RegionVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			},
			`volume "tessera-region" is reserved for Tessera's accounting region: spec.volumes[1] ("tessera-region").emptyDir.medium is "", want "Memory"`},
		{"a host directory under the reserved name",
			func(pod *corev1.Pod) {
				pod.Spec.Volumes = []corev1.Volume{{Name: api.RegionVolumeName, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib"}}}}
			},
			`volume "tessera-region" is reserved for Tessera's accounting region: spec.volumes[0] ("tessera-region") is not an emptyDir`},
		{"a memory volume without a size",
			func(pod *corev1.Pod) {
				pod.Spec.Volumes = []corev1.Volume{{Name: api.RegionVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
			},
			`volume "tessera-region" is reserved for Tessera's accounting region: spec.volumes[0] ("tessera-region").emptyDir.sizeLimit is not set`},
		{"another volume mounted at the path",
			func(pod *corev1.Pod) {
				pod.Spec.Volumes = []corev1.Volume{data}
				pod.Spec.Containers[0] = withMounts(pod.Spec.Containers[0], corev1.VolumeMount{Name: "data", MountPath: api.RegionMountPath})
			},
			`volume "tessera-region" is reserved for Tessera's accounting region: spec.containers[0].volumeMounts[0] mounts volume "data" at "/var/run/tessera-region", over the region volume at /var/run/tessera-region`},
		{"another volume mounted at the path spelled with a trailing slash",
			func(pod *corev1.Pod) {
				pod.Spec.Volumes = []corev1.Volume{data}
				pod.Spec.Containers[0] = withMounts(pod.Spec.Containers[0], corev1.VolumeMount{Name: "data", MountPath: api.RegionMountPath + "/"})
			},
			`spec.containers[0].volumeMounts[0] mounts volume "data" at "/var/run/tessera-region/", over the region volume`},
		{"a file mounted over the container's region inside the volume",
			func(pod *corev1.Pod) {
				pod.Spec.Volumes = []corev1.Volume{data}
				pod.Spec.Containers[1] = withMounts(pod.Spec.Containers[1], corev1.VolumeMount{Name: "data", SubPath: "r",
					MountPath: api.RegionMountPath + "/" + api.RegionFile("side")})
			},
			`spec.containers[1].volumeMounts[0] mounts volume "data" at "/var/run/tessera-region/tessera-side.region", over the region volume`},
		{"the region volume mounted read-only",
			func(pod *corev1.Pod) {
				m := api.RegionVolumeMount()
				m.ReadOnly = true
				pod.Spec.Containers[1] = withMounts(pod.Spec.Containers[1], m)
			},
			`volume "tessera-region" is reserved for Tessera's accounting region: spec.containers[1].volumeMounts[0] mounts "tessera-region" read-only`},
		{"the region volume mounted elsewhere",
			func(pod *corev1.Pod) {
				m := api.RegionVolumeMount()
				m.MountPath = "/tmp/region"
				pod.Spec.Containers[0] = withMounts(pod.Spec.Containers[0], m)
			},
			`spec.containers[0].volumeMounts[0] mounts "tessera-region" at "/tmp/region", want "/var/run/tessera-region"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := routed(nil, half, quarter)
			c.mut(pod)
			after, _ := mutated(t, p, pod)
			d := p.Validate(Review{Operation: Create, Pod: after})
			if d.Allowed || !strings.HasPrefix(d.Message, regionRefusalPrefix) || !strings.Contains(d.Message, c.want) {
				t.Errorf("allowed %v, %q\nwant a refusal containing %q", d.Allowed, d.Message, c.want)
			}
		})
	}
	t.Run("the refusal comes with the pod's other problems", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Limits = []Limit{{MaxCards: 1}}
		pod := routed(nil, map[string]int64{api.ResourceNumber: 2})
		pod.Spec.Volumes = []corev1.Volume{{Name: api.RegionVolumeName}}
		d := NewPolicy(cfg).Validate(Review{Operation: Create, Pod: pod})
		if d.Allowed || !strings.Contains(d.Message, "is not an emptyDir; the cluster allows at most 1 cards") {
			t.Errorf("%q", d.Message)
		}
	})
}

// The region volume never changes or refuses a pod outside its creation, a pod without
// vGPU containers, or a pod the mutating webhook did not see.
func TestRegionVolumeLeavesOtherPodsAlone(t *testing.T) {
	p := NewPolicy(DefaultConfig())
	hostRegion := func(pod *corev1.Pod) *corev1.Pod {
		pod.Spec.Volumes = []corev1.Volume{{Name: api.RegionVolumeName, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		pod.Spec.Containers[0] = withMounts(pod.Spec.Containers[0], corev1.VolumeMount{Name: api.RegionVolumeName, MountPath: api.RegionMountPath})
		return pod
	}
	cpu := hostRegion(cpuPod())
	if d := p.Mutate(Review{Operation: Create, Pod: cpu}); !d.Allowed || len(d.Patch) != 0 {
		t.Errorf("a CPU-only pod using the reserved name was mutated: %+v", d)
	}
	if d := p.Validate(Review{Operation: Create, Pod: cpu}); !d.Allowed {
		t.Errorf("a CPU-only pod using the reserved name was refused: %s", d.Message)
	}
	if d := p.Validate(Review{Operation: Create, Pod: routed(nil, half, quarter)}); !d.Allowed {
		t.Errorf("a vGPU pod without the region volume (the mutating webhook skipped) was refused: %s", d.Message)
	}
	bad := hostRegion(routed(map[string]string{api.AnnotationQoS: "burst-share"}, half))
	old := hostRegion(routed(nil, half))
	if d := p.Validate(Review{Operation: Update, Pod: bad, OldPod: old}); !d.Allowed {
		t.Errorf("an update was refused for the volume its pod was created with: %s", d.Message)
	}
	if d := p.Mutate(Review{Operation: Update, Pod: routed(nil, half), OldPod: routed(nil, half)}); len(d.Patch) != 0 {
		t.Errorf("an update was patched: %+v", d.Patch)
	}
}
