package kubeletsim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestRequested(t *testing.T) {
	const res = "volcano.sh/vgpu-number"
	list := func(n string) corev1.ResourceList { return corev1.ResourceList{res: resource.MustParse(n)} }
	cases := []struct {
		name string
		r    corev1.ResourceRequirements
		want int
	}{
		{"a container without the resource requests nothing", corev1.ResourceRequirements{}, 0},
		{"the limit counts", corev1.ResourceRequirements{Limits: list("2")}, 2},
		{"a request alone counts, as for pods written without limits", corev1.ResourceRequirements{Requests: list("3")}, 3},
		{"the limit wins over the request", corev1.ResourceRequirements{Limits: list("1"), Requests: list("4")}, 1},
		{"a zero limit requests nothing", corev1.ResourceRequirements{Limits: list("0")}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := requested(corev1.Container{Resources: c.r}, res); got != c.want {
				t.Errorf("requested = %d, want %d", got, c.want)
			}
		})
	}
}
