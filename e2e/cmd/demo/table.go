package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// waitSettled waits until the pods and PodGroups have not changed for eight seconds
// (several scheduling sessions).
func waitSettled(ctx context.Context, c *cluster.Cluster, ns string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	stableSince := time.Now()
	for {
		state, want, err := snapshot(ctx, c, ns)
		if err == nil && state != last {
			last, stableSince = state, time.Now()
			fmt.Println("  ", summary(state, want))
		}
		if err == nil && state != "" && time.Since(stableSince) >= 8*time.Second {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not settled after %s; showing the current state", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// snapshot returns one line per pod (name, phase, node) and per PodGroup (name, phase),
// and the number of pods the jobs ask for.
func snapshot(ctx context.Context, c *cluster.Cluster, ns string) (string, int, error) {
	jobs, err := c.Volcano.BatchV1alpha1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", 0, err
	}
	want := 0
	for _, j := range jobs.Items {
		for _, t := range j.Spec.Tasks {
			want += int(t.Replicas)
		}
	}
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", 0, err
	}
	pgs, err := c.Volcano.SchedulingV1beta1().PodGroups(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", 0, err
	}
	var lines []string
	for _, p := range pods.Items {
		lines = append(lines, fmt.Sprintf("pod %s %s %s", p.Name, p.Status.Phase, p.Spec.NodeName))
	}
	for _, pg := range pgs.Items {
		lines = append(lines, fmt.Sprintf("podgroup %s %s", pg.Name, pg.Status.Phase))
	}
	sort.Strings(lines)
	if len(pods.Items) == 0 {
		return "", want, nil
	}
	return strings.Join(lines, "\n") + "\n", want, nil
}

func summary(state string, want int) string {
	phases := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(state), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "pod" {
			phases[f[2]]++
		}
	}
	return fmt.Sprintf("%d of %d pods created, %d running, %d pending", phases["Running"]+phases["Pending"]+phases["Succeeded"]+phases["Failed"], want, phases["Running"], phases["Pending"])
}

// placement renders the cards (with their holders and utilisation; on the DRA node,
// the pods their claims are reserved for), CPU-only pods, and pending pods with their
// reasons.
func placement(ctx context.Context, c *cluster.Cluster, ns string) (string, error) {
	ledger, pods, err := workload.Ledger(ctx, c.Client)
	if err != nil {
		return "", err
	}
	if err := draLedger(ctx, c.Client, ledger); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Tessera placement  %s\n\n", time.Now().Format(time.RFC3339))
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tCARD\tMODEL\tPOD\tCONTAINER\tMEMORY MiB\tCORES %\tQUEUE")
	keys := make([]string, 0, len(ledger))
	for k := range ledger {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := ledger[keys[i]], ledger[keys[j]]
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		return a.Card.Index < b.Card.Index
	})
	for _, k := range keys {
		u := ledger[k]
		card := fmt.Sprintf("%d %s", u.Card.Index, u.Card.UUID)
		if len(u.Holders) == 0 {
			fmt.Fprintf(w, "%s\t%s\t%s\t-\t-\t-\t-\t-\n", u.Node, card, u.Card.Model)
		}
		for _, h := range u.Holders {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", u.Node, card, u.Card.Model, h.Pod, h.Container, h.MemoryMiB, h.Cores, h.Queue)
		}
	}
	w.Flush()

	fmt.Fprintf(&b, "\nPer-card utilisation (assigned / capacity)\n")
	w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tCARD\tMODEL\tCONTAINERS\tMEMORY MiB\tMEMORY %\tCORES %\t")
	for _, k := range keys {
		u := ledger[k]
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%d / %d\t%s\t%d\t%s\n", u.Node, u.Card.Index, u.Card.Model, len(u.Holders), u.MemoryMiB, u.Card.MemoryMiB,
			pct(u.MemoryMiB, u.Card.MemoryMiB), u.Cores, bar(u.Cores))
	}
	w.Flush()

	var cpu, pending []corev1.Pod
	for _, p := range pods {
		if p.Namespace != ns {
			continue
		}
		switch {
		case p.Spec.NodeName == "":
			pending = append(pending, p)
		case p.Annotations["tessera.io/assignment"] == "" && len(p.Spec.ResourceClaims) == 0:
			cpu = append(cpu, p)
		}
	}
	if len(cpu) > 0 {
		fmt.Fprintf(&b, "\nPods without vGPUs\n")
		w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "POD\tNODE\tPHASE\tQUEUE")
		for _, p := range cpu {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", p.Name, p.Spec.NodeName, p.Status.Phase, queueOf(p))
		}
		w.Flush()
	}
	groups := podGroupReasons(ctx, c, ns)
	waiting := waitingGroups(ctx, c, ns)
	fmt.Fprintf(&b, "\nPending: %d pods, %d jobs not admitted\n", len(pending), len(waiting))
	if len(pending)+len(waiting) > 0 {
		w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "WHAT\tQUEUE\tREASON")
		for _, pg := range waiting {
			fmt.Fprintf(w, "job %s (%d pods, PodGroup %s)\t%s\t%s\n", pg.name, pg.min, pg.phase, pg.queue, orWaiting(groups[pg.name]))
		}
		for _, p := range pending {
			fmt.Fprintf(w, "pod %s\t%s\t%s\n", p.Name, queueOf(p), reason(p, groups))
		}
		w.Flush()
	}
	if bad := workload.Overcommitted(ledger); len(bad) > 0 {
		fmt.Fprintf(&b, "\nOVER-COMMITTED CARDS:\n  %s\n", strings.Join(bad, "\n  "))
	}
	return b.String(), nil
}

func pct(a, b int64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%d%%", a*100/b)
}

func bar(cores int) string {
	n := cores / 10
	if n > 10 {
		n = 10
	}
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", 10-n) + "]"
}

func queueOf(p corev1.Pod) string {
	if q := p.Annotations["volcano.sh/queue-name"]; q != "" {
		return q
	}
	return p.Labels["volcano.sh/queue-name"]
}

// podGroupReasons maps each PodGroup to its latest Unschedulable message.
func podGroupReasons(ctx context.Context, c *cluster.Cluster, ns string) map[string]string {
	out := map[string]string{}
	pgs, err := c.Volcano.SchedulingV1beta1().PodGroups(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return out
	}
	for _, pg := range pgs.Items {
		for _, cond := range pg.Status.Conditions {
			if cond.Type == "Unschedulable" && cond.Status == corev1.ConditionTrue {
				out[pg.Name] = cond.Message
			}
		}
	}
	return out
}

func reason(p corev1.Pod, groups map[string]string) string {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Message != "" {
			return cond.Message
		}
	}
	if m := groups[p.Annotations["scheduling.k8s.io/group-name"]]; m != "" {
		return "podgroup: " + m
	}
	return "waiting for the scheduler"
}

type group struct {
	name, queue, phase string
	min                int32
}

// waitingGroups lists the PodGroups Volcano has not admitted (no pods are created for them).
func waitingGroups(ctx context.Context, c *cluster.Cluster, ns string) []group {
	var out []group
	pgs, err := c.Volcano.SchedulingV1beta1().PodGroups(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	for _, pg := range pgs.Items {
		if pg.Status.Phase == "Pending" {
			out = append(out, group{name: pg.Name, queue: pg.Spec.Queue, phase: string(pg.Status.Phase), min: pg.Spec.MinMember})
		}
	}
	return out
}

func orWaiting(s string) string {
	if s == "" {
		return "waiting for the scheduler"
	}
	return s
}
