package dra

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

// ClaimRecords describes each pod's use of each prepared claim as the agent's usage
// metrics read a device-plugin container: one records.Record per pod and claim, keyed by
// the pod's UID, whose Container is what names the claim's region file
// (api.RegionFile(rec.Container) is the file the claim's limits file names) and whose
// RegionVolume says whether that file is on the pod's region volume, where the metrics
// read it (<kubelet pods dir>/<pod UID>/volumes/kubernetes.io~empty-dir/tessera-region/).
// The series it makes name the claim's pod, with container "claim-<claim UID>": a claim's
// region counts every container of the pod that uses the claim. Claims are matched to
// pods as ClaimPodLimits matches them. On a DRA node the agent's metrics read them
// through ClaimSource.
func ClaimRecords(prepared map[string]PreparedClaim, pods []*corev1.Pod) map[string][]*records.Record {
	byName := map[[2]string][]string{}
	for uid, c := range prepared {
		k := [2]string{c.Namespace, c.Name}
		byName[k] = append(byName[k], uid)
	}
	out := map[string][]*records.Record{}
	for _, pod := range pods {
		var uids []string
		for _, name := range PodClaimNames(pod) {
			uids = append(uids, byName[[2]string{pod.Namespace, name}]...)
		}
		slices.Sort(uids)
		for _, uid := range slices.Compact(uids) {
			c := prepared[uid]
			rec := &records.Record{Namespace: pod.Namespace, Pod: pod.Name, UID: string(pod.UID),
				Container: regionContainer(uid, c.Region), QoS: api.DefaultQoS, RegionVolume: c.Region == RegionVolume}
			for _, d := range c.Devices {
				rec.Cards = append(rec.Cards, api.CardAssignment{UUID: d.UUID, MemoryMiB: d.MemoryMiB, Cores: d.Cores})
			}
			out[string(pod.UID)] = append(out[string(pod.UID)], rec)
		}
	}
	return out
}

// ClaimSource is the usage metrics' source of records on a DRA node (metrics.RecordSource):
// at each scrape, ClaimRecords of the driver's prepared claims and the node's pods.
type ClaimSource struct {
	// Prepared returns the driver's prepared claims; nil or empty before the driver has
	// loaded its checkpoint.
	Prepared func() map[string]PreparedClaim
	Pods     PodLister
}

// Records implements the metrics' RecordSource.
func (s ClaimSource) Records() (map[string][]*records.Record, error) {
	pods, err := s.Pods()
	if err != nil {
		return nil, err
	}
	return ClaimRecords(s.Prepared(), pods), nil
}
