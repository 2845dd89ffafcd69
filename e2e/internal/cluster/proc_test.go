package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestSchedulerGoneTellsACrashFromARunningScheduler(t *testing.T) {
	c := &Cluster{logDir: t.TempDir()}
	if err := c.SchedulerGone(); err != nil {
		t.Fatalf("no scheduler started: %v, want nil", err)
	}

	running, err := startProc(c.logDir, "vc-scheduler", "sleep", "30")
	if err != nil {
		t.Fatal(err)
	}
	defer running.stop(time.Second)
	c.sched = running
	if err := c.SchedulerGone(); err != nil {
		t.Fatalf("running scheduler: %v, want nil", err)
	}

	crashed, err := startProc(c.logDir, "vc-scheduler", "sh", "-c", "exit 2")
	if err != nil {
		t.Fatal(err)
	}
	c.sched = crashed
	<-crashed.done
	err = c.SchedulerGone()
	if err == nil || !strings.Contains(err.Error(), "exit status 2") || !strings.Contains(err.Error(), "vc-scheduler.log") {
		t.Fatalf("crashed scheduler: %v, want its exit status and log named", err)
	}
}

// eventually polls cond every 10 ms for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 5 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A supervised process that dies by itself is logged with its exit status and the end of
// its log (from the Go panic) and restarted after RestartSec, later exits waiting twice as
// long each time up to the cap; one the harness kills is left down until the harness
// starts another, which the supervisor then watches; Stop (quit) ends the supervisor.
func TestSupervisorRestartsWhatDiesByItself(t *testing.T) {
	dir := t.TempDir()
	var (
		mu    sync.Mutex
		cur   *proc
		exits []Exit
		procs []*proc
	)
	start := func(script string) *proc {
		p, err := startProc(dir, "kubelet-n1", "sh", "-c", script)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		cur = p
		procs = append(procs, p)
		mu.Unlock()
		return p
	}
	defer func() {
		for _, p := range procs {
			p.stop(time.Second)
		}
	}()
	// The first two runs crash, the third stays up.
	scripts := []string{`echo again; exit 3`, `exec sleep 30`}
	restarts := 0
	quit := make(chan struct{})
	s := &supervisor{what: "kubelet", node: "n1", quit: quit,
		policy: restartPolicy{Delay: 40 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Stable: time.Hour},
		current: func() *proc {
			mu.Lock()
			defer mu.Unlock()
			return cur
		},
		restart: func(prev *proc) (*proc, error) {
			mu.Lock()
			superseded := cur != prev
			script := scripts[min(restarts, len(scripts)-1)]
			restarts++
			mu.Unlock()
			if superseded {
				return nil, errSuperseded
			}
			return start(script), nil
		},
		exited: func(e Exit) {
			mu.Lock()
			exits = append(exits, e)
			mu.Unlock()
		}}
	first := start(`echo starting; echo "panic: runtime error: invalid memory address or nil pointer dereference"; ` +
		`echo; echo "goroutine 7 [running]:"; exit 2`)
	ended := make(chan struct{})
	go func() { s.run(); close(ended) }()

	snapshot := func() ([]Exit, *proc, int) {
		mu.Lock()
		defer mu.Unlock()
		return append([]Exit(nil), exits...), cur, restarts
	}
	eventually(t, "two exits and a third run", func() bool {
		e, p, n := snapshot()
		done, _ := p.exited()
		return len(e) == 2 && p != first && !done && n == 2
	})
	e, running, _ := snapshot()
	if e[0].Status != "exit status 2" || e[0].Node != "n1" || e[0].Process != "kubelet-n1" ||
		!strings.HasPrefix(e[0].Tail, "panic: runtime error") || !strings.Contains(e[0].Tail, "goroutine 7 [running]:") ||
		e[0].Log != filepath.Join(dir, "kubelet-n1.log") {
		t.Errorf("first exit %+v: want exit status 2, node n1 and the tail from the panic of its log", e[0])
	}
	if e[1].Status != "exit status 3" || !strings.HasSuffix(e[1].Tail, "again") {
		t.Errorf("second exit %+v: want exit status 3 and the end of its log", e[1])
	}
	if e[0].RestartIn != 40*time.Millisecond || e[1].RestartIn != 80*time.Millisecond {
		t.Errorf("waited %s then %s before the restarts, want 40ms then 80ms", e[0].RestartIn, e[1].RestartIn)
	}

	// Killed by the harness (KillKubelet): left down.
	running.kill()
	time.Sleep(300 * time.Millisecond)
	if e, p, n := snapshot(); len(e) != 2 || p != running || n != 2 {
		t.Fatalf("after a deliberate kill: %d exits, %d restarts, current replaced %t; want it left down", len(e), n, p != running)
	}

	// The harness starts another (StartKubelet): watched again, and restarted when it dies.
	start(`exit 4`)
	eventually(t, "the harness's own start restarted after it died", func() bool {
		e, _, _ := snapshot()
		return len(e) == 3 && e[2].Status == "exit status 4"
	})
	close(quit)
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("supervisor still running after quit")
	}
}

