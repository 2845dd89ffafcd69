package book

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
)

// What a placed task holds: a bound pod's own assignment for its node, else the
// in-flight store's; never an assignment naming another node, and never one on a
// pod that is not bound.
func TestHoldingsTrustOnlyAnAssignmentForTheBoundNode(t *testing.T) {
	flying := &api.PodAssignment{Version: api.AssignmentVersion, Node: "n1", QoS: api.QoSBurstShare,
		Containers: []api.ContainerAssignment{{Name: "main", Cards: []api.CardAssignment{{UUID: "GPU-in-flight", MemoryMiB: 1000, Cores: 10}}}}}
	store := NewInFlight()
	h := NewHoldings(&api.Decoders{}, store, api.DefaultResourceNames())
	for _, tt := range []struct {
		name     string
		pod      func() *vapi.TaskInfo
		inFlight bool
		wantCard string
		wantErr  bool
	}{
		{"a bound pod holds its own assignment", func() *vapi.TaskInfo {
			return vapi.NewTaskInfo(assigned(vgpuPod("own", "n1", 1, 1000, 10), "n1", "GPU-own", 1000, 10))
		}, true, "GPU-own", false},
		{"a bound pod without one holds what is in flight", func() *vapi.TaskInfo {
			return vapi.NewTaskInfo(vgpuPod("bare", "n1", 1, 1000, 10))
		}, true, "GPU-in-flight", false},
		{"an assignment for another node is not truth", func() *vapi.TaskInfo {
			return vapi.NewTaskInfo(assigned(vgpuPod("moved", "n1", 1, 1000, 10), "n2", "GPU-moved", 1000, 10))
		}, false, "", false},
		{"an unbound pod's assignment is not truth", func() *vapi.TaskInfo {
			return vapi.NewTaskInfo(assigned(vgpuPod("written-back", "", 1, 1000, 10), "n1", "GPU-written-back", 1000, 10))
		}, false, "", false},
		{"a malformed assignment is an error", func() *vapi.TaskInfo {
			p := vgpuPod("malformed", "n1", 1, 1000, 10)
			p.Annotations[api.AnnotationAssignment] = "{"
			return vapi.NewTaskInfo(p)
		}, true, "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			task := tt.pod()
			if tt.inFlight {
				store.Put(types.UID(task.UID), flying, time.Now())
				defer store.Delete(types.UID(task.UID))
			}
			for call := 0; call < 2; call++ { // the second from the session's memo
				cs, _, ok, err := h.Of(task)
				if (err != nil) != tt.wantErr {
					t.Fatalf("call %d: err %v, want error %v", call, err, tt.wantErr)
				}
				card := ""
				if ok && len(cs) == 1 && len(cs[0].Cards) == 1 {
					card = cs[0].Cards[0].UUID
				}
				if card != tt.wantCard {
					t.Fatalf("call %d: holds %q (ok %v), want %q", call, card, ok, tt.wantCard)
				}
			}
		})
	}
}

func TestConfirmedOnAndHasAssignment(t *testing.T) {
	dec := &api.Decoders{}
	own := assigned(vgpuPod("own", "n1", 1, 1000, 10), "n1", "GPU-0", 1000, 10)
	other := assigned(vgpuPod("other", "n2", 1, 1000, 10), "n1", "GPU-0", 1000, 10)
	volcano := vgpuPod("volcano", "n1", 1, 1000, 10)
	volcano.Annotations[api.VolcanoAssignedIDs] = "GPU-0,NVIDIA,1000,10:;"
	bare := vgpuPod("bare", "n1", 1, 1000, 10)
	if !ConfirmedOn(dec, own) || ConfirmedOn(dec, other) || ConfirmedOn(dec, bare) {
		t.Error("ConfirmedOn: want only the pod whose assignment names its node")
	}
	if !HasAssignment(own) || !HasAssignment(volcano) || HasAssignment(bare) {
		t.Error("HasAssignment: want Tessera's and Volcano's, not a bare pod")
	}
}

// A placed pod that asked for idle cards only holds them so, from its own assignment
// or from the in-flight store: the annotation is on the pod either way.
func TestHoldingsReadIdleOnlyOffThePod(t *testing.T) {
	store := NewInFlight()
	h := NewHoldings(&api.Decoders{}, store, api.DefaultResourceNames())
	idle := func(p *corev1.Pod) *corev1.Pod {
		p.Annotations[api.AnnotationCardPolicy] = string(api.PolicyIdleOnly)
		return p
	}
	bound := vapi.NewTaskInfo(idle(assigned(vgpuPod("bound", "n1", 1, 1000, 10), "n1", "GPU-0", 1000, 10)))
	flying := vapi.NewTaskInfo(idle(vgpuPod("flying", "n1", 1, 1000, 10)))
	store.Put(types.UID(flying.UID), &api.PodAssignment{Version: api.AssignmentVersion, Node: "n1", QoS: api.QoSFixedShare,
		Containers: []api.ContainerAssignment{{Name: "main", Cards: []api.CardAssignment{{UUID: "GPU-1", MemoryMiB: 1000, Cores: 10}}}}}, time.Now())
	shared := vapi.NewTaskInfo(assigned(vgpuPod("shared", "n1", 1, 1000, 10), "n1", "GPU-2", 1000, 10))
	for task, want := range map[*vapi.TaskInfo]bool{bound: true, flying: true, shared: false} {
		if _, tenancy, ok, err := h.Of(task); !ok || err != nil || tenancy.IdleOnly != want || tenancy.QoS != api.QoSFixedShare {
			t.Errorf("%s holds as %+v (ok %v, %v), want idle-only %v", task.Name, tenancy, ok, err, want)
		}
	}
}
