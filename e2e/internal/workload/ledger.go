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
// and not finished. Keys are node/UUID; a whole MIG instance is keyed by its MIG UUID.
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
		// Each MIG instance is a card of its own here (node/MIG-UUID), in MIG mode like its
		// parent, of the instance's memory: a whole instance has one holder at most.
		if raw := n.Annotations[api.AnnotationMIGInstances]; raw != "" {
			m, err := api.DecodeMIGInstances(raw)
			if err != nil {
				return nil, nil, fmt.Errorf("node %s: %w", n.Name, err)
			}
			for parent, ins := range m.Cards {
				healthy := out[n.Name+"/"+parent] != nil && out[n.Name+"/"+parent].Card.Healthy
				for _, in := range ins {
					out[n.Name+"/"+in.UUID] = &CardUse{Node: n.Name, Card: api.Card{UUID: in.UUID, MemoryMiB: in.MemoryMiB,
						Healthy: healthy, MIG: true, Model: in.Profile}}
				}
			}
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
				key := card.UUID
				if card.IsMIG() {
					key = card.MIG
				}
				u := out[a.Node+"/"+key]
				if u == nil {
					return nil, nil, fmt.Errorf("pod %s/%s: card %s is not on node %s", p.Namespace, p.Name, key, a.Node)
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
