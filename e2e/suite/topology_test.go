package suite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// Topology Manager: gpu-c's kubelet sees two NUMA nodes (kubelet-ns splits this
// machine's two CPUs and its memory between them) and runs topologyManagerPolicy
// single-numa-node; its fake machine puts cards 0-1 on NUMA node 0 and cards 2-3 on node 1.
// The kubelet's device hint counts free slots per NUMA node, not which card the scheduler
// chose: for one slot both nodes are preferred hints, and the merge takes the lower, node
// 0, after which only node 0's slots are offered.
//
// With the agent's default (slotTopology: none) the slots carry no NUMA node, the
// kubelet has no preference, and a pod assigned card 3 (NUMA node 1) runs on card 3. With
// slotTopology: numa the kubelet offers only node-0 slots, and the agent refuses the pod
// rather than hand it a card the scheduler did not choose: it fails admission naming its
// card.
func TestTopologyManagerSingleNUMANodeAndTheSchedulersCard(t *testing.T) {
	n := ns(t, "topology")
	defer cleanup(t, n)
	ctx := context.Background()
	one := []workload.Container{{Name: "main", Cards: 1, MemPct: 10, Cores: 10}}
	pinned := func(name, card string) {
		submit(t, workload.Job(n, name, "default", 1, workload.Task{Name: "t", Replicas: 1, Containers: one,
			Annotations: map[string]string{api.AnnotationGPUUUIDInclude: card}}))
	}

	pinned("numa1-none", "GPU-gpu-c-3")
	pods, err := workload.WaitPods(ctx, cl.Client, n, "numa1-none", 2*time.Minute, workload.AllPhase(1, corev1.PodRunning))
	if err != nil {
		t.Fatalf("slotTopology none: the pod assigned a NUMA-1 card is not running: %v", err)
	}
	checkHandoff(t, pods) // its kubelet slot is on GPU-gpu-c-3

	// The agent again, now putting slots on NUMA nodes; wait until the kubelet has them.
	cl.KillAgent("gpu-c")
	if err := cl.StartAgent(ctx, "gpu-c", "--slot-topology=numa"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cl.KillAgent("gpu-c")
		if err := cl.StartAgent(ctx, "gpu-c"); err != nil {
			t.Error(err)
		}
		if err := cl.WaitNodeReady(ctx, "gpu-c", 90*time.Second); err != nil {
			t.Error(err)
		}
	}()
	if err := waitSlotNUMA(ctx, "gpu-c", true); err != nil {
		t.Fatal(err)
	}
	pinned("numa1-numa", "GPU-gpu-c-2")
	settled := func(pods []corev1.Pod) bool {
		return len(pods) > 0 && (pods[0].Status.Phase == corev1.PodRunning || pods[0].Status.Phase == corev1.PodFailed)
	}
	pods, err = workload.WaitPods(ctx, cl.Client, n, "numa1-numa", 2*time.Minute, settled)
	if err != nil {
		t.Fatal(err)
	}
	p := pods[0]
	t.Logf("slotTopology numa: pod %s %s: %s: %s", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
	if p.Status.Phase != corev1.PodFailed || p.Status.Reason != "UnexpectedAdmissionError" ||
		!strings.Contains(p.Status.Message, "GPU-gpu-c-2") {
		t.Errorf("slotTopology numa under single-numa-node: pod %s is %s (%s: %s), want refused at admission naming GPU-gpu-c-2",
			p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
}

// waitSlotNUMA waits until the node's kubelet reports its vGPU slots with (or without)
// NUMA nodes in the PodResources API's allocatable devices, i.e. it has the agent's latest
// device list.
func waitSlotNUMA(ctx context.Context, node string, withNUMA bool) error {
	sock := filepath.Join(cl.NodeDir(node), "kubelet", "pod-resources", "kubelet.sock")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := podresourcesv1.NewPodResourcesListerClient(conn)
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := client.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		slots, numa := 0, 0
		for _, d := range resp.GetDevices() {
			if d.GetResourceName() != api.ResourceNumber {
				continue
			}
			slots += len(d.GetDeviceIds())
			if len(d.GetTopology().GetNodes()) > 0 {
				numa += len(d.GetDeviceIds())
			}
		}
		last = fmt.Sprintf("%d slots, %d with a NUMA node", slots, numa)
		return slots > 0 && (numa == slots) == withNUMA && (numa == 0) == !withNUMA, nil
	})
	if err != nil {
		return fmt.Errorf("kubelet of %s never reported slots with NUMA nodes %t: %s: %w", node, withNUMA, last, err)
	}
	return nil
}
