package ui

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/cli"
)

const a100 = "NVIDIA A100-SXM4-40GB"

func card(uuid string, index int) api.Card {
	return api.Card{UUID: uuid, Index: index, Model: a100, MemoryMiB: 40960, Shares: 4, Healthy: true}
}

// gpuNode is a node whose agent published cards with a fresh heartbeat.
func gpuNode(t testing.TB, name string, cards ...api.Card) *corev1.Node {
	t.Helper()
	s, err := api.EncodeInventory(&api.NodeInventory{Version: api.InventoryVersion, Cards: cards})
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
		api.AnnotationInventory: s, api.AnnotationHeartbeat: time.Now().Format(time.RFC3339)}}}
}

// vgpuPod is a pending pod of a VolcanoJob with one container "main" asking for
// cards × mib × cores, in the PodGroup group.
func vgpuPod(ns, name, queue, group string, cards, mib, cores int64) *corev1.Pod {
	lim := corev1.ResourceList{
		api.ResourceNumber: *resource.NewQuantity(cards, resource.DecimalSI),
		api.ResourceMemory: *resource.NewQuantity(mib, resource.DecimalSI),
		api.ResourceCores:  *resource.NewQuantity(cores, resource.DecimalSI),
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Minute)),
			Annotations: map[string]string{cli.QueueKey: queue, groupNameKey: group}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: lim}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// placed binds p to node with the cards, as the scheduler's Binding would.
func placed(t testing.TB, p *corev1.Pod, node string, cards ...api.CardAssignment) *corev1.Pod {
	t.Helper()
	s, err := api.EncodeAssignment(&api.PodAssignment{Version: api.AssignmentVersion, Node: node, QoS: api.QoSFixedShare,
		Containers: []api.ContainerAssignment{{Name: "main", Cards: cards}}})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	p.Annotations[api.AnnotationAssignment] = s
	p.Annotations[api.AnnotationAssignedAt] = fmt.Sprint(time.Now().Add(-time.Minute).UnixNano())
	p.Annotations[api.AnnotationHandoff] = api.HandoffDone
	return p
}

func unschedulable(p *corev1.Pod, message string) *corev1.Pod {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: "Unschedulable", Message: message})
	return p
}

// volcanoQueue is a Volcano Queue as the API server serves it.
func volcanoQueue(name string, weight int64, capability map[string]any) *unstructured.Unstructured {
	spec := map[string]any{"weight": weight}
	if capability != nil {
		spec["capability"] = capability
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
		"metadata": map[string]any{"name": name}, "spec": spec, "status": map[string]any{"state": "Open"}}}
}

// volcanoPodGroup is a PodGroup owned by the VolcanoJob job, in phase, with an
// Unschedulable condition when message is set.
func volcanoPodGroup(ns, name, job, queue, phase string, minMember, cards int64, message string) *unstructured.Unstructured {
	status := map[string]any{"phase": phase}
	if message != "" {
		status["conditions"] = []any{map[string]any{"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
			"message": message, "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
		"metadata": map[string]any{"name": name, "namespace": ns, "creationTimestamp": time.Now().Add(-2 * time.Minute).UTC().Format(time.RFC3339),
			"ownerReferences": []any{map[string]any{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job, "uid": "u-" + job}}},
		"spec":   map[string]any{"minMember": minMember, "queue": queue, "minResources": map[string]any{api.ResourceNumber: fmt.Sprint(cards)}},
		"status": status}}
}

// fakeCluster is a fake API server: client-go's fake clientset for nodes and pods,
// the dynamic fake for Volcano's queues and PodGroups, and discovery that serves
// Volcano's scheduling API.
type fakeCluster struct {
	kube *fake.Clientset
	dyn  *dynamicfake.FakeDynamicClient

	mu      sync.Mutex
	watches map[string]int
}

func newFakeCluster(kubeObjs []runtime.Object, volcanoObjs ...runtime.Object) *fakeCluster {
	f := &fakeCluster{kube: fake.NewClientset(kubeObjs...), watches: map[string]int{},
		dyn: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
			queuesResource: "QueueList", podGroupsResource: "PodGroupList"}, volcanoObjs...)}
	f.kube.Resources = []*metav1.APIResourceList{{GroupVersion: volcanoScheduling.String(), APIResources: []metav1.APIResource{
		{Name: "queues", Kind: "Queue"}, {Name: "podgroups", Namespaced: true, Kind: "PodGroup"}}}}
	// Count the watches opened, so that a test changes the cluster only once the
	// informers watch it (the fake's watch replays nothing made before it opened).
	count := func(action k8stesting.Action) (bool, watch.Interface, error) {
		f.mu.Lock()
		f.watches[action.GetResource().Resource]++
		f.mu.Unlock()
		return false, nil, nil
	}
	f.kube.PrependWatchReactor("*", count)
	f.dyn.PrependWatchReactor("*", count)
	return f
}

func (f *fakeCluster) clients() Clients { return Clients{Kube: f.kube, Dynamic: f.dyn} }

// waitWatching waits until each resource has been watched at least n times (the
// access probe opens one watch per resource before the informers do).
func (f *fakeCluster) waitWatching(t testing.TB, n int, resources ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		ok := true
		for _, r := range resources {
			ok = ok && f.watches[r] >= n
		}
		f.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the informers never watched %v", resources)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serving runs Serve on a free loopback port until the test ends and returns its URL
// once nodes and pods are watched (a test that changes Volcano's objects waits for
// their watches too).
func serving(t testing.TB, f *fakeCluster, o Options) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan Started, 1)
	done := make(chan error, 1)
	if o.Debounce == 0 {
		o.Debounce = 20 * time.Millisecond
	}
	go func() { done <- Serve(ctx, f.clients(), o, func(s Started) { started <- s }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	select {
	case s := <-started:
		f.waitWatching(t, 2, "nodes", "pods")
		return s.URL
	case err := <-done:
		t.Fatalf("Serve: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not start")
	}
	return ""
}
