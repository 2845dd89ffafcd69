package suite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/api"
)

// TestMemoryGuardStopsAProcessOverItsPodsLimit: two vGPU pods on gpu-c, 2 GiB each. A real
// host process of each is placed in its pod's cgroup (a kubepods path, as the kubelet
// names them), and NVML on the node lists them on the pods' cards: the first at 6 GiB —
// what a container holds that zeroed its shared region's counters or never loaded
// vgpu-core, neither of which the agent reads — the second at 1 GiB. The node's agent,
// running under the chart's account, kills the first process, leaves the second, and
// posts a GPUMemoryOverLimit event on the first pod.
func TestMemoryGuardStopsAProcessOverItsPodsLimit(t *testing.T) {
	const node = "gpu-c"
	n := ns(t, "memguard")
	ctx := context.Background()
	defer func() {
		_ = cl.Client.CoreV1().Pods(n).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}, metav1.ListOptions{})
		cleanup(t, n)
	}()
	guarded := func(name string) *corev1.Pod {
		p := tenantPod(n, name, "")
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		p.Spec.Containers[0].Resources.Limits[api.ResourceMemory] = resource.MustParse("2048")
		return p
	}
	escape, neighbour := guarded("escape"), guarded("neighbour")
	for _, p := range []*corev1.Pod{escape, neighbour} {
		if _, err := cl.Client.CoreV1().Pods(n).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	escape, neighbour = waitHandedOff(t, n, "escape"), waitHandedOff(t, n, "neighbour")

	procs := map[int]map[int]uint64{} // card index → pid → bytes
	start := func(p *corev1.Pod, bytes uint64) *exec.Cmd {
		cmd := exec.Command("sleep", "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		placeInPodCgroup(t, cmd.Process.Pid, p.UID)
		// After placeInPodCgroup's, so that it runs first: the cgroup empties, then goes.
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		asg, err := api.DecodeAssignment(p.Annotations[api.AnnotationAssignment])
		if err != nil {
			t.Fatal(err)
		}
		uuid := asg.Containers[0].Cards[0].UUID
		i, err := strconv.Atoi(strings.TrimPrefix(uuid, "GPU-"+node+"-"))
		if err != nil {
			t.Fatalf("card %s: %v", uuid, err)
		}
		if procs[i] == nil {
			procs[i] = map[int]uint64{}
		}
		procs[i][cmd.Process.Pid] = bytes
		t.Logf("%s: process %d at %d MiB on %s", p.Name, cmd.Process.Pid, bytes>>20, uuid)
		return cmd
	}
	over, within := start(escape, 6<<30), start(neighbour, 1<<30)
	for i, ps := range procs {
		if err := cl.ListProcesses(node, i, ps); err != nil {
			t.Fatal(err)
		}
		i := i
		t.Cleanup(func() { _ = cl.ListProcesses(node, i, nil) })
	}

	done := make(chan error, 1)
	go func() { done <- over.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("the process over its pod's limit ended with %v, want SIGKILL", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the process over its pod's limit was not stopped within 60 s")
	}
	if err := within.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the neighbour's process, within its limit, was stopped: %v", err)
	}
	var msg string
	for deadline := time.Now().Add(30 * time.Second); msg == "" && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		evs, err := cl.Client.CoreV1().Events(n).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=escape,reason=GPUMemoryOverLimit"})
		if err == nil && len(evs.Items) > 0 {
			msg = evs.Items[0].Message
		}
	}
	if !strings.Contains(msg, "6144 MiB") || !strings.Contains(msg, strconv.Itoa(over.Process.Pid)) {
		t.Fatalf("event on the pod: %q, want one naming 6144 MiB and process %d", msg, over.Process.Pid)
	}
	t.Logf("event: %s", msg)
}

// placeInPodCgroup moves pid into a cgroup whose path names pod the way the kubelet's
// cgroupfs driver does (kubepods…/pod<uid>), in whichever hierarchy this host mounts, so
// that /proc/<pid>/cgroup says the pod as it would for a container's process.
func placeInPodCgroup(t *testing.T, pid int, uid types.UID) {
	t.Helper()
	var tried []string
	for _, root := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		parent := filepath.Join(root, "kubepods-tessera-e2e")
		dir := filepath.Join(parent, "pod"+string(uid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			tried = append(tried, err.Error())
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			tried = append(tried, err.Error())
			_ = os.Remove(dir)
			continue
		}
		t.Cleanup(func() {
			// The process is killed by then (its owner's cleanup runs first).
			for i := 0; i < 50 && os.Remove(dir) != nil; i++ {
				time.Sleep(100 * time.Millisecond)
			}
			_ = os.Remove(parent)
		})
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if !strings.Contains(string(b), "pod"+string(uid)) {
			t.Fatalf("process %d placed in %s, but its /proc cgroup says:\n%s", pid, dir, b)
		}
		return
	}
	t.Fatalf("cannot place a process in a pod cgroup on this host (the harness runs as root): %s", strings.Join(tried, "; "))
}
