package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tessera-gpu/tessera/api"
)

// fetchView reads /api/view.
func fetchView(t testing.TB, url string) *View {
	t.Helper()
	res, err := http.Get(url + "api/view")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/view: %s", res.Status)
	}
	v := &View{}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
	return v
}

// eventually polls /api/view until cond holds.
func eventually(t testing.TB, url, what string, cond func(*View) bool) *View {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := fetchView(t, url)
		if cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(v, "", " ")
			t.Fatalf("the view never showed %s; last:\n%s", what, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func tenantsOf(v *View) []string {
	var out []string
	for _, n := range v.Cards.Nodes {
		for _, c := range n.Cards {
			for _, p := range c.Pods {
				out = append(out, p.Namespace+"/"+p.Pod+"@"+c.UUID)
			}
		}
	}
	return out
}

// The page follows the cluster: a pod bound after the page was served appears on its
// card, a queue created appears with its share, a PodGroup's new reason replaces the
// old, a deleted pod leaves its card, each through the informers' watches.
func TestTheViewFollowsWatchEvents(t *testing.T) {
	ctx := context.Background()
	f := newFakeCluster([]runtime.Object{gpuNode(t, "gpu-a", card("GPU-0", 0), card("GPU-1", 1))},
		volcanoQueue("research", 1, nil))
	url := serving(t, f, Options{})
	f.waitWatching(t, 2, "queues", "podgroups")
	first := fetchView(t, url)
	if len(tenantsOf(first)) != 0 || len(first.Queues) != 1 || first.Version == 0 {
		t.Fatalf("first view: tenants %v, queues %+v, version %d", tenantsOf(first), first.Queues, first.Version)
	}

	pod := placed(t, vgpuPod("ml", "train-0", "research", "train-pg", 1, 20000, 50), "gpu-a",
		api.CardAssignment{UUID: "GPU-1", MemoryMiB: 20000, Cores: 50})
	if _, err := f.kube.CoreV1().Pods("ml").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v := eventually(t, url, "ml/train-0 on card GPU-1", func(v *View) bool {
		return strings.Join(tenantsOf(v), ",") == "ml/train-0@GPU-1"
	})
	if v.Version <= first.Version || v.Queues[0].Held.Cores != 50 || v.Queues[0].Running != 1 {
		t.Errorf("after the bind: version %d (first %d), research %+v, want a new version and 50 cores held", v.Version, first.Version, v.Queues[0])
	}

	if _, err := f.dyn.Resource(queuesResource).Create(ctx, volcanoQueue("prod", 3, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, url, "queue prod", func(v *View) bool {
		return len(v.Queues) == 2 && v.Queues[0].Queue == "prod" && v.Queues[0].Weight == 3
	})

	waiting := vgpuPod("ml", "wide-0", "research", "wide-pg", 4, 1000, 10)
	group := volcanoPodGroup("ml", "wide-pg", "wide", "research", "Inqueue", 1, 4, "")
	if _, err := f.kube.CoreV1().Pods("ml").Create(ctx, waiting, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.dyn.Resource(podGroupsResource).Namespace("ml").Create(ctx, group, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, url, "wide-0 waiting in an admitted gang", func(v *View) bool {
		return len(v.Pending) == 1 && v.Pending[0].Name == "wide-0" && v.Pending[0].Reason == admittedState && v.Pending[0].Job == "wide"
	})
	const why = "1/1 tasks in gang unschedulable: vgpu: node gpu-a has 2 cards, the container asks for 4"
	group = volcanoPodGroup("ml", "wide-pg", "wide", "research", "Inqueue", 1, 4, why)
	if _, err := f.dyn.Resource(podGroupsResource).Namespace("ml").Update(ctx, group, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, url, "the gang's new reason", func(v *View) bool {
		return len(v.Pending) == 1 && strings.HasSuffix(v.Pending[0].Reason, why) && v.Pending[0].From == FromPodGroup
	})

	if err := f.kube.CoreV1().Pods("ml").Delete(ctx, "train-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, url, "card GPU-1 free again", func(v *View) bool { return len(tenantsOf(v)) == 0 })
}

// A pod that finishes leaves the cards, although the fake API server ignores the
// informer's field selector and reports it as updated rather than gone.
func TestAFinishedPodLeavesItsCard(t *testing.T) {
	ctx := context.Background()
	pod := placed(t, vgpuPod("ml", "job-0", "research", "job-pg", 1, 20000, 50), "gpu-a",
		api.CardAssignment{UUID: "GPU-0", MemoryMiB: 20000, Cores: 50})
	f := newFakeCluster([]runtime.Object{gpuNode(t, "gpu-a", card("GPU-0", 0)), pod})
	url := serving(t, f, Options{})
	eventually(t, url, "job-0 on GPU-0", func(v *View) bool { return len(tenantsOf(v)) == 1 })
	pod.Status.Phase = corev1.PodSucceeded
	if _, err := f.kube.CoreV1().Pods("ml").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, url, "GPU-0 free", func(v *View) bool { return len(tenantsOf(v)) == 0 })
}

// A burst of watch events costs one rebuild, not one each.
func TestABurstOfChangesIsOneRebuild(t *testing.T) {
	var builds atomic.Int32
	b := newBoard(func() (*View, error) {
		n := builds.Add(1)
		return &View{Pending: make([]Pending, n)}, nil
	}, 100*time.Millisecond, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.run(ctx) }()
	versions, stop, ok := b.subscribe()
	if !ok {
		t.Fatal("subscribe refused")
	}
	defer stop()
	for i := 0; i < 500; i++ {
		b.changed()
	}
	select {
	case v := <-versions:
		if v != 1 {
			t.Errorf("first version %d, want 1", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no rebuild after the burst")
	}
	time.Sleep(300 * time.Millisecond)
	if n := builds.Load(); n != 1 {
		t.Errorf("%d rebuilds for a burst of 500 events, want 1", n)
	}
	cancel()
	<-done
	if _, open := <-versions; open {
		t.Error("the subscription is still open after the board stopped")
	}
}

// An unchanged cluster publishes no new version on the periodic rebuild.
func TestAResyncWithoutChangeKeepsTheVersion(t *testing.T) {
	b := newBoard(func() (*View, error) { return &View{Generated: time.Now().String()}, nil }, time.Millisecond, time.Hour)
	for i := 0; i < 3; i++ {
		if err := b.rebuild(); err != nil {
			t.Fatal(err)
		}
	}
	if v, _ := b.current(); v != 1 {
		t.Errorf("version %d after three identical rebuilds, want 1", v)
	}
}

func TestWatchedPodGroupsDecode(t *testing.T) {
	groups := decodePodGroups([]*unstructured.Unstructured{volcanoPodGroup("ml", "g", "job", "q", "Pending", 2, 4, "why")})
	g := groups["ml/g"]
	if g == nil || g.job() != "job" || g.Spec.MinMember != 2 || g.unschedulable() != "NotEnoughResources: why" {
		t.Errorf("decoded %+v", g)
	}
}
