package admission

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/tessera-gpu/tessera/api"
)

// The region volume (api.RegionVolume): each vGPU container keeps vgpu-core's shared
// accounting region on a memory-backed emptyDir of its own pod, mounted at
// api.RegionMountPath, which the node agent reads from the kubelet's side. A container
// that grows its region fills that volume, charged to its pod, and nothing of the node.
// Mutate adds the volume and the mounts; Validate refuses a pod whose spec already uses
// the reserved name or path in a way the agent would not accept.

// regionRefusalPrefix starts every refusal of a pod that misuses the region volume.
var regionRefusalPrefix = fmt.Sprintf("volume %q is reserved for Tessera's accounting region: ", api.RegionVolumeName)

// vgpuContainer is IsVGPU for one container: it names one of the vGPU resources in its
// limits or requests. The pod-level test is asked of a pod holding only this container,
// so that the two can never disagree.
func (p *Policy) vgpuContainer(c *corev1.Container) bool {
	return p.args.Resources.HasVGPURequest(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{*c}}})
}

// vgpuContainers lists a pod's vGPU containers, init containers first, each with the
// JSON pointer of its entry in the pod.
func (p *Policy) vgpuContainers(pod *corev1.Pod) []podContainer {
	var out []podContainer
	for _, list := range []struct {
		field string
		cs    []corev1.Container
	}{{"initContainers", pod.Spec.InitContainers}, {"containers", pod.Spec.Containers}} {
		for i := range list.cs {
			if p.vgpuContainer(&list.cs[i]) {
				out = append(out, podContainer{c: &list.cs[i], field: fmt.Sprintf("spec.%s[%d]", list.field, i),
					pointer: "/spec/" + list.field + "/" + strconv.Itoa(i)})
			}
		}
	}
	return out
}

// podContainer is a container with where it sits in its pod.
type podContainer struct {
	c *corev1.Container
	// field is the container's field path for messages, pointer its JSON pointer.
	field, pointer string
}

// regionPatch adds the region volume to a vGPU pod being created, unless it has a
// volume of that name, and mounts it in every vGPU container that does not already use
// the name or the path. What the pod spec already holds is left for Validate to judge.
func (p *Policy) regionPatch(pod *corev1.Pod) []PatchOp {
	return regionVolumeOps(pod, p.vgpuContainers(pod))
}

// regionVolumeOps adds the volume, sized for cs, and mounts it in each of cs that lacks it.
func regionVolumeOps(pod *corev1.Pod, cs []podContainer) []PatchOp {
	if len(cs) == 0 {
		return nil
	}
	var ops []PatchOp
	if !hasRegionVolume(pod) {
		ops = append(ops, appendOp("/spec/volumes", len(pod.Spec.Volumes), api.RegionVolume(len(cs))))
	}
	for _, pc := range cs {
		if !mountsRegion(pc.c) {
			ops = append(ops, appendOp(pc.pointer+"/volumeMounts", len(pc.c.VolumeMounts), api.RegionVolumeMount()))
		}
	}
	return ops
}

// appendOp appends v to the array at pointer, which holds n elements. An empty array is
// absent from the object the API server sends (the fields are omitempty), so it is
// added whole; "add" also replaces a member that is present but null or empty.
func appendOp[T any](pointer string, n int, v T) PatchOp {
	if n == 0 {
		return PatchOp{Op: "add", Path: pointer, Value: []T{v}}
	}
	return PatchOp{Op: "add", Path: pointer + "/-", Value: v}
}

func hasRegionVolume(pod *corev1.Pod) bool {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == api.RegionVolumeName {
			return true
		}
	}
	return false
}

// mountsRegion reports whether a container already mounts the region volume, or
// anything at its path (written in any form the runtime reads as the same directory).
func mountsRegion(c *corev1.Container) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == api.RegionVolumeName || cleanPath(m.MountPath) == api.RegionMountPath {
			return true
		}
	}
	return false
}

func cleanPath(p string) string {
	if p == "" {
		return ""
	}
	return path.Clean(p)
}

// regionRefusal is why a vGPU pod being created cannot keep its regions on the region
// volume, "" when it can or when it does not use the volume at all: a pod the mutating
// webhook did not see (it was down, its failure policy Ignore) keeps its regions in its
// containers' /dev/shm and is admitted. The pod is judged once it uses the reserved
// volume name or mount path in any vGPU container, as every pod the mutating webhook
// patched does: each vGPU container must then pass api.CheckRegionVolume and mount
// nothing else over the volume's directory.
func (p *Policy) regionRefusal(pod *corev1.Pod) string {
	return refusal(pod, p.vgpuContainers(pod))
}

