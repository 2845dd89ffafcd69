package api

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The region volume: where a vGPU container's processes keep their shared accounting
// region (vgpu-core's, see the usage package), so that the node agent can read it.
//
// A region is written by every process of its container, so a container can always grow
// it. It therefore lives on a memory-backed emptyDir of the container's own pod, sized by
// the pod spec: the kubelet mounts a tmpfs of exactly SizeLimit there and charges what is
// written to the pod's memory, so a container that grows its region fills its own pod's
// volume and nothing of the node's. The node agent reads it from the kubelet's side of
// the volume. The admission webhook adds the volume to every vGPU pod it admits; a pod
// without it (webhook off) keeps its region in the container's /dev/shm, which the agent
// cannot read (its usage is then missing from the agent's metrics; limits hold the same).
const (
	// RegionVolumeName is the pod volume that holds its vGPU containers' regions.
	RegionVolumeName = "tessera-region"
	// RegionMountPath is where each vGPU container mounts it.
	RegionMountPath = "/var/run/tessera-region"
	// RegionBytesPerContainer is the room given to each vGPU container of a pod: one
	// region (296,000 bytes on 64-bit Linux, usage.RegionFileSize) with room to spare.
	RegionBytesPerContainer = 512 << 10
	// MaxRegionVolumeBytes bounds the volume the agent accepts: the tmpfs is charged to
	// the pod, but a pod without a memory limit would otherwise take node memory.
	MaxRegionVolumeBytes = 64 << 20
	// ShmRegionDir is where a container without the region volume keeps its region.
	ShmRegionDir = "/dev/shm"
)

// RegionFile is the container's region inside RegionMountPath (or ShmRegionDir).
// Container names are DNS labels, so the name is a safe path element.
func RegionFile(container string) string { return "tessera-" + container + ".region" }

// RegionVolume is the volume the admission webhook adds to a pod with vgpuContainers
// vGPU containers (init containers included).
func RegionVolume(vgpuContainers int) corev1.Volume {
	size := resource.NewQuantity(int64(max(vgpuContainers, 1))*RegionBytesPerContainer, resource.BinarySI)
	return corev1.Volume{Name: RegionVolumeName, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: size}}}
}

// RegionVolumeMount is the mount the webhook adds to each vGPU container.
func RegionVolumeMount() corev1.VolumeMount {
	return corev1.VolumeMount{Name: RegionVolumeName, MountPath: RegionMountPath}
}

// CheckRegionVolume says whether container of pod can keep its region on the pod's
// region volume: the pod has the volume as RegionVolume makes it (memory-backed, with a
// size limit of at most MaxRegionVolumeBytes) and the container mounts it, writable and
// whole, at RegionMountPath. The error names the field and the value found. The pod spec
// is the tenant's: anything else keeps the region in the container's /dev/shm.
func CheckRegionVolume(pod *corev1.Pod, container string) error {
	var vol *corev1.Volume
	at := -1
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == RegionVolumeName {
			vol, at = &pod.Spec.Volumes[i], i
		}
	}
	if vol == nil {
		return fmt.Errorf("the pod has no volume %q", RegionVolumeName)
	}
	field := fmt.Sprintf("spec.volumes[%d] (%q)", at, RegionVolumeName)
	ed := vol.EmptyDir
	switch {
	case ed == nil:
		return fmt.Errorf("%s is not an emptyDir", field)
	case ed.Medium != corev1.StorageMediumMemory:
		return fmt.Errorf("%s.emptyDir.medium is %q, want %q", field, ed.Medium, corev1.StorageMediumMemory)
	case ed.SizeLimit == nil:
		return fmt.Errorf("%s.emptyDir.sizeLimit is not set", field)
	case ed.SizeLimit.Sign() <= 0 || ed.SizeLimit.Cmp(*resource.NewQuantity(MaxRegionVolumeBytes, resource.BinarySI)) > 0:
		return fmt.Errorf("%s.emptyDir.sizeLimit is %s, want more than 0 and at most %d bytes", field, ed.SizeLimit.String(), MaxRegionVolumeBytes)
	}
	c, kind, idx := findContainer(pod, container)
	if c == nil {
		return fmt.Errorf("the pod has no container %q", container)
	}
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		mf := fmt.Sprintf("spec.%s[%d].volumeMounts[%d]", kind, idx, i)
		if under := path.Clean(m.MountPath); strings.HasPrefix(under, RegionMountPath+"/") {
			// A mount inside the volume could sit where the region goes and hide it.
			return fmt.Errorf("%s mounts volume %q at %q, inside the region volume's path %s", mf, m.Name, m.MountPath, RegionMountPath)
		}
		if path.Clean(m.MountPath) != RegionMountPath && m.Name != RegionVolumeName {
			continue
		}
		switch {
		case m.Name != RegionVolumeName:
			return fmt.Errorf("%s mounts volume %q at %s, which is the region volume's path", mf, m.Name, RegionMountPath)
		case path.Clean(m.MountPath) != RegionMountPath:
			return fmt.Errorf("%s mounts %q at %q, want %q", mf, RegionVolumeName, m.MountPath, RegionMountPath)
		case m.ReadOnly:
			return fmt.Errorf("%s mounts %q read-only", mf, RegionVolumeName)
		case m.SubPath != "" || m.SubPathExpr != "":
			return fmt.Errorf("%s mounts a sub-path of %q (%q%q)", mf, RegionVolumeName, m.SubPath, m.SubPathExpr)
		}
		if mount != nil {
			return fmt.Errorf("%s mounts %q a second time", mf, RegionVolumeName)
		}
		mount = m
	}
	if mount == nil {
		return fmt.Errorf("container %q does not mount volume %q", container, RegionVolumeName)
	}
	return nil
}

// RegionPathIn is the container's region path vgpu-core is told to use: on the region
// volume when CheckRegionVolume passes, else in the container's /dev/shm.
func RegionPathIn(onVolume bool, container string) string {
	if onVolume {
		return RegionMountPath + "/" + RegionFile(container)
	}
	return ShmRegionDir + "/" + RegionFile(container)
}

func findContainer(pod *corev1.Pod, name string) (*corev1.Container, string, int) {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i], "containers", i
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i], "initContainers", i
		}
	}
	return nil, "", 0
}
