package suite

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// A CPU-only VolcanoJob runs exactly as without Tessera: its pods run to completion and
// carry none of Tessera's annotations.
func TestCPUOnlyJobUntouched(t *testing.T) {
	n := ns(t, "cpu-only")
	defer cleanup(t, n)
	submit(t, workload.Job(n, "etl", "default", 3, workload.Task{Name: "shard", Replicas: 3,
		Containers: []workload.Container{{Name: "etl", CPUOnly: true, SleepSeconds: 2}}}))
	pods, err := workload.WaitPods(context.Background(), cl.Client, n, "etl", 2*time.Minute, workload.AllPhase(3, corev1.PodSucceeded))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		for k := range p.Annotations {
			if strings.HasPrefix(k, "tessera.io/") || strings.Contains(k, "vgpu") {
				t.Errorf("CPU-only pod %s carries %s", p.Name, k)
			}
		}
	}
}
