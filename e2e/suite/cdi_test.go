package suite

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// CDI handoff: gpu-d's agent runs with cardHandoff: cdi, every other node's with env, and
// every node's runtime resolves CDI devices against its spec directory (the fake
// toolkit's nvidia.com/gpu spec and the agent's own). A 2-card pod on gpu-d gets exactly
// its cards as nvidia.com/gpu=<UUID> CDI devices plus tessera.io/vgpu=hook, the cards'
// device nodes and the hook library from the specs, and NVIDIA_VISIBLE_DEVICES=void; a
// 2-card pod on an env node gets no CDI device at all.
func TestCDIHandoffNamesExactlyTheAssignedCards(t *testing.T) {
	n := ns(t, "cdi")
	defer cleanup(t, n)
	two := []workload.Container{{Name: "main", Cards: 2, MemPct: 10, Cores: 10}}
	submit(t,
		workload.Job(n, "on-cdi", "default", 1, workload.Task{Name: "t", Replicas: 1, Containers: two,
			Annotations: map[string]string{api.AnnotationGPUTypeInclude: "L40S"}}),
		workload.Job(n, "on-env", "default", 1, workload.Task{Name: "t", Replicas: 1, Containers: two,
			Annotations: map[string]string{api.AnnotationGPUTypeInclude: "A30"}}))
	want := map[string]string{"on-cdi": "cdi", "on-env": "env"}
	var running []corev1.Pod
	for job := range want {
		pods, err := workload.WaitPods(context.Background(), cl.Client, n, job, 2*time.Minute, workload.AllPhase(1, corev1.PodRunning))
		if err != nil {
			t.Fatal(err)
		}
		running = append(running, pods...)
	}
	h := handed(t)
	for _, p := range running {
		job := p.Labels["volcano.sh/job-name"]
		r, ok := h.Records[string(p.UID)+"/main"]
		if !ok {
			t.Fatalf("%s: no CRI record", p.Name)
		}
		if got := workload.HandoffMode(r); got != want[job] {
			t.Errorf("%s on %s: cards handed over by %s, want %s (CDI devices %v, NVIDIA_VISIBLE_DEVICES=%q)",
				p.Name, p.Spec.NodeName, got, want[job], r.CDIDevices, r.Env["NVIDIA_VISIBLE_DEVICES"])
		}
		t.Logf("%s on %s: CDI devices %v, NVIDIA_VISIBLE_DEVICES=%q, devices %v", p.Name, p.Spec.NodeName, r.CDIDevices,
			r.Env["NVIDIA_VISIBLE_DEVICES"], r.Devices)
	}
	// checkHandoff compares the CDI devices, device nodes and hook mounts with the
	// assignment (workload.checkCards, checkHook).
	checkHandoff(t, running)
	if _, err := os.Stat(filepath.Join(cl.CDIDir("gpu-d"), "tessera.io-vgpu.yaml")); err != nil {
		t.Errorf("the cdi-mode agent wrote no hook spec: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cl.CDIDir("gpu-c"), "tessera.io-vgpu.yaml")); !os.IsNotExist(err) {
		t.Errorf("an env-mode agent wrote a hook spec: %v", err)
	}
}
