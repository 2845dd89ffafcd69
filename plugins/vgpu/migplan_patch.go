package vgpu

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
)

// Writing and removing MIG plans on Nodes, off the session's path (one goroutine per
// session, bounded in time). Each patch carries a JSON Patch test of what the session
// read, so that two schedulers' sessions, or a session and a slow informer, never
// overwrite a plan they did not see: a refused patch is tried again by a later
// session with what it then reads.

// migPlanWriteTimeout bounds one session's plan writes together.
const migPlanWriteTimeout = 10 * time.Second

// migPlanWrite is one change to a node's plan: value set writes a new plan (replacing
// old, if any); value empty removes old.
type migPlanWrite struct {
	node  *corev1.Node
	old   string
	value string
}

// supersede adds w, dropping an earlier write to the same node: a new plan replaces
// an answered one in one patch.
func supersede(ws []migPlanWrite, w migPlanWrite) []migPlanWrite {
	out := ws[:0]
	for _, x := range ws {
		if x.node.Name != w.node.Name {
			out = append(out, x)
		}
	}
	return append(out, w)
}

// migPlanPatch is the JSON Patch of one write. A new plan is written only onto the
// node as the session read it (its resourceVersion); a removal only takes away the
// plan the session read.
func migPlanPatch(w migPlanWrite) ([]byte, error) {
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(api.AnnotationMIGPlan, "~", "~0"), "/", "~1")
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"`
	}
	var ops []op
	if w.value == "" {
		ops = []op{{"test", path, w.old}, {"remove", path, nil}}
	} else {
		if rv := w.node.ResourceVersion; rv != "" {
			ops = append(ops, op{"test", "/metadata/resourceVersion", rv})
		}
		ops = append(ops, op{"add", path, w.value})
	}
	return json.Marshal(ops)
}

// startMIGPlanWrites applies the writes in the background.
func startMIGPlanWrites(client kubernetes.Interface, ws []migPlanWrite) {
	if client == nil || len(ws) == 0 {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), migPlanWriteTimeout)
		defer cancel()
		for _, w := range ws {
			writeMIGPlan(ctx, client, w)
		}
	}()
}

// writeMIGPlan applies one write and logs the outcome.
func writeMIGPlan(ctx context.Context, client kubernetes.Interface, w migPlanWrite) {
	body, err := migPlanPatch(w)
	if err != nil {
		klog.ErrorS(err, "Cannot build a MIG plan patch", "node", w.node.Name)
		return
	}
	_, err = client.CoreV1().Nodes().Patch(ctx, w.node.Name, types.JSONPatchType, body, metav1.PatchOptions{})
	action := "Wrote"
	if w.value == "" {
		action = "Removed"
	}
	switch {
	case err == nil:
		klog.V(2).InfoS(action+" the node's MIG plan", "node", w.node.Name)
	case apierrors.IsNotFound(err):
		klog.V(4).InfoS("Node gone before its MIG plan was written", "node", w.node.Name)
	case apierrors.IsInvalid(err) || apierrors.IsConflict(err) || strings.Contains(err.Error(), "test"):
		klog.V(3).InfoS("The node changed since the session read it; a later session decides its MIG plan again", "node", w.node.Name, "err", err)
	default:
		klog.ErrorS(err, "Cannot write the node's MIG plan", "node", w.node.Name)
	}
}
