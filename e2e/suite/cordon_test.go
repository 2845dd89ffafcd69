package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/cli"
)

// Card 1 of gpu-b is cordoned with `kubectl tessera cordon` under two running pods:
// they keep running; a pod pinned to the card waits with the cordon's reason; a pod
// that may take card 1 or 2 goes to card 2. `kubectl tessera drain` evicts the two
// pods through the Eviction API and waits until they are gone; nothing then runs on
// the card. `kubectl tessera uncordon` puts it back: the pinned pod runs there.
func TestCardCordonAndDrain(t *testing.T) {
	ctx := context.Background()
	n := ns(t, "cordon")
	defer cleanup(t, n)
	const node, card, other = "gpu-b", "GPU-gpu-b-1", "GPU-gpu-b-2"
	const reason = "e2e: ECC errors"
	t.Cleanup(func() { uncordonAll(t, node) }) // never leave a card out of service for the next scenario
	pin := map[string]string{api.AnnotationGPUUUIDInclude: card}
	first := burst(n, "x", 2, pin)
	submit(t, first...)
	running := waitAllRunning(t, n, first, 2*time.Minute)

	out := tessera(t, "cordon", node, "1", "--reason", reason)
	if !strings.Contains(out, "gpu-b: card 1 ("+card+") cordoned: "+reason) {
		t.Fatalf("cordon printed %q", out)
	}
	if nodes := tessera(t, "nodes", node); !strings.Contains(nodes, "cordoned: "+reason) {
		t.Errorf("nodes does not show the cordon:\n%s", nodes)
	}

	late := burst(n, "y", 1, pin)
	submit(t, late...)
	why := pendingReason(t, n, "y", "its card is cordoned")
	// Volcano puts one node's reason on the pod; its PodGroup carries every node's.
	want := "card " + card + " is cordoned: " + reason
	if pg := podGroupReasons(t, n); !strings.Contains(why+pg, want) {
		t.Errorf("neither the pod nor its PodGroup names the cordon %q: pod %q, PodGroup %q", want, why, pg)
	}
	either := burst(n, "z", 1, map[string]string{api.AnnotationGPUUUIDInclude: card + "," + other})
	submit(t, either...)
	for _, p := range waitAllRunning(t, n, either, 2*time.Minute) {
		if got := assignedCards(t, p); got != other {
			t.Errorf("pod %s, free to take %s or %s, got %s beside the cordon", p.Name, card, other, got)
		}
	}
	for _, p := range waitAllRunning(t, n, first, 10*time.Second) {
		if !hasUID(running, p.UID) {
			t.Errorf("pod %s was replaced while its card was cordoned", p.Name)
		}
	}
	checkHandoff(t, running)

	start := time.Now()
	out = tessera(t, "drain", node, card, "--timeout", "2m")
	t.Logf("drain took %s:\n%s", time.Since(start).Round(100*time.Millisecond), out)
	for _, p := range running {
		if !strings.Contains(out, "evicting "+n+"/"+p.Name) || !strings.Contains(out, n+"/"+p.Name+" is gone") {
			t.Errorf("drain did not evict and see gone %s", p.Name)
		}
		if got, err := cl.Client.CoreV1().Pods(n).Get(ctx, p.Name, metav1.GetOptions{}); err == nil && got.UID == p.UID {
			t.Errorf("pod %s is still there after the drain (%s)", p.Name, got.Status.Phase)
		}
	}
	if on := runningOn(t, n, card); len(on) > 0 {
		t.Errorf("pods run on the drained card: %v", on)
	}

	out = tessera(t, "uncordon", node, card)
	if !strings.Contains(out, "gpu-b: card 1 ("+card+") uncordoned") {
		t.Errorf("uncordon printed %q", out)
	}
	for _, p := range waitAllRunning(t, n, late, 2*time.Minute) {
		if got := assignedCards(t, p); got != card {
			t.Errorf("the pinned pod %s runs on %s, want %s", p.Name, got, card)
		}
	}
	t.Logf("uncordoned: the pinned pod runs on %s", card)
	noOvercommit(t)
}

// tessera runs the CLI in this process on the cluster's kubeconfig and returns what it
// printed; an error fails the test.
func tessera(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	env := cli.DefaultEnv()
	env.Stdout, env.Stderr, env.Plugin = &out, &errOut, true
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cli.Run(ctx, env, args[0], append(args[1:], "--kubeconfig", cl.Kubeconfig)); err != nil {
		t.Fatalf("kubectl tessera %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String()
}

// uncordonAll removes the node's card cordons, whatever the scenario left.
func uncordonAll(t *testing.T, node string) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{api.AnnotationCordonedCards: nil}}})
	if _, err := cl.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("remove the cordons of %s: %v", node, err)
	}
}

// assignedCards is the card UUIDs of a pod's assignment, joined by commas.
func assignedCards(t *testing.T, p corev1.Pod) string {
	t.Helper()
	a, err := api.DecodeAssignment(p.Annotations[api.AnnotationAssignment])
	if err != nil {
		t.Fatalf("pod %s: %v", p.Name, err)
	}
	var uuids []string
	for _, c := range a.Containers {
		for _, cc := range c.Cards {
			uuids = append(uuids, cc.UUID)
		}
	}
	return strings.Join(uuids, ",")
}

// runningOn names the namespace's running, not terminating, pods assigned the card.
func runningOn(t *testing.T, namespace, card string) []string {
	t.Helper()
	pods, err := cl.Client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var on []string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Annotations[api.AnnotationAssignment] != "" &&
			strings.Contains(assignedCards(t, p), card) {
			on = append(on, p.Name)
		}
	}
	return on
}

func hasUID(pods []corev1.Pod, uid types.UID) bool {
	for _, p := range pods {
		if p.UID == uid {
			return true
		}
	}
	return false
}
