package agent

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/memguard"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
	"github.com/tessera-gpu/tessera/internal/testing/kubeletsim"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// The guard's limits are the agent's own records, summed per pod and card; pods that are
// gone are left out.
func TestPodLimitsSumTheRecordsOfLivePods(t *testing.T) {
	recs := map[string][]*records.Record{
		"uid-a": {
			{Namespace: "ns", Pod: "a", Container: "main", Cards: []api.CardAssignment{{UUID: "GPU-0", MemoryMiB: 4096}, {UUID: "GPU-1", MemoryMiB: 1024}}},
			{Namespace: "ns", Pod: "a", Container: "side", Cards: []api.CardAssignment{{UUID: "GPU-0", MemoryMiB: 512}}},
		},
		"uid-gone": {{Namespace: "ns", Pod: "gone", Container: "main", Cards: []api.CardAssignment{{UUID: "GPU-0", MemoryMiB: 8192}}}},
	}
	got := podLimits(recs, func(uid types.UID) bool { return uid != "uid-gone" })
	want := map[types.UID]memguard.PodLimits{"uid-a": {Namespace: "ns", Name: "a", Cards: map[string]uint64{"GPU-0": 4608 << 20, "GPU-1": 1024 << 20}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("podLimits = %+v, want %+v", got, want)
	}
}

// testPodUID is the UID admitOnePod gives its pod, shaped as the API server's are (the
// memory guard finds pods by it in cgroup paths).
const testPodUID = "0f1d2c3b-4a59-4687-9a0b-1c2d3e4f5a6b"

// The guard wired into the agent: a pod admitted with 4 GiB on card 2 whose process (a real
// one, placed in the pod's cgroup in a procfs of the test's own) holds 9 GiB there by NVML's
// count is killed, and the pod gets an event.
func TestTheAgentStopsAProcessOverItsPodsLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, cfg := agentOnFakeKubelet(t, "--memory-guard-interval=1s")
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	machine := nvmlfake.FourCardsTwoNUMA()
	procRoot := t.TempDir()
	if err := os.MkdirAll(filepath.Join(procRoot, "self", "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The host's pid namespace, as the agent with hostPID sees it.
	if err := os.Symlink("pid:[4026531836]", filepath.Join(procRoot, "self", "ns", "pid")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Deps{NVML: machine, Client: client, ProcRoot: procRoot}) }()
	if err := k.WaitFor(ctx, kubeletsim.RegisteredAtLeast(1)); err != nil {
		t.Fatalf("no registration: %v", err)
	}
	p, _ := admitOnePod(ctx, t, client, k, machine.UUID(2), api.QoSBurstShare, 4096, 25)

	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	pidDir := filepath.Join(procRoot, strconv.Itoa(cmd.Process.Pid))
	if err := os.MkdirAll(pidDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cg := "0::/kubepods/burstable/pod" + string(p.UID) + "/c0ffee\n"
	if err := os.WriteFile(filepath.Join(pidDir, "cgroup"), []byte(cg), 0o644); err != nil {
		t.Fatal(err)
	}
	machine.SetProcesses(2, []nvml.ProcessInfo{{Pid: uint32(cmd.Process.Pid), UsedGpuMemory: 9 << 30}})

	exit := make(chan error, 1)
	go func() { exit <- cmd.Wait() }()
	select {
	case err := <-exit:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("the process ended with %v, want SIGKILL", err)
		}
	case <-ctx.Done():
		t.Fatal("the process over its pod's limit was never stopped")
	}
	var evs *corev1.EventList
	for evs == nil || len(evs.Items) == 0 {
		if ctx.Err() != nil {
			t.Fatal("no event on the pod")
		}
		evs, _ = client.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		time.Sleep(20 * time.Millisecond)
	}
	if e := evs.Items[0]; e.Reason != memguard.ReasonOverLimit || e.InvolvedObject.UID != p.UID || !strings.Contains(e.Message, "9216 MiB") {
		t.Errorf("event %s %q on %s, want %s naming 9216 MiB on the pod", e.Reason, e.Message, e.InvolvedObject.UID, memguard.ReasonOverLimit)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
