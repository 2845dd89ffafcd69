package suite

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// Dynamic MIG: a node added for the scenario, gpu-mig (fake h100migx2: card 0 split
// into two 3g.40gb, card 1 into a 3g.40gb and four 1g.10gb), whose agent runs with
// --mig-repartition=true, and the scheduler with the chart's RBAC for
// devicePlugin.config.migRepartition (patch on Nodes). Two pods of a gang ask for a
// 2g.20gb, a profile no card in the cluster has. The scheduler writes a plan for an
// idle card of gpu-mig, the agent applies it and answers "applied" with the new layout,
// and both pods run on 2g.20gb instances of that layout, each handed its own MIG device.
// gpu-e, which does not opt in, keeps its layout. A pod asking for a 1g.20gb, whose
// node selector names gpu-e only, waits beside them: the plan for gpu-mig's card holds
// no 1g.20gb for it, since it could never run there.
func TestMIGRepartitionServesPendingProfiles(t *testing.T) {
	ctx := context.Background()
	restore, err := cl.ApplyChartRBAC(ctx, nil, "--set", "devicePlugin.config.migRepartition=true")
	if err != nil {
		t.Fatalf("the chart's RBAC with migRepartition: %v", err)
	}
	defer func() {
		if err := restore(); err != nil {
			t.Errorf("putting the harness's RBAC back: %v", err)
		}
	}()
	gpuE, err := cl.Client.CoreV1().Nodes().Get(ctx, "gpu-e", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node := cluster.Node{Name: "gpu-mig", Machine: "h100migx2", AgentArgs: []string{"--mig-repartition=true"}}
	if err := cl.AddNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cl.RemoveNode(ctx, node.Name); err != nil {
			t.Errorf("remove %s: %v", node.Name, err)
		}
	}()
	if n, err := cl.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err != nil || n.Annotations[api.AnnotationMIGRepartition] != "true" {
		t.Fatalf("%s: %s = %q (%v), want \"true\"", node.Name, api.AnnotationMIGRepartition, n.Annotations[api.AnnotationMIGRepartition], err)
	}

	n := ns(t, "migdyn")
	defer cleanup(t, n)
	one := []workload.Container{{Name: "main", Cards: 1}}
	pinned := workload.Job(n, "pinned", "default", 1, workload.Task{Name: "t", Replicas: 1, Containers: one,
		Annotations: map[string]string{api.AnnotationMIGProfile: "1g.20gb"}})
	pinned.Spec.Tasks[0].Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "gpu-e"}
	submit(t, pinned)
	submit(t, workload.Job(n, "mid", "default", 2, workload.Task{Name: "t", Replicas: 2, Containers: one,
		Annotations: map[string]string{api.AnnotationMIGProfile: "2g.20gb"}}))
	pods, err := workload.WaitPods(ctx, cl.Client, n, "mid", 3*time.Minute, workload.AllPhase(2, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}

	after, err := cl.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := api.DecodeMIGPlanStatus(after.Annotations[api.AnnotationMIGPlanStatus])
	if err != nil || st.Outcome != api.MIGPlanApplied {
		t.Fatalf("%s: plan status %+v (%v), want applied", node.Name, st, err)
	}
	t.Logf("plan %s on card %s: %s (%s)", st.ID, st.Card, st.Outcome, st.Message)
	layout, err := api.DecodeMIGInstances(after.Annotations[api.AnnotationMIGInstances])
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, p := range pods {
		if p.Spec.NodeName != node.Name {
			t.Errorf("%s runs on %s, want %s (the only node that re-partitions)", p.Name, p.Spec.NodeName, node.Name)
			continue
		}
		if s := p.Annotations[api.AnnotationHandoff]; s != api.HandoffDone {
			t.Errorf("%s: handoff %q (%s), want done", p.Name, s, p.Annotations[api.AnnotationHandoffMessage])
		}
		a, err := api.DecodeAssignment(p.Annotations[api.AnnotationAssignment])
		if err != nil || len(a.Containers) != 1 || len(a.Containers[0].Cards) != 1 || !a.Containers[0].Cards[0].IsMIG() {
			t.Errorf("%s: assignment %q (%v), want one MIG instance", p.Name, p.Annotations[api.AnnotationAssignment], err)
			continue
		}
		card := a.Containers[0].Cards[0]
		found := false
		for _, in := range layout.Cards[card.UUID] {
			if in.UUID == card.MIG && in.Profile == "2g.20gb" && card.UUID == st.Card {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: assigned %+v, not a 2g.20gb of the re-partitioned card %s (%+v)", p.Name, card, st.Card, layout.Cards[st.Card])
		}
		if slices.Contains(seen, card.MIG) {
			t.Errorf("MIG device %s given twice", card.MIG)
		}
		seen = append(seen, card.MIG)
	}
	for _, in := range layout.Cards[st.Card] {
		if in.Profile == "1g.20gb" {
			t.Errorf("the re-partitioned card %s holds a 1g.20gb, which only a pod that may not run on %s asks for: %+v", st.Card,
				node.Name, layout.Cards[st.Card])
		}
	}
	if _, ok := after.Annotations[api.AnnotationMIGPlan]; ok {
		// The scheduler removes an answered plan; allow it a few sessions.
		deadline := time.Now().Add(30 * time.Second)
		for ; time.Now().Before(deadline); time.Sleep(time.Second) {
			if after, err = cl.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err == nil {
				if _, ok := after.Annotations[api.AnnotationMIGPlan]; !ok {
					break
				}
			}
		}
		if _, ok := after.Annotations[api.AnnotationMIGPlan]; ok {
			t.Errorf("the answered plan is still on %s: %s", node.Name, after.Annotations[api.AnnotationMIGPlan])
		}
	}
	nowE, err := cl.Client.CoreV1().Nodes().Get(ctx, "gpu-e", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := nowE.Annotations[api.AnnotationMIGPlan]; ok || !sameLayout(gpuE, nowE) {
		t.Errorf("gpu-e, which does not opt in, got a plan or a new layout:\n%s\n%s", gpuE.Annotations[api.AnnotationMIGInstances],
			nowE.Annotations[api.AnnotationMIGInstances])
	}
}

func sameLayout(a, b *corev1.Node) bool {
	return strings.EqualFold(a.Annotations[api.AnnotationMIGInstances], b.Annotations[api.AnnotationMIGInstances])
}
