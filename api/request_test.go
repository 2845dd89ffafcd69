package api

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func podWith(limits corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "train",
		Resources: corev1.ResourceRequirements{Limits: limits}}}}}
}

func TestContainerRequests(t *testing.T) {
	n := DefaultResourceNames()
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	cases := []struct {
		name    string
		limits  corev1.ResourceList
		want    ContainerRequest
		wantErr string
	}{
		{"cards and memory", corev1.ResourceList{ResourceNumber: q(2), ResourceMemory: q(8192), ResourceCores: q(30)},
			ContainerRequest{Name: "train", Cards: 2, MemoryMiB: 8192, Cores: 30}, ""},
		{"cards only: whole memory", corev1.ResourceList{ResourceNumber: q(1)},
			ContainerRequest{Name: "train", Cards: 1, MemoryPercent: 100}, ""},
		// The kubelet would never call the device plugin for this container.
		{"memory without a card count", corev1.ResourceList{ResourceMemory: q(16384)}, ContainerRequest{},
			`container "train" volcano.sh/vgpu-memory is 16384 without volcano.sh/vgpu-number`},
		{"cores without a card count", corev1.ResourceList{ResourceCores: q(50)}, ContainerRequest{},
			`container "train" volcano.sh/vgpu-cores is 50 without volcano.sh/vgpu-number`},
		{"too many cards", corev1.ResourceList{ResourceNumber: q(65)}, ContainerRequest{},
			`container "train" volcano.sh/vgpu-number: 65 cards, want 1..64`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := n.ContainerRequests(podWith(c.limits))
			if c.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, c.wantErr)
				}
				return
			}
			if err != nil || len(got) != 1 || got[0] != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}
