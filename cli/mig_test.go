package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/tessera-gpu/tessera/api"
)

// migCluster is two nodes with an H100 in MIG mode each:
//
//	gpu-m    card 0 in MIG mode, two 3g.40gb instances (MIG-m0 held by team-a/mig-0, MIG-m1
//	         free); card 1 shared
//	gpu-bad  card 0 in MIG mode, its layout annotation unreadable
//
// and two pending pods asking for a 3g.40gb and a 7g.80gb.
func migCluster(t *testing.T) []runtime.Object {
	m0 := card("GPU-m0", 0, "NVIDIA H100 80GB HBM3", 81559)
	m0.MIG = true
	m1 := card("GPU-m1", 1, "NVIDIA H100 80GB HBM3", 81559)
	good := tesseraNode(t, "gpu-m", now.Add(-10*time.Second), m0, m1)
	layout, err := api.EncodeMIGInstances(&api.NodeMIGInstances{Cards: map[string][]api.MIGInstance{"GPU-m0": {
		{UUID: "MIG-m0", Profile: "3g.40gb", GI: 1, Start: 0, Size: 4, MemoryMiB: 40320},
		{UUID: "MIG-m1", Profile: "3g.40gb", GI: 2, Start: 4, Size: 4, MemoryMiB: 40320},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	good.Annotations[api.AnnotationMIGInstances] = layout
	b0 := card("GPU-b0", 0, "NVIDIA H100 80GB HBM3", 81559)
	b0.MIG = true
	bad := tesseraNode(t, "gpu-bad", now.Add(-10*time.Second), b0)
	bad.Annotations[api.AnnotationMIGInstances] = `{"version":"v1","cards":{"GPU-b0":[{"uuid":"MIG-GPU-b0/1/0"}]}}`
	held := migPendingPod("mig-0", "3g.40gb")
	held = placed(t, held, "gpu-m", api.QoSFixedShare, api.HandoffDone,
		api.CardAssignment{UUID: "GPU-m0", MemoryMiB: 40320, Cores: 100, MIG: "MIG-m0"})
	return []runtime.Object{good, bad, held, migPendingPod("mig-1", "3g.40gb"), migPendingPod("mig-big", "7g.80gb")}
}

func migPendingPod(name, profile string) *corev1.Pod {
	p := vgpuPod("team-a", name, "research", 1, 1, 1)
	delete(p.Spec.Containers[0].Resources.Limits, api.ResourceMemory)
	delete(p.Spec.Containers[0].Resources.Limits, api.ResourceCores)
	p.Annotations[api.AnnotationMIGProfile] = profile
	return p
}

// `nodes` shows a card in MIG mode with its instances held of all, then a row per
// instance (profile, memory, held or free, MIG UUID, pod), and for a card whose layout
// cannot be read, why; `-o json` carries the same.
func TestNodesShowMIGInstances(t *testing.T) {
	golden(t, "nodes-mig-wide.txt", mustRun(t, migCluster(t), "nodes", "-o", "wide"))
	var list struct {
		Items []NodeView `json:"items"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, migCluster(t), "nodes", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	for _, n := range list.Items {
		c := n.Cards[0]
		switch n.Name {
		case "gpu-m":
			if len(c.MIGInstances) != 2 || len(c.MIGInstances[0].Pods) != 1 || c.MIGInstances[0].Pods[0].Pod != "mig-0" ||
				len(c.MIGInstances[1].Pods) != 0 || c.MIGLayout != "" {
				t.Errorf("gpu-m card 0: %+v", c)
			}
		case "gpu-bad":
			if !strings.Contains(c.MIGLayout, api.AnnotationMIGInstances) || len(c.MIGInstances) != 0 {
				t.Errorf("gpu-bad card 0: %+v", c)
			}
		}
	}
}

// `explain` says what a MIG pod asks, where it fits (the free instance), and why the
// other nodes refuse: no free instance with the counts, or the layout the scheduler
// cannot read.
func TestExplainAMIGPod(t *testing.T) {
	golden(t, "explain-mig.txt", mustRun(t, migCluster(t), "explain", "mig-1"))
	out := mustRun(t, migCluster(t), "explain", "mig-big")
	for _, want := range []string{
		`no free MIG instance of profile 7g.80gb for container "main" (needs 1; 0 taken on the node); cards: 1 no MIG instance of the profile, 1 not in MIG mode`,
		"card 0 (GPU-m0): no MIG instance of the profile: the card's instances: 3g.40gb×2",
		"card 0 (GPU-b0): MIG layout unknown: invalid: " + api.AnnotationMIGInstances,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain mig-big:\n%s\nwant it to say %q", out, want)
		}
	}
}

// The example VolcanoJob in config/mig-job.yaml asks, per worker, for one whole
// 3g.40gb instance, and the plugin's parser reads it so: explain finds the free one.
func TestTheMIGExampleJobAsksForOneWholeInstance(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "config", "mig-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var job struct {
		Spec struct {
			Tasks []struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"tasks"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &job); err != nil {
		t.Fatal(err)
	}
	if len(job.Spec.Tasks) != 1 {
		t.Fatalf("%d tasks", len(job.Spec.Tasks))
	}
	tmpl := job.Spec.Tasks[0].Template
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.Namespace, pod.Name = "team-a", "mig-finetune-worker-0"
	pod.Annotations[QueueKey] = "research"
	objs := append(migCluster(t), pod)
	out := mustRun(t, objs, "explain", pod.Name)
	for _, want := range []string{"fits", `asks for 1 whole MIG instance(s) of profile 3g.40gb`, "cards train:GPU-m0/MIG-m1"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain of the example's worker:\n%s\nwant %q", out, want)
		}
	}
}
