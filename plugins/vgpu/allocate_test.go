package vgpu

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/uthelper"

	"github.com/tessera-gpu/tessera/api"
)

// An allocation that skips the predicates (as a misconfigured action or another
// plugin's allocate path could) onto cards that cannot take the task is refused
// through the event's error: Volcano rolls it back, and the pod never carries an
// assignment or goes to bind without cards.
func TestAllocationThatCannotBookCardsIsRolledBack(t *testing.T) {
	cases := []struct {
		name, node string
		pod        *corev1.Pod
		reason     string
	}{
		{"a node without vGPU inventory", "cpu", vgpuPod("w", "pg", 1, 4096, 25, nil), "has no usable vGPU inventory"},
		{"cards too small for the request", "small", vgpuPod("w", "pg", 1, 80000, 25, nil), "no longer fits the cards of node small"},
		{"a malformed request", "small", vgpuPod("w", "pg", 1, 4096, 25, map[string]string{api.AnnotationQoS: "platinum"}), "has no valid vGPU request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tc := &uthelper.TestCommonStruct{
				Nodes:     []*corev1.Node{cpuNode("cpu"), gpuNode("small", 1, "NVIDIA A30", 24576)},
				PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1)},
				Pods:      []*corev1.Pod{c.pod},
				Queues:    queues(),
			}
			testSched = NewScheduler()
			ssn, p := open(t, tc, tiers(true, nil))

			var task *vapi.TaskInfo
			for _, job := range ssn.Jobs {
				for _, tk := range job.Tasks {
					task = tk
				}
			}
			stmt := framework.NewStatement(ssn)
			err := stmt.Allocate(task, ssn.Nodes[c.node])
			if err == nil {
				t.Fatalf("allocation onto %s succeeded; want it refused", c.node)
			}
			if rb := stmt.UnAllocate(task); rb != nil {
				t.Fatalf("rollback: %v", rb)
			}
			if _, ok := task.Pod.Annotations[api.AnnotationAssignment]; ok {
				t.Fatal("the refused task carries an assignment")
			}
			if task.NodeName != "" || task.Status != vapi.Pending {
				t.Fatalf("after the rollback the task is %s on %q, want Pending on no node", task.Status, task.NodeName)
			}
			if booked(p) != 0 || testSched.inFlight.Len() != 0 {
				t.Fatalf("the ledger holds %d bookings and the store %d assignments, want none", booked(p), testSched.inFlight.Len())
			}
			if mem, cores, _ := usedCards(p, "small"); mem != 0 || cores != 0 {
				t.Fatalf("node small has %d MiB and %d cores booked after the rollback", mem, cores)
			}
			if got := ssn.Nodes[c.node].Used.MilliCPU; got != 0 {
				t.Fatalf("node %s still counts %v mCPU for the rolled-back task", c.node, got)
			}
			if !strings.Contains(lastAllocateErr(p, task, ssn.Nodes[c.node]), c.reason) {
				t.Fatalf("the handler's error does not say %q", c.reason)
			}
		})
	}
}

// lastAllocateErr calls the plugin's allocate handler as Volcano does and returns the
// error it reports (the allocation is rolled back by the caller).
func lastAllocateErr(p *vgpuPlugin, task *vapi.TaskInfo, node *vapi.NodeInfo) string {
	t := task.Clone()
	t.NodeName = node.Name
	t.Status = vapi.Allocated
	e := &framework.Event{Task: t}
	p.onAllocate(e)
	if e.Err == nil {
		return ""
	}
	return e.Err.Error()
}

// staticSigner signs with one key, or has none yet.
type staticSigner struct {
	key api.SigningKey
	ok  bool
}

func (s staticSigner) Key() (api.SigningKey, bool) { return s.key, s.ok }

// Every assignment the plugin writes is signed for the pod's UID and node, so that the
// node agent can tell it from one a tenant wrote; without a key the plugin places no
// vGPU task (the agents would refuse it) and rolls the allocation back.
func TestAssignmentsAreSignedForThePodAndNodeOrNotMadeWithoutAKey(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key := api.NewSigningKey(priv)
	verifier := api.NewVerifier([]ed25519.PublicKey{priv.Public().(ed25519.PublicKey)})
	for _, hasKey := range []bool{true, false} {
		tc := &uthelper.TestCommonStruct{
			Nodes:     []*corev1.Node{gpuNode("small", 1, "NVIDIA A30", 24576)},
			PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1)},
			Pods:      []*corev1.Pod{vgpuPod("w", "pg", 1, 4096, 25, nil)},
			Queues:    queues(),
		}
		testSched = NewScheduler()
		testSched.signer = staticSigner{key, hasKey}
		ssn, p := open(t, tc, tiers(true, nil))
		tc.Run([]framework.Action{allocate.New()})
		got := taskAssignments(t, ssn)
		if !hasKey {
			if len(got) != 0 || booked(p) != 0 {
				t.Fatalf("without a key: %d assignments and %d bookings, want none", len(got), booked(p))
			}
			continue
		}
		if len(got) != 1 {
			t.Fatalf("%d assignments, want 1", len(got))
		}
		for _, job := range ssn.Jobs {
			for _, task := range job.Tasks {
				if err := verifier.VerifyPod(task.Pod, "small"); err != nil {
					t.Fatalf("the plugin's own assignment does not verify: %v", err)
				}
				if err := verifier.VerifyPod(task.Pod, "other"); err == nil {
					t.Fatal("the assignment verifies for another node")
				}
			}
		}
	}
}
