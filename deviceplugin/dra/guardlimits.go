package dra

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/deviceplugin/memguard"
	"github.com/tessera-gpu/tessera/deviceplugin/nodepods"
)

// The memory guard on a DRA node: it holds each pod to the memory of the prepared claims
// its containers reference, per card. A claim's limits file names one region per pod
// (the pod's own /dev/shm), so vgpu-core holds every process of a pod that uses the
// claim to the claim's memory on each of its cards, however many of the pod's containers
// reference it; the guard counts each claim once per pod for the same reason. A claim
// shared by two pods gives each pod the claim's whole memory, as vgpu-core does.
//
// Which claims a pod uses comes from the pod in the API server (its containers'
// resources.claims, its spec.resourceClaims and, for claims made from a template, its
// status.resourceClaimStatuses): the kubelet gives a container a claim's devices only
// through those fields, and none of them can be changed by what runs in the pod. What a
// claim holds comes from the driver's checkpoint only: a claim the node has not prepared,
// or has unprepared, gives nothing, and a pod none of whose claims is prepared here is not
// the guard's to judge (it counts as unmanaged, as a pod without a Tessera assignment on a
// device-plugin node does).

// PreparedSource is what the guard reads of the driver: its checkpoint's claims
// (*Preparer).
type PreparedSource interface {
	Prepared() map[string]PreparedClaim
}

// ClaimPodLimits is the memory each pod may hold per card, in bytes, from the claims its
// containers reference that prepared (the checkpoint, by claim UID) holds. Claims are
// matched by namespace and name, each counted once per pod. Two prepared claims of the
// same namespace and name (one deleted and made again while the first is still
// prepared) both count: the guard then allows more rather than stop a pod on a guess.
func ClaimPodLimits(prepared map[string]PreparedClaim, pods []*corev1.Pod) map[types.UID]memguard.PodLimits {
	out := map[types.UID]memguard.PodLimits{}
	for uid, recs := range ClaimRecords(prepared, pods) {
		pl := memguard.PodLimits{Namespace: recs[0].Namespace, Name: recs[0].Pod, Cards: map[string]uint64{}}
		for _, r := range recs {
			for _, c := range r.Cards {
				pl.Cards[c.UUID] += uint64(c.MemoryMiB) << 20
			}
		}
		out[types.UID(uid)] = pl
	}
	return out
}

// PodClaimNames lists, once each and sorted, the names of the ResourceClaims the pod's
// containers (init containers included) reference: a claim named in spec.resourceClaims
// directly, or the one the resource claim controller made from a template, as the pod's
// status records it. An entry no container references, or whose claim is not made yet,
// names nothing.
func PodClaimNames(pod *corev1.Pod) []string {
	used := map[string]bool{}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			for _, rc := range list[i].Resources.Claims {
				used[rc.Name] = true
			}
		}
	}
	var names []string
	for _, prc := range pod.Spec.ResourceClaims {
		if n := podClaimName(pod, prc); used[prc.Name] && n != "" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// PodLister lists the pods bound to this node.
type PodLister func() ([]*corev1.Pod, error)

// GuardLimits is the memory guard's limits on a DRA node: at each check, the driver's
// prepared claims (read then, so a claim unprepared since the last check is forgotten)
// against the node's pods.
func GuardLimits(prep PreparedSource, pods PodLister) memguard.Limits {
	return func() (map[types.UID]memguard.PodLimits, error) {
		ps, err := pods()
		if err != nil {
			return nil, err
		}
		return ClaimPodLimits(prep.Prepared(), ps), nil
	}
}

// ErrPodsNotSynced is returned by the node's pod list before its informer has listed
// once: the guard then skips its check rather than judge every pod unmanaged.
var ErrPodsNotSynced = nodepods.ErrPodsNotSynced
