package vgpu

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/uthelper"

	"github.com/tessera-gpu/tessera/api"
)

func TestSessionPublishesCardUsageAndPendingReasons(t *testing.T) {
	utc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{gpuNode("m1", 2, "NVIDIA A100", 40960)},
		PodGroups: []*schedulingv1.PodGroup{podGroup("fits", 1), podGroup("t4only", 1), podGroup("bad", 1)},
		Pods: []*corev1.Pod{
			vgpuPod("a", "fits", 1, 10000, 30, nil),
			vgpuPod("b", "t4only", 1, 1000, 10, map[string]string{api.AnnotationGPUTypeInclude: "T4"}),
			vgpuPod("c", "bad", 1, 1000, 10, map[string]string{api.AnnotationQoS: "gold"}),
		},
		Queues: queues(),
	}
	ssn, p := session(t, utc, true, nil)
	p.publishMetrics(ssn)
	used := testutil.ToFloat64(metricCardMemory.WithLabelValues("m1", "0", "GPU-m1-0")) +
		testutil.ToFloat64(metricCardMemory.WithLabelValues("m1", "1", "GPU-m1-1"))
	if used != 10000 {
		t.Fatalf("card memory gauges sum to %v MiB, want 10000", used)
	}
	if got := testutil.ToFloat64(metricCardCapacity.WithLabelValues("m1", "0", "GPU-m1-0")); got != 40960 {
		t.Fatalf("capacity gauge %v, want 40960", got)
	}
	if got := testutil.ToFloat64(metricPending.WithLabelValues("excluded by GPU type annotation")); got != 1 {
		t.Fatalf("pending by type filter = %v, want 1", got)
	}
	if got := testutil.ToFloat64(metricPending.WithLabelValues(pendingInvalid)); got != 1 {
		t.Fatalf("pending invalid = %v, want 1", got)
	}
	if testutil.CollectAndCount(metricPluginSeconds) != 3 {
		t.Fatalf("plugin time counters missing")
	}
}
