package inventory

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tessera-gpu/tessera/api"
)

// The publisher writes the card API it is given beside the inventory, changes it when the
// agent restarts in the other mode, and leaves it alone when it is given none.
func TestThePublisherShowsTheCardAPIOnTheNode(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	for _, step := range []struct {
		name, cardAPI, want string
	}{
		{"an agent in dra mode writes dra", "dra", "dra"},
		{"restarted as a device plugin it writes device-plugin", "device-plugin", "device-plugin"},
		{"a publisher told no card API leaves the annotation as it is", "", "device-plugin"},
	} {
		p := New(client, registry(t, 2), Options{Node: "node-a", Heartbeat: time.Minute, CardAPI: step.cardAPI}, nil)
		if err := p.Publish(context.Background()); err != nil {
			t.Fatal(err)
		}
		ann := nodeAnnotations(t, client)
		if got := ann[api.AnnotationCardAPI]; got != step.want {
			t.Errorf("%s: %s=%q, want %q", step.name, api.AnnotationCardAPI, got, step.want)
		}
		if ann[api.AnnotationInventory] == "" {
			t.Errorf("%s: no inventory beside the card API", step.name)
		}
	}
}
