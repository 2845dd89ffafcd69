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

// Stages of kwok shared by every harness that runs kwok's nodes: a node becomes Ready
// (node liveness is then kwok's lease, --node-lease-duration-seconds, so kwok writes no
// node status after the first); a pod bound to one starts Running at once; a deleted pod
// goes. A harness adds how its pods end (stages below, or volcano-e2e's per script).
const (
	NodeReadyStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: kwok-node-ready
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
`
	PodRunningStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: kwok-pod-running
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
`
	PodDeleteStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: kwok-pod-delete
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: Exists
  next:
    delete: true
`
)

// podSucceededStage ends a Running pod after a delay (%d: milliseconds).
const podSucceededStage = `apiVersion: kwok.x-k8s.io/v1alpha1
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
`

// stages are make scale's: the shared life cycle, and every pod Succeeds after podLife.
const stages = NodeReadyStage + "---\n" + PodRunningStage + "---\n" + podSucceededStage + "---\n" + PodDeleteStage

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

// StartKwok writes make scale's stages and runs kwok for the nodes annotated as kwok's.
func StartKwok(c *cluster.Cluster, bin, runDir string, podLife time.Duration) error {
	return RunKwok(c, bin, runDir, strings.Replace(stages, "%d", fmt.Sprint(podLife.Milliseconds()), 1))
}

// RunKwok writes stagesYAML into runDir and runs kwok (logs/kwok.log) for the nodes
// annotated as kwok's (KwokAnnotation).
func RunKwok(c *cluster.Cluster, bin, runDir, stagesYAML string) error {
	file := filepath.Join(runDir, "kwok-stages.yaml")
	if err := os.WriteFile(file, []byte(stagesYAML), 0o644); err != nil {
		return err
	}
	return c.StartAux("kwok", bin, "--kubeconfig="+c.Kubeconfig, "-c", file,
		"--manage-nodes-with-annotation-selector="+KwokAnnotation+"="+KwokValue,
		"--node-lease-duration-seconds=40", "--cidr=10.64.0.0/10", "--node-ip=10.0.0.1")
}
