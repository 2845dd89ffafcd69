package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"

	"github.com/tessera-gpu/tessera/deviceplugin/dra"
	"github.com/tessera-gpu/tessera/deviceplugin/memguard"
)

// The guard wired into an agent with cardAPI dra: a claim of 4096 MiB on card 1 prepared
// through the kubelet's DRA API, a pod bound to the node whose container references it,
// and a real process in the pod's cgroup (in a procfs of the test's own, in the host's pid
// namespace) holding 9 GiB of card 1 by NVML's count: the process is killed, the pod gets
// an event, and the guard's gauge reads 1.
func TestTheAgentInDRAModeStopsAProcessOverItsClaim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := newDRANode(t, "--card-api=dra", "--memory-guard=enforce", "--memory-guard-interval=1s")
	if err := os.MkdirAll(filepath.Join(n.procRoot, "self", "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("pid:[4026531836]", filepath.Join(n.procRoot, "self", "ns", "pid")); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := n.run(ctx, lis)
	pluginSock := filepath.Join(n.cfg.DRAPluginDir, dra.DriverName, "dra.sock")
	claim := shareOfCard1(t, ctx, n)
	var prepared *drapb.NodePrepareResourceResponse
	for prepared == nil || prepared.Error != "" {
		if ctx.Err() != nil {
			t.Fatalf("the claim was never prepared: %+v", prepared)
		}
		resp, err := drapb.NewDRAPluginClient(dial(t, pluginSock)).NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{
			Claims: []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, UID: string(claim.UID)}}})
		if err == nil {
			prepared = resp.Claims[string(claim.UID)]
		}
		time.Sleep(20 * time.Millisecond)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: claim.Namespace, Name: "train-0", UID: testPodUID},
		Spec: corev1.PodSpec{NodeName: "node-a", ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim.Name)}},
			Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}}}
	if _, err := n.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	pidDir := filepath.Join(n.procRoot, strconv.Itoa(cmd.Process.Pid))
	if err := os.MkdirAll(pidDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pidDir, "cgroup"), []byte("0::/kubepods/burstable/pod"+testPodUID+"/c0ffee\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.machine.SetProcesses(1, []nvml.ProcessInfo{{Pid: uint32(cmd.Process.Pid), UsedGpuMemory: 9 << 30}})

	exit := make(chan error, 1)
	go func() { exit <- cmd.Wait() }()
	select {
	case err := <-exit:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("the process ended with %v, want SIGKILL", err)
		}
	case <-ctx.Done():
		t.Fatal("the process over its claim's memory was never stopped")
	}
	var evs *corev1.EventList
	for evs == nil || len(evs.Items) == 0 {
		if ctx.Err() != nil {
			t.Fatal("no event on the pod")
		}
		evs, _ = n.client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{})
		time.Sleep(20 * time.Millisecond)
	}
	if e := evs.Items[0]; e.Reason != memguard.ReasonOverLimit || e.InvolvedObject.UID != pod.UID || !strings.Contains(e.Message, "limit there is 4096 MiB") {
		t.Errorf("event %s %q on %s, want %s naming the claim's 4096 MiB on the pod", e.Reason, e.Message, e.InvolvedObject.UID, memguard.ReasonOverLimit)
	}
	_, text := get(t, "http://"+lis.Addr().String()+"/metrics")
	if !strings.Contains(text, `tessera_agent_memory_guard_active{node="node-a"} 1`) {
		t.Error("tessera_agent_memory_guard_active is not 1 with the guard running in dra mode")
	}
	// The usage metrics report the pod's claim as a container of its own.
	limit := fmt.Sprintf(`tessera_container_gpu_memory_limit_bytes{container="claim-%s",index="1",namespace="%s",node="node-a",pod="train-0",uuid=`,
		claim.UID, claim.Namespace)
	if !strings.Contains(text, limit) {
		t.Errorf("no series %s... in the metrics:\n%s", limit, text)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
