// Package scale runs `make scale`: one workload of VolcanoJobs against a thousand kwok
// GPU nodes, placed by three schedulers in turn (Volcano with no device plugin, Volcano's
// deviceshare with VGPUEnable, Tessera), and the figures that compare them.
package scale

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
)

// Card models of the simulated nodes: both 80 GB, so a request fits either unless a
// type filter says otherwise. The names carry no ',', ':' or ';' so that the HAMi
// registration grammar can hold them unchanged.
const (
	ModelA100 = "NVIDIA-A100-SXM4-80GB"
	ModelH100 = "NVIDIA-H100-80GB-HBM3"
	CardMiB   = 81920
	// CardsPerNode cards per node, the first half on NUMA node 0, the rest on 1.
	CardsPerNode = 8
	// SharesPerCard is the node agent's default: slots advertised per card.
	SharesPerCard = 10
)

// KwokAnnotation marks the nodes kwok manages (kwok's own key and value).
const (
	KwokAnnotation = "kwok.x-k8s.io/node"
	KwokValue      = "fake"
	// NodePrefix names the simulated nodes: gpu-0000, gpu-0001, ...
	NodePrefix = "gpu-"
)

// NodeModel is the card model of node i: one node in three has H100s.
func NodeModel(i int) string {
	if i%3 == 2 {
		return ModelH100
	}
	return ModelA100
}

// NodeName is the name of node i.
func NodeName(i int) string { return fmt.Sprintf("%s%04d", NodePrefix, i) }

// NodeInventory is what Tessera's node agent would publish for node i: eight cards of
// one model, two NUMA nodes, every pair joined by NVLink through the NVSwitch.
func NodeInventory(i int) *api.NodeInventory {
	model := NodeModel(i)
	sms, link := 108, api.LinkType("NV12")
	if model == ModelH100 {
		sms, link = 132, "NV18"
	}
	inv := &api.NodeInventory{Version: api.InventoryVersion}
	for c := 0; c < CardsPerNode; c++ {
		inv.Cards = append(inv.Cards, api.Card{UUID: CardUUID(i, c), Index: c, Model: model, MemoryMiB: CardMiB,
			SMCount: sms, NUMA: c * 2 / CardsPerNode, Shares: SharesPerCard, Healthy: true})
	}
	inv.Links = make([][]api.LinkType, CardsPerNode)
	for a := range inv.Links {
		inv.Links[a] = make([]api.LinkType, CardsPerNode)
		for b := range inv.Links[a] {
			inv.Links[a][b] = link
		}
		inv.Links[a][a] = api.LinkSelf
	}
	return inv
}

// CardUUID is the UUID of card c of node i, unique in the cluster.
func CardUUID(i, c int) string { return fmt.Sprintf("GPU-%08x-5ca1-4e00-8000-%012x", i, c) }

// Node returns node i as it stands once its agents have registered: Tessera's inventory
// and heartbeat, the HAMi volcano device plugin's registration of the same cards (the
// six-field form Volcano v1.14 reads, with its handshake), and the card slots, CPU and
// memory in its capacity. kwok makes it Ready; Heartbeat's annotations are added by the
// caller, as the agents refresh them.
func Node(i int) (*corev1.Node, error) {
	inv := NodeInventory(i)
	s, err := api.EncodeInventory(inv)
	if err != nil {
		return nil, err
	}
	reg := make([]api.VolcanoCard, len(inv.Cards))
	for c, card := range inv.Cards {
		reg[c] = api.VolcanoCard{UUID: card.UUID, Count: card.Shares, MemoryMiB: card.MemoryMiB, Type: card.Model,
			Healthy: true, Mode: "hami-core"}
	}
	r, err := api.EncodeVolcanoNodeRegister(reg)
	if err != nil {
		return nil, err
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("128"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   resource.MustParse("110"),
		api.ResourceNumber:    *resource.NewQuantity(CardsPerNode*SharesPerCard, resource.DecimalSI),
	}
	name := NodeName(i)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"kubernetes.io/hostname": name, "type": "kwok", "tessera.io/gpu-model": inv.Cards[0].Model},
			Annotations: map[string]string{KwokAnnotation: KwokValue, api.AnnotationInventory: s,
				api.VolcanoNodeRegister: r}},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res.DeepCopy(),
			NodeInfo: corev1.NodeSystemInfo{Architecture: "amd64", OperatingSystem: "linux"}},
	}, nil
}

// Heartbeat is the node annotations the agents refresh: Tessera's heartbeat and the
// HAMi handshake. In a cluster the HAMi plugin writes "Reported_<time>" and Volcano's
// scheduler answers "Requesting_<time>" (a "Requesting" older than a minute makes it drop
// the node's cards). Outside a pod Volcano's vgpu package has no API client for that
// answer (it dereferences a nil clientset), so the harness writes the answer's steady
// state, a fresh "Requesting", itself.
func Heartbeat(now time.Time) map[string]string {
	return map[string]string{
		api.AnnotationHeartbeat:  now.UTC().Format(time.RFC3339),
		api.VolcanoNodeHandshake: "Requesting_" + now.Format("2006.01.02 15:04:05"),
	}
}
