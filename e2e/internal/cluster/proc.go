package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// proc is one child process logging to <run>/logs/<name>.log.
type proc struct {
	name    string
	log     string // its log file
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
	err     error
	mu      sync.Mutex
	// asked is set once the harness has asked the process to end (stop, kill): its exit
	// is then deliberate, and a supervisor leaves it alone.
	asked atomic.Bool
}

// runHeader starts the line startProc writes to a log before each run of its process.
const runHeader = "==== "

func startProc(logDir, name, bin string, args ...string) (*proc, error) {
	return startProcWith(procOptions{}, logDir, name, bin, args...)
}

// procOptions are what some processes need beyond startProc's defaults.
type procOptions struct {
	// env is added to the harness's environment.
	env []string
	// cloneflags are namespaces the process starts in (a real-runtime node's init).
	cloneflags uintptr
}

func startProcWith(o procOptions, logDir, name, bin string, args ...string) (*proc, error) {
	log, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "%s%s %s %v\n", runHeader, time.Now().Format(time.RFC3339), bin, args)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if len(o.env) > 0 {
		cmd.Env = append(os.Environ(), o.env...)
	}
	// Own process group, and killed with the harness if it dies without Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Cloneflags: o.cloneflags}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, log: log.Name(), cmd: cmd, started: time.Now(), done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		log.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group and SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	p.asked.Store(true)
	if done, _ := p.exited(); done {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// pause stops the process (SIGSTOP) for d and lets it go on (SIGCONT): its connections
// stay open and unanswered, as when a machine is unreachable.
func (p *proc) pause(d time.Duration) {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGSTOP)
	time.Sleep(d)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
}

// kill ends the process at once, as a crash does.
func (p *proc) kill() {
	p.asked.Store(true)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// freePort returns a loopback port nothing listens on right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitFor polls cond every interval until it returns true, returns an error, the
// process dies or the deadline passes.
func waitFor(ctx context.Context, what string, timeout time.Duration, p *proc, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if p != nil {
			if done, perr := p.exited(); done {
				return fmt.Errorf("%s: %s exited (%v); see its log", what, p.name, perr)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not ready after %s (last error: %v)", what, timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// restartPolicy is how a supervisor restarts a process that ended without the harness
// asking: systemd's Restart=always, waiting Delay before the first restart (RestartSec),
// doubling the wait after each further exit up to MaxDelay (RestartSteps,
// RestartMaxDelaySec), and starting over at Delay once a process has run Stable or
// longer before it exited. There is no start limit: the unit of a kubelet sets
// StartLimitIntervalSec=0.
type restartPolicy struct {
	Delay, MaxDelay, Stable time.Duration
}

// kubeletRestart restarts a node's kubelet. kubeadm's kubelet.service waits 10 s
// (RestartSec=10); the harness starts sooner, so that a node is back before its pods'
// scenarios give up, and backs off when the kubelet keeps dying.
var kubeletRestart = restartPolicy{Delay: 2 * time.Second, MaxDelay: 30 * time.Second, Stable: time.Minute}

// errSuperseded is a restart's answer when the process it would replace is no longer
// the current one (the harness started another, or is stopping).
var errSuperseded = errors.New("superseded")

// Exit is one exit of a supervised process that the harness did not ask for.
type Exit struct {
	Process, Node string
	// Status is how it ended: "exit status 2", "signal: killed".
	Status string
	At     time.Time
	RanFor time.Duration
	// Log is its log file and Tail the end of it (from the Go panic, when there is one).
	Log, Tail string
	// RestartIn is how long the supervisor waited before restarting it.
	RestartIn time.Duration
}

// supervisor restarts one process (a node's kubelet) the way the node's systemd would.
type supervisor struct {
	what, node string
	policy     restartPolicy
	// current is the process to watch (nil: none yet).
	current func() *proc
	// restart starts a new process in place of prev, or returns errSuperseded when prev
	// is no longer current.
	restart func(prev *proc) (*proc, error)
	// exited is told of every exit the harness did not ask for.
	exited func(Exit)
	quit   <-chan struct{}
}

// run watches the current process until quit is closed. A process the harness stopped or
// killed (stop, kill) is left alone until current returns another one; any other exit is
// logged, with the tail of the process's log, and restarted after the policy's delay.
func (s *supervisor) run() {
	delay := s.policy.Delay
	for {
		p := s.current()
		if p == nil {
			if !s.sleep(200 * time.Millisecond) {
				return
			}
			continue
		}
		select {
		case <-p.done:
		case <-s.quit:
			return
		}
		if p.asked.Load() {
			// Deliberate: wait for whoever stopped it to start another (or for the end).
			for s.current() == p {
				if !s.sleep(200 * time.Millisecond) {
					return
				}
			}
			continue
		}
		_, err := p.exited()
		status := "exit status 0"
		if err != nil {
			status = err.Error()
		}
		ran := time.Since(p.started)
		if ran >= s.policy.Stable {
			delay = s.policy.Delay
		}
		e := Exit{Process: p.name, Node: s.node, Status: status, At: time.Now(), RanFor: ran, Log: p.log,
			Tail: logTail(p.log), RestartIn: delay}
		klog.ErrorS(nil, "Process exited without the harness stopping it; restarting it as the node's systemd would",
			"process", s.what, "node", s.node, "exitStatus", status, "ranFor", ran.Round(time.Millisecond),
			"restartIn", delay, "log", p.log, "logTail", e.Tail)
		if s.exited != nil {
			s.exited(e)
		}
		for {
			if !s.sleep(delay) {
				return
			}
			delay = min(2*delay, s.policy.MaxDelay)
			np, err := s.restart(p)
			if errors.Is(err, errSuperseded) {
				break
			}
			if err != nil {
				klog.ErrorS(err, "Restart failed; trying again", "process", s.what, "node", s.node, "restartIn", delay)
				continue
			}
			klog.InfoS("Restarted", "process", s.what, "node", s.node, "pid", np.cmd.Process.Pid, "log", np.log)
			break
		}
	}
}

// sleep waits d, or returns false at once when quit is closed.
func (s *supervisor) sleep(d time.Duration) bool {
	select {
	case <-s.quit:
		return false
	case <-time.After(d):
		return true
	}
}

// logTail is the end of a log's last run (after the last header startProc wrote, in the
// log's final 256 KiB): from the Go panic when there is one (at most 60 lines: the panic
// and the frames that raised it), else its last 20 lines.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	const window = 256 << 10
	if st, err := f.Stat(); err == nil && st.Size() > window {
		if _, err := f.Seek(st.Size()-window, io.SeekStart); err != nil {
			return fmt.Sprintf("(cannot read %s: %v)", path, err)
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], runHeader) {
			lines = lines[i+1:]
			break
		}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "panic: ") {
			// A re-raised panic may print its first line once per recover; start at the first.
			for i > 0 && strings.HasPrefix(lines[i-1], "panic: ") {
				i--
			}
			return strings.Join(lines[i:min(len(lines), i+60)], "\n")
		}
	}
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}
