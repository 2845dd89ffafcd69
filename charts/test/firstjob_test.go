package charttest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/cli"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// fencedAfter returns the body of the first fenced block that follows marker in text.
func fencedAfter(t *testing.T, text, marker string) string {
	t.Helper()
	i := strings.Index(text, marker)
	if i < 0 {
		t.Fatalf("no %q", marker)
	}
	rest := text[i+len(marker):]
	open := strings.Index(rest, "```")
	rest = rest[open:]
	rest = rest[strings.Index(rest, "\n")+1:]
	return rest[:strings.Index(rest, "```")]
}

// withoutComments drops whole-line comments, so that a file's header does not count.
func withoutComments(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

type volcanoJob struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		SchedulerName string `json:"schedulerName"`
		Queue         string `json:"queue"`
		MinAvailable  int32  `json:"minAvailable"`
		Tasks         []struct {
			Name     string                 `json:"name"`
			Replicas int32                  `json:"replicas"`
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"tasks"`
	} `json:"spec"`
}

// The first job runs on any one NVIDIA card: one pod, one card, memory as a share of the
// card (not MiB that a small card may lack), no card-type filter, a small image. The page
// and config/first-job.yaml are the same job, and the page's `kubectl tessera pod` output is
// what the CLI prints for it.
func TestTheFirstJobFitsAnyOneCardAndThePageShowsTheCLIsOutput(t *testing.T) {
	file := repoFile(t, "config/first-job.yaml")
	page := repoFile(t, "docs/first-job.md")
	if got, want := withoutComments(fencedAfter(t, page, "## 1. Submit")), withoutComments(file); got != want {
		t.Errorf("docs/first-job.md's job differs from config/first-job.yaml:\n%s\nvs\n%s", got, want)
	}
	var job volcanoJob
	if err := yaml.UnmarshalStrict([]byte(file), &job); err != nil {
		t.Fatal(err)
	}
	if len(job.Spec.Tasks) != 1 || job.Spec.Tasks[0].Replicas != 1 || job.Spec.MinAvailable != 1 || job.Spec.SchedulerName != "volcano" {
		t.Fatalf("the first job should be one pod placed by volcano: %+v", job.Spec)
	}
	pod := &corev1.Pod{ObjectMeta: job.Spec.Tasks[0].Template.ObjectMeta, Spec: job.Spec.Tasks[0].Template.Spec}
	args := pluginargs.Defaults()
	req, err := args.Request(pod)
	if err != nil {
		t.Fatalf("the scheduler refuses the first job's request: %v", err)
	}
	if len(req.Containers) != 1 || req.Containers[0].Cards != 1 || req.Containers[0].MemoryMiB != 0 || req.Containers[0].MemoryPercent == 0 {
		t.Errorf("want one container asking one card and a share of its memory (any card has it): %+v", req.Containers)
	}
	for k := range pod.Annotations {
		if strings.Contains(k, "gputype") || strings.Contains(k, "gpu-type") || strings.Contains(k, "uuid") {
			t.Errorf("the first job filters cards (%s): it must run on any NVIDIA card", k)
		}
	}
	for _, c := range pod.Spec.Containers {
		if strings.Contains(c.Image, "pytorch") || strings.Contains(c.Image, "nvcr.io") {
			t.Errorf("image %s: a first job pulls a small image", c.Image)
		}
	}

	// What `kubectl tessera pod` prints once the scheduler gave it card 2 of an A100 40 GB.
	const node, uuid, model, total = "gpu-node-3", "GPU-5e9c0f1a-3b7d-4c2e-9a61-0d4b8e7f2c13", "NVIDIA A100-SXM4-40GB", 40960
	inv, err := api.EncodeInventory(&api.NodeInventory{Version: api.InventoryVersion, Cards: []api.Card{
		{UUID: uuid, Index: 2, Model: model, MemoryMiB: total, Shares: 10, Healthy: true}}})
	if err != nil {
		t.Fatal(err)
	}
	c := req.Containers[0]
	assignment, err := api.EncodeAssignment(&api.PodAssignment{Version: api.AssignmentVersion, Node: node, QoS: api.QoSFixedShare,
		Containers: []api.ContainerAssignment{{Name: pod.Spec.Containers[0].Name, Cards: []api.CardAssignment{
			{UUID: uuid, MemoryMiB: total * int64(c.MemoryPercent) / 100, Cores: c.Cores}}}}})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 1, 11, 59, 0, 0, time.UTC)
	pod.Name, pod.Namespace = job.Metadata.Name+"-"+job.Spec.Tasks[0].Name+"-0", "default"
	pod.Spec.NodeName, pod.Status.Phase = node, corev1.PodRunning
	pod.Annotations = map[string]string{cli.QueueKey: job.Spec.Queue, api.AnnotationAssignment: assignment,
		api.AnnotationAssignedAt: fmt.Sprint(at.UnixNano()), api.AnnotationHandoff: api.HandoffDone}
	snap := &cli.Snapshot{Args: args, Now: at.Add(time.Minute), Pods: []corev1.Pod{*pod},
		Nodes: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: node, Annotations: map[string]string{
			api.AnnotationInventory: inv, api.AnnotationHeartbeat: at.Format(time.RFC3339)}}}}}
	var out bytes.Buffer
	if err := cli.WritePod(&out, snap.PodView(pod)); err != nil {
		t.Fatal(err)
	}
	if shown := fencedAfter(t, page, "kubectl tessera pod first-vgpu-worker-0\n```\n\nOn a node with an A100 40 GB, for example:"); shown != out.String() {
		t.Errorf("docs/first-job.md shows\n%s\nthe CLI prints\n%s", shown, out.String())
	}
}
