package scale

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
)

// stages are kwok's Stage objects for the run: a node becomes Ready; a pod bound to
// one of kwok's nodes starts Running at once and Succeeds after podLife; a deleted pod
// goes. Node liveness is kwok's lease (--node-lease-duration-seconds), so kwok writes
// no node status after the first.
const stages = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: scale-node-ready
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - type: Ready
        status: "True"
        reason: KubeletReady
        message: kwok node is ready
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: scale-pod-running
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: [Pending]
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - type: Ready
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: scale-pod-succeeded
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: [Running]
  delay:
    durationMilliseconds: %d
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - type: Ready
        status: "False"
        lastTransitionTime: {{ $now | Quote }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        restartCount: 0
        state:
          terminated:
            exitCode: 0
            reason: Completed
            finishedAt: {{ $now | Quote }}
      {{ end }}
      phase: Succeeded
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: scale-pod-delete
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: Exists
  next:
    delete: true
`

// BuildKwok builds kwok from its own module (e2e/tools/kwok) into cacheDir unless it
// is there already, and returns its path.
func BuildKwok(ctx context.Context, e2eDir, cacheDir string) (string, error) {
	out := filepath.Join(cacheDir, "kwok")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "sigs.k8s.io/kwok/cmd/kwok")
	cmd.Dir = filepath.Join(e2eDir, "tools", "kwok")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build kwok (cold ~3 min): %w\n%s", err, b)
	}
	return out, nil
}

// StartKwok writes the stages and runs kwok for the nodes annotated as kwok's.
func StartKwok(c *cluster.Cluster, bin, runDir string, podLife time.Duration) error {
	file := filepath.Join(runDir, "kwok-stages.yaml")
	body := strings.Replace(stages, "%d", fmt.Sprint(podLife.Milliseconds()), 1)
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		return err
	}
	return c.StartAux("kwok", bin, "--kubeconfig="+c.Kubeconfig, "-c", file,
		"--manage-nodes-with-annotation-selector="+kwokAnnotation+"="+kwokValue,
		"--node-lease-duration-seconds=40", "--cidr=10.64.0.0/10", "--node-ip=10.0.0.1")
}
