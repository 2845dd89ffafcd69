package workload

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tessera-gpu/tessera/api"
)

// CardUse is one card and what the live pods assigned to it hold.
type CardUse struct {
	Node      string
	Card      api.Card
	MemoryMiB int64
	Cores     int
	Holders   []Holder
}

// Holder is one container's share of a card.
type Holder struct {
	Namespace, Pod, Container, Queue string
	MemoryMiB                        int64
	Cores                            int
	Phase                            corev1.PodPhase
}

// Ledger sums, for every card of every node, the assignments of the pods that are bound
// and not finished. Keys are node/UUID.
func Ledger(ctx context.Context, c kubernetes.Interface) (map[string]*CardUse, []corev1.Pod, error) {
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	out := map[string]*CardUse{}
	for _, n := range nodes.Items {
		raw := n.Annotations[api.AnnotationInventory]
		if raw == "" {
			continue
		}
		inv, err := api.DecodeInventory(raw)
		if err != nil {
			return nil, nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
		for _, card := range inv.Cards {
			out[n.Name+"/"+card.UUID] = &CardUse{Node: n.Name, Card: card}
		}
	}
	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		raw := p.Annotations[api.AnnotationAssignment]
		if raw == "" {
			continue
		}
		a, err := api.DecodeAssignment(raw)
		if err != nil {
			return nil, nil, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		for _, ctr := range a.Containers {
			for _, card := range ctr.Cards {
				u := out[a.Node+"/"+card.UUID]
				if u == nil {
					return nil, nil, fmt.Errorf("pod %s/%s: card %s is not on node %s", p.Namespace, p.Name, card.UUID, a.Node)
				}
				u.MemoryMiB += card.MemoryMiB
				u.Cores += card.Cores
				u.Holders = append(u.Holders, Holder{Namespace: p.Namespace, Pod: p.Name, Container: ctr.Name,
					Queue: p.Annotations["volcano.sh/queue-name"], MemoryMiB: card.MemoryMiB, Cores: card.Cores, Phase: p.Status.Phase})
			}
		}
	}
	return out, pods.Items, nil
}

// Overcommitted lists every card whose assignments exceed its memory or 100% of its SMs.
func Overcommitted(l map[string]*CardUse) []string {
	var bad []string
	for k, u := range l {
		if u.MemoryMiB > u.Card.MemoryMiB || u.Cores > 100 {
			bad = append(bad, fmt.Sprintf("%s: %d/%d MiB, %d%% cores, holders %v", k, u.MemoryMiB, u.Card.MemoryMiB, u.Cores, u.Holders))
		}
		for _, h := range u.Holders {
			if h.Cores == 100 && len(u.Holders) > 1 {
				bad = append(bad, fmt.Sprintf("%s: exclusive holder %s shares with %d others", k, h.Pod, len(u.Holders)-1))
			}
		}
	}
	sort.Strings(bad)
	return bad
}
