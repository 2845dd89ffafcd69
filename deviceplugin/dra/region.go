package dra

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/tessera-gpu/tessera/api"
)

// Where a claim's containers keep vgpu-core's shared region. A claim's limits file is one
// file for every container that references the claim, in every pod it is reserved for,
// so the region it names must be a path each pod has of its own: the pod's region volume
// (api.RegionVolumeName, a memory-backed emptyDir the agent reads from the kubelet's
// side) or the pod's /dev/shm (which the agent cannot read). Either way every process of
// a pod that uses the claim shares one account per card, and two pods never share one.
// The file is named after the claim, so two claims in one pod keep two regions.
//
// The choice is made when the claim is first prepared and kept in the checkpoint: a
// limits file never changes under a running pod.
const (
	// RegionLegacy is a claim prepared by an agent that named one region file per pod
	// for every claim (/dev/shm/tessera-claim.region); it keeps it.
	RegionLegacy = ""
	// RegionShm keeps the region in the pod's /dev/shm.
	RegionShm = "shm"
	// RegionVolume keeps it on the pod's region volume.
	RegionVolume = "volume"
)

// legacyRegionContainer is the "container" part of the legacy region file name.
const legacyRegionContainer = claimContainer

// regionContainer is what names the claim's region file (api.RegionFile): the claim's
// UID, or "claim" for a legacy entry.
func regionContainer(uid, region string) string {
	if region == RegionLegacy {
		return legacyRegionContainer
	}
	return "claim-" + uid
}

// RegionPath is the region path a claim's limits file names inside its containers.
func RegionPath(uid, region string) string {
	return api.RegionPathIn(region == RegionVolume, regionContainer(uid, region))
}

// RegionFileName is the claim's region file in a pod's region volume (RegionVolume only):
// the agent reads it at <kubelet pods dir>/<pod UID>/volumes/kubernetes.io~empty-dir/
// tessera-region/<RegionFileName>.
func RegionFileName(uid string) string { return api.RegionFile(regionContainer(uid, RegionVolume)) }

func validRegion(r string) bool { return r == RegionLegacy || r == RegionShm || r == RegionVolume }

// PodGetter finds a pod bound to this node by namespace and name.
type PodGetter func(namespace, name string) (*corev1.Pod, bool)

// ChooseRegion decides where a claim being prepared keeps its regions: RegionVolume when
// the claim is reserved for pods only, each of them is found (with the UID the
// reservation names) and each of its containers that references the claim mounts the
// region volume as api.CheckRegionVolume accepts; RegionShm otherwise, with the reason.
// A pod that later joins a claim on the volume and lacks the volume fails closed in
// vgpu-core (no region directory): the webhook gives every pod that references a claim
// the volume, so only a pod admitted while the webhook was down meets it.
func ChooseRegion(claim *resourceapi.ResourceClaim, pods PodGetter) (string, string) {
	if pods == nil {
		return RegionShm, "the agent does not look up pods"
	}
	if len(claim.Status.ReservedFor) == 0 {
		return RegionShm, "the claim is reserved for no pod"
	}
	for _, ref := range claim.Status.ReservedFor {
		if ref.APIGroup != "" || ref.Resource != "pods" {
			return RegionShm, fmt.Sprintf("the claim is reserved for %s %q, not a pod", ref.Resource, ref.Name)
		}
		pod, ok := pods(claim.Namespace, ref.Name)
		if !ok || pod.UID != ref.UID {
			return RegionShm, fmt.Sprintf("pod %s/%s (uid %s) is not known on this node yet", claim.Namespace, ref.Name, ref.UID)
		}
		for _, c := range claimContainers(pod, claim.Name) {
			if err := api.CheckRegionVolume(pod, c); err != nil {
				return RegionShm, fmt.Sprintf("pod %s/%s: %v", pod.Namespace, pod.Name, err)
			}
		}
	}
	return RegionVolume, ""
}

// claimContainers names the pod's containers (init containers first) that reference the
// ResourceClaim called claim.
func claimContainers(pod *corev1.Pod, claim string) []string {
	entries := map[string]bool{}
	for _, prc := range pod.Spec.ResourceClaims {
		if podClaimName(pod, prc) == claim {
			entries[prc.Name] = true
		}
	}
	var out []string
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			for _, rc := range list[i].Resources.Claims {
				if entries[rc.Name] {
					out = append(out, list[i].Name)
					break
				}
			}
		}
	}
	return out
}

// podClaimName is the ResourceClaim a pod's claim entry stands for: named directly, or
// made from a template as the pod's status records it; "" while there is none.
func podClaimName(pod *corev1.Pod, prc corev1.PodResourceClaim) string {
	switch {
	case prc.ResourceClaimName != nil:
		return *prc.ResourceClaimName
	case prc.ResourceClaimTemplateName != nil:
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.Name == prc.Name && st.ResourceClaimName != nil {
				return *st.ResourceClaimName
			}
		}
	}
	return ""
}
