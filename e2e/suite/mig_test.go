package suite

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// MIG: gpu-e's two H100s are in MIG mode, split at start into three 3g.40gb and four
// 1g.10gb instances (fake-gpu-agent's h100migx2). Pods annotated tessera.io/mig-profile
// ask for whole instances of that profile. Each must land on gpu-e with an assignment
// naming one of the node's instances of its profile on its parent card, and the
// container must be handed exactly that MIG device: NVIDIA_VISIBLE_DEVICES and vgpu-core's
// TESSERA_VISIBLE_UUIDS are the MIG UUID, its memory limit is the instance's memory and
// its SM limit 100. No instance goes to two pods.
func TestMIGInstancesAreHandedOverWhole(t *testing.T) {
	n := ns(t, "mig")
	defer cleanup(t, n) // its handoff check compares each container with its MIG device
	one := []workload.Container{{Name: "main", Cards: 1}}
	want := map[string]string{"big": "3g.40gb", "small": "1g.10gb"}
	submit(t,
		workload.Job(n, "big", "default", 3, workload.Task{Name: "t", Replicas: 3, Containers: one,
			Annotations: map[string]string{api.AnnotationMIGProfile: want["big"]}}),
		workload.Job(n, "small", "default", 1, workload.Task{Name: "t", Replicas: 1, Containers: one,
			Annotations: map[string]string{api.AnnotationMIGProfile: want["small"]}}))
	var running []corev1.Pod
	for job, replicas := range map[string]int{"big": 3, "small": 1} {
		pods, err := workload.WaitPods(context.Background(), cl.Client, n, job, 2*time.Minute, workload.AllPhase(replicas, corev1.PodRunning))
		if err != nil {
			t.Fatal(err)
		}
		running = append(running, pods...)
	}
	node, err := cl.Client.CoreV1().Nodes().Get(context.Background(), "gpu-e", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	layout, err := api.DecodeMIGInstances(node.Annotations[api.AnnotationMIGInstances])
	if err != nil {
		t.Fatalf("gpu-e's %s: %v", api.AnnotationMIGInstances, err)
	}
	h := handed(t)
	holder := map[string]string{} // MIG UUID -> pod
	for _, p := range running {
		job := p.Labels["volcano.sh/job-name"]
		if p.Spec.NodeName != "gpu-e" {
			t.Errorf("%s runs on %s, want gpu-e (the only node with MIG instances)", p.Name, p.Spec.NodeName)
			continue
		}
		if s := p.Annotations[api.AnnotationHandoff]; s != api.HandoffDone {
			t.Errorf("%s: handoff %q (%s), want done", p.Name, s, p.Annotations[api.AnnotationHandoffMessage])
		}
		a, err := api.DecodeAssignment(p.Annotations[api.AnnotationAssignment])
		if err != nil || len(a.Containers) != 1 || len(a.Containers[0].Cards) != 1 || !a.Containers[0].Cards[0].IsMIG() {
			t.Errorf("%s: assignment %q (%v), want one MIG instance for its one container", p.Name, p.Annotations[api.AnnotationAssignment], err)
			continue
		}
		card := a.Containers[0].Cards[0]
		var inst *api.MIGInstance
		for i, in := range layout.Cards[card.UUID] {
			if in.UUID == card.MIG {
				inst = &layout.Cards[card.UUID][i]
			}
		}
		if inst == nil || inst.Profile != want[job] || card.MemoryMiB != inst.MemoryMiB || card.Cores != 100 {
			t.Errorf("%s: assigned %+v, which is not a whole %s instance of card %s on gpu-e (%+v)", p.Name, card, want[job], card.UUID, inst)
			continue
		}
		if prev, dup := holder[card.MIG]; dup {
			t.Errorf("MIG device %s given to both %s and %s", card.MIG, prev, p.Name)
		}
		holder[card.MIG] = p.Name
		r, ok := h.Records[string(p.UID)+"/main"]
		if !ok {
			t.Errorf("%s: no CRI record", p.Name)
			continue
		}
		mem := strconv.FormatInt(inst.MemoryMiB, 10)
		if r.Env["NVIDIA_VISIBLE_DEVICES"] != card.MIG || r.Env[api.EnvVisibleUUIDs] != card.MIG ||
			r.Env[api.EnvMemoryLimitMiB] != mem || r.Env[api.EnvSMLimit] != "100" || len(r.CDIDevices) != 0 {
			t.Errorf("%s: handed NVIDIA_VISIBLE_DEVICES=%q %s=%q %s=%q %s=%q CDI %v; want exactly MIG device %s with %s MiB and SM limit 100",
				p.Name, r.Env["NVIDIA_VISIBLE_DEVICES"], api.EnvVisibleUUIDs, r.Env[api.EnvVisibleUUIDs], api.EnvMemoryLimitMiB,
				r.Env[api.EnvMemoryLimitMiB], api.EnvSMLimit, r.Env[api.EnvSMLimit], r.CDIDevices, card.MIG, mem)
		}
		t.Logf("%s: %s instance %s of card %s, NVIDIA_VISIBLE_DEVICES=%s", p.Name, inst.Profile, card.MIG, card.UUID, r.Env["NVIDIA_VISIBLE_DEVICES"])
	}
}