// The cluster's kubelet supervisor with a stand-in kubelet (a shell script that creates
// the registration socket as the kubelet does): a kubelet that crashes by itself is
// restarted and listed in KubeletExits; KillKubelet leaves it down until StartKubelet;
// Stop ends everything.
func TestKubeletSupervisorRestartsACrashedKubeletOnly(t *testing.T) {
	saved := kubeletRestart
	kubeletRestart = restartPolicy{Delay: 50 * time.Millisecond, MaxDelay: 200 * time.Millisecond, Stable: time.Hour}
	defer func() { kubeletRestart = saved }()
	dir := t.TempDir()
	crashOnce := filepath.Join(dir, "crash-once")
	if err := os.WriteFile(crashOnce, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// kubelet-ns's arguments come first: --device-plugins=DIR ... -- kubelet ...
	script := filepath.Join(dir, "kubelet-ns")
	if err := os.WriteFile(script, []byte(fmt.Sprintf(`#!/bin/sh
for a; do case "$a" in --device-plugins=*) d="${a#--device-plugins=}";; esac; done
mkdir -p "$d" && touch "$d/kubelet.sock"
if [ -e %q ]; then
	rm %q
	sleep 0.2
	echo "panic: runtime error: invalid memory address or nil pointer dereference [recovered]"
	exit 2
fi
exec sleep 30
`, crashOnce, crashOnce)), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Opts: Options{Bin: &Binaries{KubeletNS: script, Kubelet: "kubelet"}, RunDir: dir, Nodes: []Node{{Name: "n1"}}},
		logDir: filepath.Join(dir, "logs"), kubelets: map[string]*proc{}, quit: make(chan struct{}), nodeQuit: map[string]chan struct{}{}}
	if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx := context.Background()
	if err := c.StartKubelet(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	crashing := c.kubelet("n1")
	c.superviseKubelet("n1", c.nodeDone("n1"))

	eventually(t, "the crashed kubelet restarted", func() bool {
		p := c.kubelet("n1")
		done, _ := p.exited()
		return p != crashing && !done && len(c.KubeletExits()) == 1
	})
	e := c.KubeletExits()[0]
	if e.Node != "n1" || e.Status != "exit status 2" || !strings.HasPrefix(e.Tail, "panic: ") {
		t.Errorf("exit %+v: want node n1, exit status 2 and the panic", e)
	}

	// A deliberate kill is not restarted...
	killed := c.kubelet("n1")
	c.KillKubelet("n1")
	time.Sleep(400 * time.Millisecond)
	if p := c.kubelet("n1"); p != killed || len(c.KubeletExits()) != 1 {
		t.Fatalf("KillKubelet: the supervisor restarted it (%d exits listed)", len(c.KubeletExits()))
	}
	// ... until the harness starts it again.
	if err := c.StartKubelet(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	restarted := c.kubelet("n1")
	if restarted == killed {
		t.Fatal("StartKubelet did not replace the killed kubelet")
	}
	c.Stop()
	if done, _ := restarted.exited(); !done {
		t.Error("kubelet still running after Stop")
	}
	time.Sleep(200 * time.Millisecond)
	if p := c.kubelet("n1"); p != restarted || len(c.KubeletExits()) != 1 {
		t.Errorf("after Stop: the supervisor restarted the kubelet (%d exits listed)", len(c.KubeletExits()))
	}
	if err := syscall.Kill(restarted.cmd.Process.Pid, 0); err == nil {
		t.Error("the kubelet's process still exists after Stop")
	}
}

// logTail starts at the Go panic of the log's last run when it has one, else it is the
// run's last 20 lines.
func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := 0; i < 30; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	plain := filepath.Join(dir, "plain.log")
	if err := os.WriteFile(plain, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := logTail(plain); !strings.HasPrefix(got, "line 10\n") || !strings.HasSuffix(got, "line 29") {
		t.Errorf("plain log tail %q, want lines 10 to 29", got)
	}
	b.WriteString("panic: boom [recovered]\n\tpanic: boom\n\ngoroutine 1 [running]:\nmain.f()\n")
	// A later run's own lines, after startProc's header: the panic above is not its.
	second := b.String() + runHeader + "2026-01-01T00:00:00Z kubelet [--v=2]\nstarted again\nexiting\n"
	panicked := filepath.Join(dir, "panicked.log")
	if err := os.WriteFile(panicked, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := logTail(panicked), "panic: boom [recovered]\n\tpanic: boom\n\ngoroutine 1 [running]:\nmain.f()"; got != want {
		t.Errorf("panicked log tail %q, want %q", got, want)
	}
	again := filepath.Join(dir, "again.log")
	if err := os.WriteFile(again, []byte(second), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := logTail(again), "started again\nexiting"; got != want {
		t.Errorf("tail of a later run %q, want %q (its own lines only)", got, want)
	}
	if got := logTail(filepath.Join(dir, "missing.log")); !strings.Contains(got, "cannot read") {
		t.Errorf("missing log: %q", got)
	}
}
