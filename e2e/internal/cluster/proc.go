package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// proc is one child process logging to <run>/logs/<name>.log.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	mu   sync.Mutex
}

func startProc(logDir, name, bin string, args ...string) (*proc, error) {
	log, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "==== %s %s %v\n", time.Now().Format(time.RFC3339), bin, args)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Own process group, and killed with the harness if it dies without Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
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
