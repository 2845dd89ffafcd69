package suite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

// A card of gpu-c reports XID 79 while a pod bound to it is in the middle of its
// admission by gpu-c's kubelet, in three rounds on three cards. Each round holds the
// agent's PodResources questions (the relay in the harness) and binds a pod to the card,
// so that the kubelet's admission of it waits inside GetPreferredAllocation, having
// offered the card's slots as available; binds a second pod to the card and two to the
// node's other cards, which queue in the kubelet behind the first; injects the XID; and
// lets the admission go on only once the Node shows that the kubelet has taken the
// card's slots out of its healthy set. Afterwards every pod of the round runs with its
// own cards and matching handoff, or failed or stayed pending with a reason (one that
// names the unhealthy card when it failed for want of it); no card is over-committed;
// and no pod was handed the card by an Allocate after the kubelet saw it unhealthy (the
// agent's own record of each Allocate says when). The window is hit when the held pod's Allocate came with the
// card's slots after that: the round logs it, and a run without any hit fails. The
// scenario ends once the three cards have recovered, so the next one finds them healthy.
func TestFaultXIDWhilePodAdmitted(t *testing.T) {
	n := ns(t, "fault-xid-admit")
	defer cleanup(t, n)
	defer cl.ReleasePodResources("gpu-c")
	cards := []int{0, 2, 3}
	hits := 0
	for round, k := range cards {
		if xidAdmissionRound(t, n, round, k) {
			hits++
		}
	}
	t.Logf("window hit in %d of %d rounds (the held pod's Allocate came with the broken card after the kubelet saw it unhealthy)",
		hits, len(cards))
	if hits == 0 {
		t.Errorf("no round put the XID inside a pod's admission")
	}
	// The next scenario starts with every card healthy.
	if err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, recoverAfter+time.Minute, true, func(ctx context.Context) (bool, error) {
		for i := 0; i < 4; i++ {
			if _, healthy := cardHealth(ctx, "gpu-c", fmt.Sprintf("GPU-gpu-c-%d", i)); !healthy {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Errorf("the cards of gpu-c did not all recover from their XIDs")
	}
}

// xidAdmissionRound breaks card k of gpu-c while a pod bound to it is being admitted,
// checks the round's pods and reports whether the window was hit.
func xidAdmissionRound(t *testing.T, n string, round, k int) bool {
	t.Helper()
	ctx := context.Background()
	const node = "gpu-c"
	card := fmt.Sprintf("GPU-%s-%d", node, k)
	var before int64
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		slots, healthy := cardHealth(ctx, node, card)
		before = slots
		return healthy, nil
	}); err != nil {
		t.Fatalf("round %d: card %s not healthy", round, card)
	}
	var others []string
	for i := 0; i < 4; i++ {
		if i != k {
			others = append(others, fmt.Sprintf("GPU-%s-%d", node, i))
		}
	}
	pinned := map[string]string{api.AnnotationGPUUUIDInclude: card}
	victim, second := fmt.Sprintf("v%d", round), fmt.Sprintf("w%d", round)
	bystanders := fmt.Sprintf("b%d", round)

	cl.HoldPodResources(node)
	defer cl.ReleasePodResources(node)
	submit(t, burst(n, victim, 1, pinned)...)
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cl.Client.CoreV1().Pods(n).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, victim) && p.Spec.NodeName == node {
				return cl.PodResourcesWaiting(node) > 0, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("round %d: the pod pinned to %s was not bound and held in admission", round, card)
	}
	// The agent gives up on a held question after 5 s (then the held pod fails for that,
	// and the round misses): the hold ends within 4.5 s whatever happens.
	const budget = 4500 * time.Millisecond
	release := time.Now().Add(budget)
	// Three more pods bound while the card is healthy queue in the kubelet behind the
	// held one: it will admit them after it has seen the card fail. One the scheduler
	// has not bound within 2.5 s meets the XID in the scheduler instead.
	submit(t, append(burst(n, second, 1, pinned), burst(n, bystanders, 2, map[string]string{api.AnnotationGPUUUIDInclude: strings.Join(others, ",")})...)...)
	bound := 0
	_ = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := cl.Client.CoreV1().Pods(n).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		bound = 0
		for _, p := range pods.Items {
			if hasAnyPrefix(p.Name, []string{victim, second, bystanders}) && p.Spec.NodeName == node {
				bound++
			}
		}
		return bound == 4, nil
	})
	xid := time.Now()
	if err := cl.InjectXID(node, k, 79); err != nil {
		t.Fatal(err)
	}
	// The Node's allocatable is the kubelet's healthy set (sent every second): once it
	// drops, the kubelet has seen the card unhealthy.
	seen := time.Time{}
	_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Until(release), true, func(ctx context.Context) (bool, error) {
		if slots, _ := cardHealth(ctx, node, card); slots < before {
			seen = time.Now()
			return true, nil
		}
		return false, nil
	})
	cl.ReleasePodResources(node)
	t.Logf("round %d: %d of 4 pods bound before the XID, pod held in admission for %s", round, bound,
		time.Since(release.Add(-budget)).Round(10*time.Millisecond))
	if seen.IsZero() {
		t.Logf("round %d: the kubelet did not show %s unhealthy before the hold had to end", round, card)
		seen = xid
	}
	pods := settledRound(t, n, []string{victim, second, bystanders}, 4)
	return checkXIDRound(t, round, card, xid, seen, victim, second, pods)
}

