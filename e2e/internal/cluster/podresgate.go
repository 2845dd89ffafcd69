package cluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Each node agent reaches its kubelet's PodResources socket through a relay in the
// harness (pod-resources.sock in the node's directory), so that a scenario can hold a
// pod in the middle of its admission: the agent asks PodResources in
// GetPreferredAllocation, Allocate and PreStartContainer, and while the relay is held
// its questions wait unanswered, so the kubelet's admission of the pod waits inside the
// device plugin call. The relay copies bytes; it knows nothing of gRPC.

// socketGate holds the bytes an agent sends to its kubelet while it is closed.
type socketGate struct {
	mu      sync.Mutex
	open    chan struct{} // closed while bytes flow
	waiting int           // writes that reached the closed gate since it closed
}

func newSocketGate() *socketGate {
	g := &socketGate{open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *socketGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
		g.waiting = 0
	default: // already held
	}
}

func (g *socketGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// pass returns true once bytes may flow, false when done closes first.
func (g *socketGate) pass(done <-chan struct{}) bool {
	g.mu.Lock()
	open := g.open
	select {
	case <-open:
		g.mu.Unlock()
		return true
	default:
	}
	g.waiting++
	g.mu.Unlock()
	select {
	case <-open:
		return true
	case <-done:
		return false
	}
}

// startPodResourcesRelay listens on the node's relay socket and connects each agent
// connection to the kubelet's socket through the node's gate.
func (c *Cluster) startPodResourcesRelay(node string) error {
	path := c.podResourcesRelay(node)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("pod resources relay: %w", err)
	}
	g := newSocketGate()
	done := make(chan struct{})
	c.mu.Lock()
	c.gates[node] = g
	c.closers = append(c.closers, func() { close(done); g.release(); _ = lis.Close() })
	c.mu.Unlock()
	target := c.podResourcesSocket(node)
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go relay(conn, target, g, done)
		}
	}()
	return nil
}

// relay copies one agent connection to a new connection to the kubelet: answers at
// once, questions through the gate. A kubelet that is away (restarting) closes the
// agent's connection; its gRPC client dials again.
func relay(agent net.Conn, target string, g *socketGate, done <-chan struct{}) {
	defer agent.Close()
	kubelet, err := net.DialTimeout("unix", target, 2*time.Second)
	if err != nil {
		return
	}
	defer kubelet.Close()
	go func() {
		_, _ = io.Copy(agent, kubelet)
		_ = agent.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := agent.Read(buf)
		if n > 0 {
			if !g.pass(done) {
				return
			}
			if _, werr := kubelet.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (c *Cluster) podResourcesRelay(node string) string {
	return filepath.Join(c.NodeDir(node), "pod-resources.sock")
}

func (c *Cluster) gate(node string) *socketGate {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gates[node]
}

// HoldPodResources leaves the node agent's PodResources questions unanswered until
// ReleasePodResources: a pod the kubelet admits meanwhile waits inside the device
// plugin's GetPreferredAllocation or Allocate. Keep it short: the agent gives up on a
// question after 5 s.
func (c *Cluster) HoldPodResources(node string) { c.gate(node).hold() }

// ReleasePodResources lets the held questions and every later one through.
func (c *Cluster) ReleasePodResources(node string) { c.gate(node).release() }

// PodResourcesWaiting counts the agent's writes that reached the held relay since
// HoldPodResources.
func (c *Cluster) PodResourcesWaiting(node string) int {
	g := c.gate(node)
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}
