package vgpu

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// The patch removes Tessera's gate from the pod the session read, and from nothing
// else: a pod replaced under the same name, or whose gates changed since, is refused
// by the patch's tests and keeps what it has.
func TestQueueGatePatchTouchesOnlyThePodTheSessionRead(t *testing.T) {
	read := withGates(vgpuPod("w", "pg", 1, 4096, 25, nil), queueShareGate)
	cases := []struct {
		name   string
		stored *corev1.Pod // the pod in the API server when the patch arrives
		want   []corev1.PodSchedulingGate
	}{
		{"the pod as read loses its gate", read.DeepCopy(), nil},
		{"a pod recreated under the same name keeps its gate",
			func() *corev1.Pod { p := read.DeepCopy(); p.UID = types.UID("another"); return p }(),
			[]corev1.PodSchedulingGate{{Name: queueShareGate}}},
		{"gates that changed since the read are left as they are",
			withGates(vgpuPod("w", "pg", 1, 4096, 25, nil), "example.com/quota", queueShareGate),
			[]corev1.PodSchedulingGate{{Name: "example.com/quota"}, {Name: queueShareGate}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			client := fake.NewSimpleClientset(c.stored)
			ungate(context.Background(), client, read)
			got, err := client.CoreV1().Pods("ns").Get(context.Background(), "w", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Spec.SchedulingGates) != len(c.want) {
				t.Fatalf("gates %v, want %v", got.Spec.SchedulingGates, c.want)
			}
			for i := range c.want {
				if got.Spec.SchedulingGates[i] != c.want[i] {
					t.Fatalf("gates %v, want %v", got.Spec.SchedulingGates, c.want)
				}
			}
		})
	}
}

func TestQueueGatePatchRefusesPodsNotGatedByTesseraAlone(t *testing.T) {
	for _, gates := range [][]string{nil, {"example.com/quota"}, {queueShareGate, "example.com/quota"}} {
		if b, err := ungatePatch(withGates(vgpuPod("w", "pg", 1, 4096, 25, nil), gates...)); err == nil {
			t.Errorf("gates %v: built %s, want an error", gates, b)
		}
	}
	b, err := ungatePatch(withGates(vgpuPod("w", "pg", 1, 4096, 25, nil), queueShareGate))
	want := `[{"op":"test","path":"/metadata/uid","value":"ns-w"},{"op":"test","path":"/spec/schedulingGates","value":[{"name":"tessera.io/queue-share"}]},{"op":"remove","path":"/spec/schedulingGates/0"}]`
	if err != nil || string(b) != want {
		t.Errorf("patch %s (%v), want %s", b, err, want)
	}
}
