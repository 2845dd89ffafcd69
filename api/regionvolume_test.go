package api

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func regionPod(mut func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{Spec: corev1.PodSpec{
		Volumes:    []corev1.Volume{{Name: "data"}, RegionVolume(2)},
		Containers: []corev1.Container{{Name: "side"}, {Name: "main", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, RegionVolumeMount()}}},
	}}
	if mut != nil {
		mut(p)
	}
	return p
}

func TestRegionVolumeAsTheWebhookMakesItPasses(t *testing.T) {
	if err := CheckRegionVolume(regionPod(nil), "main"); err != nil {
		t.Fatal(err)
	}
	v := RegionVolume(3)
	if got := v.EmptyDir.SizeLimit.Value(); got != 3*RegionBytesPerContainer {
		t.Errorf("size limit for 3 containers = %d", got)
	}
	if RegionPathIn(true, "main") != "/var/run/tessera-region/tessera-main.region" || RegionPathIn(false, "main") != "/dev/shm/tessera-main.region" {
		t.Errorf("paths: %s, %s", RegionPathIn(true, "main"), RegionPathIn(false, "main"))
	}
}

// Every way a tenant's pod spec can differ from the volume Tessera makes is refused with
// the field and the value as written: the region then stays in the container's /dev/shm.
func TestRegionVolumeRefusalsNameTheField(t *testing.T) {
	big := resource.MustParse("1Gi")
	zero := resource.MustParse("0")
	for _, c := range []struct {
		name, container, want string
		mut                   func(*corev1.Pod)
	}{
		{"no volume", "main", `the pod has no volume "tessera-region"`, func(p *corev1.Pod) { p.Spec.Volumes = p.Spec.Volumes[:1] }},
		{"hostPath", "main", `spec.volumes[1] ("tessera-region") is not an emptyDir`, func(p *corev1.Pod) {
			p.Spec.Volumes[1].EmptyDir = nil
			p.Spec.Volumes[1].HostPath = &corev1.HostPathVolumeSource{Path: "/var/lib"}
		}},
		{"disk medium", "main", `spec.volumes[1] ("tessera-region").emptyDir.medium is "", want "Memory"`, func(p *corev1.Pod) { p.Spec.Volumes[1].EmptyDir.Medium = "" }},
		{"no size", "main", `emptyDir.sizeLimit is not set`, func(p *corev1.Pod) { p.Spec.Volumes[1].EmptyDir.SizeLimit = nil }},
		{"too big", "main", `emptyDir.sizeLimit is 1Gi, want more than 0 and at most 67108864 bytes`, func(p *corev1.Pod) { p.Spec.Volumes[1].EmptyDir.SizeLimit = &big }},
		{"zero", "main", `emptyDir.sizeLimit is 0,`, func(p *corev1.Pod) { p.Spec.Volumes[1].EmptyDir.SizeLimit = &zero }},
		{"not mounted", "side", `container "side" does not mount volume "tessera-region"`, nil},
		{"no container", "ghost", `the pod has no container "ghost"`, nil},
		{"read-only", "main", `spec.containers[1].volumeMounts[1] mounts "tessera-region" read-only`, func(p *corev1.Pod) { p.Spec.Containers[1].VolumeMounts[1].ReadOnly = true }},
		{"sub-path", "main", `mounts a sub-path of "tessera-region" ("x"`, func(p *corev1.Pod) { p.Spec.Containers[1].VolumeMounts[1].SubPath = "x" }},
		{"elsewhere", "main", `mounts "tessera-region" at "/tmp/r", want "/var/run/tessera-region"`, func(p *corev1.Pod) { p.Spec.Containers[1].VolumeMounts[1].MountPath = "/tmp/r" }},
		{"another volume at the path", "main", `spec.containers[1].volumeMounts[0] mounts volume "data" at /var/run/tessera-region`, func(p *corev1.Pod) { p.Spec.Containers[1].VolumeMounts[0].MountPath = RegionMountPath }},
		{"a mount inside the volume", "main", `spec.containers[1].volumeMounts[0] mounts volume "data" at "/var/run/tessera-region/tessera-main.region", inside the region volume's path`, func(p *corev1.Pod) {
			p.Spec.Containers[1].VolumeMounts[0].MountPath = RegionMountPath + "/tessera-main.region"
		}},
		{"twice", "main", `mounts "tessera-region" a second time`, func(p *corev1.Pod) {
			p.Spec.Containers[1].VolumeMounts = append(p.Spec.Containers[1].VolumeMounts, RegionVolumeMount())
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckRegionVolume(regionPod(c.mut), c.container)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestRegionVolumeOfAnInitContainer(t *testing.T) {
	p := regionPod(func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "warm", VolumeMounts: []corev1.VolumeMount{{Name: RegionVolumeName, MountPath: RegionMountPath, ReadOnly: true}}}}
	})
	err := CheckRegionVolume(p, "warm")
	if err == nil || !strings.Contains(err.Error(), "spec.initContainers[0].volumeMounts[0]") {
		t.Fatalf("got %v", err)
	}
}
