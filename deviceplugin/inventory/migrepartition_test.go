package inventory

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
)

// An agent that applies MIG plans says so on its Node; one restarted without the
// setting takes the word back, so the scheduler stops planning for it.
func TestThePublisherSaysWhetherTheAgentRepartitions(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	reg := cards.NewRegistry([]api.Card{{UUID: "GPU-a", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Shares: 4, Healthy: true, NUMA: -1}}, nil)
	for _, on := range []bool{true, false} {
		p := New(client, reg, Options{Node: "node-a", Heartbeat: time.Minute, MIGRepartition: on}, nil)
		if err := p.Publish(context.Background()); err != nil {
			t.Fatal(err)
		}
		v, ok := nodeAnnotations(t, client)[api.AnnotationMIGRepartition]
		if on && v != "true" || !on && ok {
			t.Fatalf("setting %v: annotation %q (present %v)", on, v, ok)
		}
	}
}
