package ui

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tessera-gpu/tessera/api"
)

// forbid makes the fake API server refuse list and watch of a resource, cluster-wide
// only when clusterWide is set.
func forbid(f *fakeCluster, resource string, clusterWide bool) {
	refused := func(a k8stesting.Action) bool { return !clusterWide || a.GetNamespace() == "" }
	err := apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", nil)
	list := func(a k8stesting.Action) (bool, runtime.Object, error) { return refused(a), nil, err }
	open := func(a k8stesting.Action) (bool, watch.Interface, error) { return refused(a), nil, err }
	f.kube.PrependReactor("list", resource, list)
	f.kube.PrependWatchReactor(resource, open)
	f.dyn.PrependReactor("list", resource, list)
	f.dyn.PrependWatchReactor(resource, open)
}

func TestAnAccountLimitedToItsNamespaceSeesItsOwnPods(t *testing.T) {
	mine := placed(t, vgpuPod("team-a", "mine", "research", "pg", 1, 1000, 10), "gpu-a", api.CardAssignment{UUID: "GPU-0", MemoryMiB: 1000, Cores: 10})
	theirs := placed(t, vgpuPod("team-b", "theirs", "prod", "pg", 1, 1000, 10), "gpu-a", api.CardAssignment{UUID: "GPU-1", MemoryMiB: 1000, Cores: 10})
	f := newFakeCluster([]runtime.Object{gpuNode(t, "gpu-a", card("GPU-0", 0), card("GPU-1", 1)), mine, theirs})
	forbid(f, "pods", true)
	forbid(f, "podgroups", true)
	url := serving(t, f, Options{Namespace: "team-a"})
	v := fetchView(t, url)
	if got := strings.Join(tenantsOf(v), ","); got != "team-a/mine@GPU-0" {
		t.Errorf("tenants %s, want team-a's pod alone", got)
	}
	if len(v.Unread) != 1 || !strings.Contains(v.Unread[0], "only namespace team-a is read") {
		t.Errorf("unread %q, want the namespace fallback said", v.Unread)
	}

	r, err := probeReach(context.Background(), f.clients(), Options{Namespace: "team-a", AllNamespaces: true})
	if err == nil || !apierrors.IsForbidden(err) {
		t.Errorf("-A with pods refused cluster-wide: %+v, %v; want the Forbidden error", r, err)
	}
}

func TestAnAccountThatMayNotWatchNodesIsToldSo(t *testing.T) {
	f := newFakeCluster(nil)
	forbid(f, "nodes", false)
	_, err := probeReach(context.Background(), f.clients(), Options{Namespace: "default"})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "list and watch") {
		t.Errorf("probe: %v, want Forbidden saying the card map needs list and watch", err)
	}
}

func TestWithoutVolcanoOrItsQueuesTheCardsStillShow(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(f *fakeCluster)
		unread string
		groups bool
	}{
		{"Volcano's API is not served", func(f *fakeCluster) { f.kube.Resources = nil }, "not served", false},
		{"queues are refused", func(f *fakeCluster) { forbid(f, "queues", false) }, "may not list and watch Volcano queues", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeCluster([]runtime.Object{gpuNode(t, "gpu-a", card("GPU-0", 0))}, volcanoQueue("research", 1, nil))
			c.setup(f)
			r, err := probeReach(context.Background(), f.clients(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if r.queues || r.podGroups != c.groups || len(r.unread) != 1 || !strings.Contains(r.unread[0], c.unread) {
				t.Errorf("reach %+v, want no queues, PodGroups %v, unread saying %q", r, c.groups, c.unread)
			}
			v := fetchView(t, serving(t, f, Options{}))
			if v.Cards.Totals.Cards != 1 || len(v.Queues) != 0 {
				t.Errorf("view: %d cards, queues %+v; want the card and no queues", v.Cards.Totals.Cards, v.Queues)
			}
		})
	}
}
