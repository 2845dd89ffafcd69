package main

import (
	"strconv"
	"strings"

	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/scale"
)

// finish is a container program of Volcano's suites that ends by itself: where the
// shell script sits in the pod (the Kubernetes Jobs' helpers put it in the command,
// Volcano's job helper in the args), the script, and how it ends.
type finish struct {
	name, key, script, phase, reason string
	exitCode                         int
}

// finishes are the scripts that end: a Kubernetes Job's "sleep 10" (succeeds) and
// "sleep 10 && exit 1" (fails), and a VolcanoJob's "sleep 10s" (succeeds).
var finishes = []finish{
	{"vce2e-k8s-job-succeeds", ".spec.containers.[0].command.[2]", "sleep 10", "Succeeded", "Completed", 0},
	{"vce2e-k8s-job-fails", ".spec.containers.[0].command.[2]", "sleep 10 && exit 1", "Failed", "Error", 1},
	{"vce2e-vcjob-succeeds", ".spec.containers.[0].args.[1]", "sleep 10s", "Succeeded", "Completed", 0},
}

// finishStage ends a Running pod whose script is f's, ten seconds after it started.
const finishStage = `---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: NAME
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: [Running]
    - key: 'KEY'
      operator: In
      values: ['SCRIPT']
  delay:
    durationMilliseconds: 10000
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
            exitCode: EXIT
            reason: REASON
            finishedAt: {{ $now | Quote }}
      {{ end }}
      phase: PHASE
`

// KwokStages is the stages file: the node and pod life cycle, and one stage per finish.
func KwokStages() string {
	var b strings.Builder
	// The shared life cycle (a pod Running until deleted), then how the few scripts of
	// Volcano's suites that end by themselves end.
	b.WriteString(scale.NodeReadyStage + "---\n" + scale.PodRunningStage + "---\n" + scale.PodDeleteStage)
	for _, f := range finishes {
		r := strings.NewReplacer("NAME", f.name, "KEY", f.key, "SCRIPT", f.script, "PHASE", f.phase, "REASON", f.reason,
			"EXIT", strconv.Itoa(f.exitCode))
		b.WriteString(r.Replace(finishStage))
	}
	return b.String()
}

// StartKwok writes the stages into runDir and runs kwok (logs/kwok.log) for the nodes
// annotated as kwok's, with the flags make scale runs it with.
func StartKwok(c *cluster.Cluster, bin, runDir string) error {
	return scale.RunKwok(c, bin, runDir, KwokStages())
}