// settledRound waits until each of want pods whose names start with one of prefixes
// runs, failed, or is unbound with a scheduling reason, and returns them.
func settledRound(t *testing.T, n string, prefixes []string, want int) []corev1.Pod {
	t.Helper()
	var out []corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cl.Client.CoreV1().Pods(n).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		out, last = nil, ""
		for _, p := range pods.Items {
			if !hasAnyPrefix(p.Name, prefixes) {
				continue
			}
			out = append(out, p)
			if !settled(p) {
				last = p.Name + " " + string(p.Status.Phase)
			}
		}
		return len(out) == want && last == "", nil
	})
	if err != nil {
		t.Fatalf("pods %v not settled (%d of %d seen, %s still moving)", prefixes, len(out), want, last)
	}
	return out
}

func settled(p corev1.Pod) bool {
	switch {
	case p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodFailed:
		return true
	case p.Spec.NodeName != "":
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			return true
		}
	}
	return false
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// checkXIDRound checks a settled round's pods and says whether the held pod's Allocate
// came with the broken card after the kubelet saw it unhealthy.
func checkXIDRound(t *testing.T, round int, card string, xid, seen time.Time, victim, second string, pods []corev1.Pod) bool {
	t.Helper()
	var running []corev1.Pod
	var outcomes []string
	hit := false
	for _, p := range pods {
		switch {
		case p.Status.Phase == corev1.PodRunning:
			running = append(running, p)
			rec, err := allocation(p)
			if err != nil {
				t.Errorf("round %d: running pod %s: %v", round, p.Name, err)
				continue
			}
			holds := false
			for _, c := range rec.Cards {
				holds = holds || c.UUID == card
			}
			// Healthy again RecoverAfter after the XID, the card may be handed out.
			if holds && rec.Allocated.After(seen) && rec.Allocated.Before(xid.Add(recoverAfter)) {
				t.Errorf("round %d: pod %s was handed %s by an Allocate %s after the kubelet saw it unhealthy",
					round, p.Name, card, rec.Allocated.Sub(seen).Round(time.Millisecond))
				hit = hit || strings.HasPrefix(p.Name, victim)
			}
			outcomes = append(outcomes, fmt.Sprintf("%s running on %s", p.Name, cardsOf(rec)))
		case p.Status.Phase == corev1.PodFailed:
			if p.Status.Reason == "" || p.Status.Message == "" {
				t.Errorf("round %d: pod %s failed without a reason", round, p.Name)
			}
			if strings.HasPrefix(p.Name, victim) && strings.Contains(p.Status.Message, "allocate container request") &&
				strings.Contains(p.Status.Message, card) {
				hit = true
			}
			// Refused for want of its card, a pod must say that the card is unhealthy; one
			// whose agent gave up on the held PodResources question says that instead.
			if pinned := hasAnyPrefix(p.Name, []string{victim, second}); pinned && !strings.Contains(p.Status.Message, "kubelet pod resources") &&
				!strings.Contains(p.Status.Message, card+" unhealthy") && !strings.Contains(p.Status.Message, "unhealthy card: "+card) {
				t.Errorf("round %d: pod %s failed without naming unhealthy %s: %s", round, p.Name, card, p.Status.Message)
			}
			outcomes = append(outcomes, fmt.Sprintf("%s failed: %s: %s", p.Name, p.Status.Reason, p.Status.Message))
		default:
			outcomes = append(outcomes, fmt.Sprintf("%s pending: %s", p.Name, scheduledMessage(p)))
		}
	}
	t.Logf("round %d: XID 79 on %s, kubelet saw it after %s, window hit %t:\n  %s", round, card,
		seen.Sub(xid).Round(10*time.Millisecond), hit, strings.Join(outcomes, "\n  "))
	checkHandoff(t, running)
	noOvercommit(t)
	return hit
}

// allocation reads the agent's record of the Allocate that served the pod's container.
func allocation(p corev1.Pod) (*records.Record, error) {
	s := &records.Store{Root: filepath.Join(cl.NodeDir(p.Spec.NodeName), "state")}
	return s.ReadRecord(string(p.UID), "main")
}

func cardsOf(rec *records.Record) string {
	var out []string
	for _, c := range rec.Cards {
		out = append(out, c.UUID)
	}
	return strings.Join(out, ",")
}

func scheduledMessage(p corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Message
		}
	}
	return ""
}