func refusal(pod *corev1.Pod, cs []podContainer) string {
	used := hasRegionVolume(pod)
	for _, pc := range cs {
		used = used || mountsRegion(pc.c)
	}
	if !used {
		return ""
	}
	for _, pc := range cs {
		if why := overlay(pc); why != "" {
			return regionRefusalPrefix + why
		}
		if err := api.CheckRegionVolume(pod, pc.c.Name); err != nil {
			return regionRefusalPrefix + err.Error()
		}
	}
	return ""
}

// overlay names a mount that would hide the region volume or a file in it from the
// container: a volume other than the region volume mounted at the volume's directory
// spelled another way, or below it. vgpu-core would then keep the region where the node
// agent does not read it.
func overlay(pc podContainer) string {
	for i, m := range pc.c.VolumeMounts {
		if m.Name == api.RegionVolumeName {
			continue
		}
		if at := cleanPath(m.MountPath); at == api.RegionMountPath || strings.HasPrefix(at, api.RegionMountPath+"/") {
			return fmt.Sprintf("%s.volumeMounts[%d] mounts volume %q at %q, over the region volume at %s",
				pc.field, i, m.Name, m.MountPath, api.RegionMountPath)
		}
	}
	return ""
}

// Pods that ask for cards through ResourceClaims of the vGPU DeviceClass (the node
// agent's DRA driver) keep their regions on the same volume: the driver names each
// claim's region in the limits file it gives the claim's containers, on the region volume
// when every pod the claim is reserved for mounts it in the containers that use the
// claim, in the pod's /dev/shm otherwise (where the agent cannot read it). The webhook
// sees the pod, not its claims: the caller resolves which of the pod's claim entries
// (spec.resourceClaims[].name) stand for claims of the class, with ClaimRequestsClass on
// the ResourceClaim's or the ResourceClaimTemplate's spec.

// ClaimRequestsClass reports whether a claim spec asks for a device of class in any of
// its requests or their alternatives (firstAvailable).
func ClaimRequestsClass(spec *resourcev1.ResourceClaimSpec, class string) bool {
	for _, r := range spec.Devices.Requests {
		if r.Exactly != nil && r.Exactly.DeviceClassName == class {
			return true
		}
		for _, sub := range r.FirstAvailable {
			if sub.DeviceClassName == class {
				return true
			}
		}
	}
	return false
}

// regionContainers are the pod's containers that keep a region: its vGPU containers and
// those that reference one of the vGPU claim entries, init containers first, each once.
func (p *Policy) regionContainers(pod *corev1.Pod, vgpuEntries map[string]bool) []podContainer {
	var out []podContainer
	for _, list := range []struct {
		field string
		cs    []corev1.Container
	}{{"initContainers", pod.Spec.InitContainers}, {"containers", pod.Spec.Containers}} {
		for i := range list.cs {
			c := &list.cs[i]
			uses := p.vgpuContainer(c)
			for _, rc := range c.Resources.Claims {
				uses = uses || vgpuEntries[rc.Name]
			}
			if uses {
				out = append(out, podContainer{c: c, field: fmt.Sprintf("spec.%s[%d]", list.field, i),
					pointer: "/spec/" + list.field + "/" + strconv.Itoa(i)})
			}
		}
	}
	return out
}

// RegionPatchWithClaims is the region patch of a pod being created whose vGPU claim
// entries are vgpuEntries: the volume, sized for every container that keeps a region,
// and its mount in each of them that lacks it. A pod with neither vGPU resources nor
// vGPU claims gets nothing.
func (p *Policy) RegionPatchWithClaims(pod *corev1.Pod, vgpuEntries map[string]bool) []PatchOp {
	return regionVolumeOps(pod, p.regionContainers(pod, vgpuEntries))
}

// ClaimRegionRefusal is regionRefusal for a pod with vGPU claim entries: once any of its
// region-keeping containers uses the reserved name or path, each of them must pass
// api.CheckRegionVolume and mount nothing over the volume's directory.
func (p *Policy) ClaimRegionRefusal(pod *corev1.Pod, vgpuEntries map[string]bool) string {
	return refusal(pod, p.regionContainers(pod, vgpuEntries))
}
