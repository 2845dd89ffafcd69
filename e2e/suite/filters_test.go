package suite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// Filters and policies: type and UUID include/exclude are hard filters, spread puts a
// job's pods on different cards, binpack on one, and vgpu-cores 100 gets a card alone.
func TestFiltersAndPolicies(t *testing.T) {
	n := ns(t, "filters")
	defer cleanup(t, n)
	small := workload.Container{Name: "main", Cards: 1, MemPct: 10, Cores: 10}
	cases := []struct {
		name     string
		replicas int32
		ann      map[string]string
		ctr      workload.Container
		// check gets the cards (node/UUID) of each pod.
		check func(t *testing.T, cards [][]string)
	}{
		// The policies first, while every card is idle.
		// Among the two 8-card A100 nodes (node scores are mean card utilisation, so nodes
		// of different sizes can tie): spread takes both, binpack one.
		{"node-spread", 2, map[string]string{api.AnnotationGPUTypeInclude: "A100", api.AnnotationNodePolicy: "spread"}, small, distinctNodes(2)},
		{"node-binpack", 4, map[string]string{api.AnnotationGPUTypeInclude: "A100", api.AnnotationNodePolicy: "binpack"}, small, distinctNodes(1)},
		{"spread", 4, map[string]string{api.AnnotationGPUTypeInclude: "L40S", api.AnnotationCardPolicy: "spread"}, small, distinctCards(4)},
		{"binpack", 4, map[string]string{api.AnnotationGPUTypeInclude: "A30", api.AnnotationCardPolicy: "binpack"}, small, distinctCards(1)},
		{"type-include-a30", 2, map[string]string{api.AnnotationGPUTypeInclude: "a30"}, small, onCards("GPU-gpu-c-0", "GPU-gpu-c-1", "GPU-gpu-c-2", "GPU-gpu-c-3")},
		{"type-exclude", 2, map[string]string{api.AnnotationGPUTypeExclude: "A100,A30"}, small, onCards("GPU-gpu-d-0", "GPU-gpu-d-1", "GPU-gpu-d-2", "GPU-gpu-d-3")},
		{"uuid-include", 1, map[string]string{api.AnnotationGPUUUIDInclude: "GPU-gpu-b-5"}, small, onCards("GPU-gpu-b-5")},
		{"uuid-exclude", 2, map[string]string{api.AnnotationGPUTypeInclude: "L40S", api.AnnotationGPUUUIDExclude: "GPU-gpu-d-0,GPU-gpu-d-1,GPU-gpu-d-2"}, small, onCards("GPU-gpu-d-3")},
		{"exclusive", 2, map[string]string{api.AnnotationGPUTypeInclude: "A100"}, workload.Container{Name: "main", Cards: 1, Cores: 100}, alone(n)},
	}
	for _, c := range cases {
		submit(t, workload.Job(n, c.name, "default", c.replicas, workload.Task{Name: "t", Replicas: c.replicas, Annotations: c.ann, Containers: []workload.Container{c.ctr}}))
		pods, err := workload.WaitPods(context.Background(), cl.Client, n, c.name, 2*time.Minute, workload.AllPhase(int(c.replicas), corev1.PodRunning))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var cards [][]string
		for _, p := range pods {
			a, err := api.DecodeAssignment(p.Annotations[api.AnnotationAssignment])
			if err != nil {
				t.Fatalf("%s: pod %s: %v", c.name, p.Name, err)
			}
			var mine []string
			for _, card := range a.Containers[0].Cards {
				mine = append(mine, card.UUID)
			}
			cards = append(cards, mine)
		}
		t.Run(c.name, func(t *testing.T) { c.check(t, cards) })
		checkHandoff(t, pods)
	}
	noOvercommit(t)
}

func onCards(allowed ...string) func(*testing.T, [][]string) {
	return func(t *testing.T, cards [][]string) {
		ok := map[string]bool{}
		for _, a := range allowed {
			ok[a] = true
		}
		for _, pod := range cards {
			for _, u := range pod {
				if !ok[u] {
					t.Errorf("card %s is not one of %v", u, allowed)
				}
			}
		}
	}
}

func distinctCards(want int) func(*testing.T, [][]string) {
	return func(t *testing.T, cards [][]string) {
		set := map[string]bool{}
		for _, pod := range cards {
			for _, u := range pod {
				set[u] = true
			}
		}
		if len(set) != want {
			t.Errorf("pods on %d distinct cards %v, want %d", len(set), cards, want)
		}
	}
}

// distinctNodes checks the pods' nodes (from the harness's UUIDs, GPU-<node>-<index>).
func distinctNodes(want int) func(*testing.T, [][]string) {
	return func(t *testing.T, cards [][]string) {
		set := map[string]bool{}
		for _, pod := range cards {
			for _, u := range pod {
				set[u[len("GPU-"):strings.LastIndex(u, "-")]] = true
			}
		}
		if len(set) != want {
			t.Errorf("pods on %d distinct nodes %v, want %d", len(set), cards, want)
		}
	}
}

// alone checks that each card given to the namespace's exclusive pods has no other holder.
func alone(ns string) func(*testing.T, [][]string) {
	return func(t *testing.T, cards [][]string) {
		l, _, err := workload.Ledger(context.Background(), cl.Client)
		if err != nil {
			t.Fatal(err)
		}
		for _, pod := range cards {
			for _, u := range pod {
				for _, use := range l {
					if use.Card.UUID == u && len(use.Holders) != 1 {
						t.Errorf("exclusive card %s has holders %s", u, fmt.Sprint(use.Holders))
					}
				}
			}
		}
	}
}
