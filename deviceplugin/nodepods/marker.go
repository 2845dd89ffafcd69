package nodepods

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/tessera-gpu/tessera/api"
)

// PatchMarker writes the handoff annotations with a JSON merge patch. The patch carries
// the pod's UID as a precondition, so a recreated pod of the same name is never marked.
type PatchMarker struct {
	Client   kubernetes.Interface
	Attempts int
	Backoff  time.Duration
}

// Mark patches the pod, retrying with doubling backoff.
func (m *PatchMarker) Mark(ctx context.Context, pod *corev1.Pod, state, message string) error {
	ann := map[string]any{api.AnnotationHandoff: state, api.AnnotationHandoffMessage: nil}
	if message != "" {
		ann[api.AnnotationHandoffMessage] = message
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID, "annotations": ann}})
	if err != nil {
		return fmt.Errorf("encode handoff patch: %w", err)
	}
	attempts, backoff := max(m.Attempts, 1), m.Backoff
	for i := 0; ; i++ {
		_, err = m.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{})
		if err == nil || i+1 >= attempts {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("patch handoff of %s/%s: %w", pod.Namespace, pod.Name, ctx.Err())
		case <-time.After(backoff):
		}
		backoff *= 2
	}
	if err != nil {
		return fmt.Errorf("patch handoff of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}
