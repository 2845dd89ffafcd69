package coexist

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func node(capacity map[string]string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", UID: "uid-1"},
		Status: corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}}}
	for k, v := range capacity {
		n.Status.Capacity[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return n
}

func TestResourcesNameEveryNVIDIAGPUResourceWithCapacity(t *testing.T) {
	got := Resources(node(map[string]string{
		"nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "7", "nvidia.com/gpu.shared": "16",
		"nvidia.com/mig-2g.20gb": "0", // a plugin that left
		"volcano.sh/vgpu-number": "80", "example.com/fpga": "1",
	}))
	want := []string{"nvidia.com/gpu.shared=16", "nvidia.com/gpu=8", "nvidia.com/mig-1g.10gb=7"}
	if !slices.Equal(got, want) {
		t.Fatalf("Resources = %v, want %v", got, want)
	}
	if got := Resources(node(map[string]string{"volcano.sh/vgpu-number": "80"})); len(got) != 0 {
		t.Fatalf("Tessera's own resource counted as a conflict: %v", got)
	}
}

func events(t *testing.T, c *fake.Clientset) []corev1.Event {
	t.Helper()
	l, err := c.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// The agent waits while NVIDIA's plugin advertises the cards, says why once (log and
// a Warning event on the Node), and goes on once the resource is gone.
func TestWaitClearHoldsTheAgentUntilTheOtherPluginLeaves(t *testing.T) {
	c := fake.NewClientset(node(map[string]string{"nvidia.com/gpu": "8"}))
	g := &Guard{Client: c, Node: "gpu-1", Interval: 10 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- g.WaitClear(context.Background()) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("WaitClear returned (%v) while nvidia.com/gpu is advertised", err)
	default:
	}
	evs := events(t, c)
	if len(evs) != 1 || evs[0].Reason != ReasonConflict || evs[0].Type != corev1.EventTypeWarning ||
		evs[0].InvolvedObject.Kind != "Node" || !strings.Contains(evs[0].Message, "nvidia.com/gpu=8") ||
		!strings.Contains(evs[0].Message, "nvidia.com/gpu.deploy.device-plugin=false") {
		t.Fatalf("want one Warning event on the Node naming nvidia.com/gpu=8 and the GPU Operator's switch, got %+v", evs)
	}

	// The operator labels the node; NVIDIA's plugin leaves and the kubelet zeroes its resource.
	if _, err := c.CoreV1().Nodes().Update(context.Background(), node(map[string]string{"nvidia.com/gpu": "0"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitClear did not return once the other plugin left")
	}
	if evs := events(t, c); len(evs) != 2 || evs[1].Reason != ReasonCleared {
		t.Fatalf("want a Normal event when the conflict clears, got %+v", evs)
	}
}

func TestShareServesBesideTheOtherPlugin(t *testing.T) {
	c := fake.NewClientset(node(map[string]string{"nvidia.com/gpu": "8"}))
	g := &Guard{Client: c, Node: "gpu-1", Share: true, Interval: 10 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := g.WaitClear(ctx); err != nil {
		t.Fatalf("WaitClear with Share: %v", err)
	}
	if evs := events(t, c); len(evs) != 0 {
		t.Fatalf("sharing as configured posted events: %+v", evs)
	}
}

// A plugin that appears while the agent serves stops it (the DaemonSet restarts it
// into WaitClear).
func TestWatchStopsTheAgentWhenAnotherPluginAppears(t *testing.T) {
	c := fake.NewClientset(node(nil))
	g := &Guard{Client: c, Node: "gpu-1", Interval: 10 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- g.Watch(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	if _, err := c.CoreV1().Nodes().Update(context.Background(), node(map[string]string{"nvidia.com/mig-1g.10gb": "7"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "nvidia.com/mig-1g.10gb=7") {
			t.Fatalf("Watch = %v, want ErrConflict naming the MIG resource", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not notice the other plugin")
	}
}

// A Node the heartbeat already read stands in for the guard's own GET while it is
// younger than the interval; an older one, or none, means a GET. A conflict in an
// observed Node stops the agent as one read by a GET does.
func TestObservedNodesSpareTheGuardsReads(t *testing.T) {
	c := fake.NewClientset(node(nil))
	var gets int
	c.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		return false, nil, nil
	})
	now := time.Unix(1000, 0)
	g := &Guard{Client: c, Node: "gpu-1", Interval: 30 * time.Second, now: func() time.Time { return now }}
	ctx := context.Background()
	g.Observe(node(nil))
	if _, err := g.check(ctx); err != nil || gets != 0 {
		t.Fatalf("check right after Observe: err %v, %d GETs; want none", err, gets)
	}
	now = now.Add(29 * time.Second)
	if _, _ = g.check(ctx); gets != 0 {
		t.Errorf("check 29 s after Observe (interval 30 s): %d GETs, want none", gets)
	}
	now = now.Add(2 * time.Second)
	if _, _ = g.check(ctx); gets != 1 {
		t.Errorf("check 31 s after Observe: %d GETs, want 1", gets)
	}
	g.Observe(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "another-node"}})
	if _, _ = g.check(ctx); gets != 2 {
		t.Errorf("another node's object was taken for this one's: %d GETs, want 2", gets)
	}
	g.Observe(node(map[string]string{"nvidia.com/gpu": "8"}))
	res, err := g.check(ctx)
	if err != nil || !slices.Equal(res, []string{"nvidia.com/gpu=8"}) || gets != 2 {
		t.Errorf("observed conflict: %v, %v, %d GETs; want nvidia.com/gpu=8 without a GET", res, err, gets)
	}
}

// TestWaitClearServesANodeAsSoonAsItIsRegistered: an agent that starts before its
// kubelet has registered the Node reads it again within seconds, not after the 30 s
// interval (measured in e2e: a real-runtime node's agent waited 31 s).
func TestWaitClearServesANodeAsSoonAsItIsRegistered(t *testing.T) {
	c := fake.NewSimpleClientset()
	g := &Guard{Client: c, Node: "gpu-1", Interval: 30 * time.Second}
	go func() {
		time.Sleep(1500 * time.Millisecond)
		_, _ = c.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}}, metav1.CreateOptions{})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := g.WaitClear(ctx); err != nil {
		t.Fatalf("WaitClear: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the node existed after 1.5 s; WaitClear returned after %v", took.Round(time.Millisecond))
	}
}
