package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/internal/testing/kubeletsim"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// The agent wired as the chart runs it (--uninstall-daemonset), against a fake kubelet that
// serves the real PodResources API: it removes the host files when it stops after its
// DaemonSet was deleted and no pod holds a slot, keeps them while one does, and keeps them
// when it is stopped with its DaemonSet still there (a restart or an upgrade).
func TestTheAgentRemovesHostFilesOnlyWhenUninstalledAndUnused(t *testing.T) {
	for _, tt := range []struct {
		name              string
		deleteDS, podHold bool
		removed           bool
	}{
		{"uninstalled with no pod holding a slot: removed", true, false, true},
		{"uninstalled while a pod holds a slot: kept", true, true, false},
		{"stopped for a restart or an upgrade: kept", false, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			k, cfg := agentOnFakeKubelet(t, "--uninstall-daemonset=gpu/tessera-agent")
			if err := os.WriteFile(cfg.HookLibrary, []byte("lib"), 0o755); err != nil {
				t.Fatal(err)
			}
			client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
				&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu", Name: "tessera-agent"}})
			machine := nvmlfake.FourCardsTwoNUMA()
			done := make(chan error, 1)
			go func() { done <- Run(ctx, cfg, Deps{NVML: machine, Client: client}) }()
			if err := k.WaitFor(ctx, kubeletsim.RegisteredAtLeast(1)); err != nil {
				t.Fatalf("no registration: %v", err)
			}
			if tt.podHold {
				holdASlot(ctx, t, k, client, machine.UUID(1))
			}
			if tt.deleteDS {
				if err := client.AppsV1().DaemonSets("gpu").Delete(ctx, "tessera-agent", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			for _, p := range []string{cfg.HookLibrary, filepath.Join(cfg.StateDir, "ld.so.preload")} {
				if _, err := os.Stat(p); (err == nil) == tt.removed {
					t.Errorf("%s: stat %v, want removed %t", p, err, tt.removed)
				}
			}
		})
	}
}

// holdASlot has the fake kubelet admit and start a pod with one slot of the card.
func holdASlot(ctx context.Context, t *testing.T, k *kubeletsim.Kubelet, client *fake.Clientset, uuid string) {
	t.Helper()
	enc, err := api.EncodeAssignment(&api.PodAssignment{Node: "node-a", QoS: api.QoSBurstShare, Containers: []api.ContainerAssignment{
		{Name: "main", Cards: []api.CardAssignment{{UUID: uuid, MemoryMiB: 1024, Cores: 10}}}}})
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train-0", Namespace: "ml", UID: "uid-train-0",
		Annotations: map[string]string{api.AnnotationAssignment: enc, api.AnnotationHandoff: api.HandoffPending, api.AnnotationQoS: string(api.QoSBurstShare)}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{api.ResourceNumber: resource.MustParse("1"), api.ResourceMemory: resource.MustParse("1024"),
				api.ResourceCores: resource.MustParse("10")}}}}}}
	if _, err := client.CoreV1().Pods("ml").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Admit(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := k.StartContainers(ctx, p); err != nil {
		t.Fatal(err)
	}
}
