package suite

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// explainFailedPods logs, for up to three failed pods of the namespace, the lines their
// node's kubelet and agent wrote about them: a pod that fails once in a long run must
// leave enough behind to find why.
func explainFailedPods(t *testing.T, ns string) {
	t.Helper()
	l, err := cl.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("listing pods to explain failures: %v", err)
		return
	}
	shown := 0
	for _, p := range l.Items {
		if p.Status.Phase != corev1.PodFailed || shown == 3 {
			continue
		}
		shown++
		t.Logf("pod %s failed on %s: %s %s", p.Name, p.Spec.NodeName, p.Status.Reason, p.Status.Message)
		for _, comp := range []string{"kubelet-", "agent-"} {
			for _, line := range linesAbout(filepath.Join(cl.LogDir(), comp+p.Spec.NodeName+".log"), p.Name, 8) {
				t.Logf("  %s%s: %s", comp, p.Spec.NodeName, line)
			}
		}
	}
}

// linesAbout returns the last n lines of a log file that mention s.
func linesAbout(path, s string, n int) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return []string{"cannot read: " + err.Error()}
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}
