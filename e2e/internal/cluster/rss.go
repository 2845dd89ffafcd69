package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// KubeletRSS returns the resident memory of each running kubelet, in bytes.
func (c *Cluster) KubeletRSS() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int64{}
	for name, p := range c.kubelets {
		if done, _ := p.exited(); done {
			continue
		}
		pid := p.cmd.Process.Pid
		if c.inits[name] != nil {
			// kubelet-ns --join stays outside the node's namespaces; the kubelet is its child.
			if kids := childrenOf(pid); len(kids) == 1 {
				pid = kids[0]
			}
		}
		if rss, ok := residentBytes(pid); ok {
			out[name] = rss
		}
	}
	return out
}

// RuntimeRSS returns the resident memory of a real-runtime node's containerd and of its
// shims (their sum, and how many there are), in bytes.
func (c *Cluster) RuntimeRSS(node string) (containerd, shims int64, n int) {
	c.mu.Lock()
	init := c.inits[node]
	c.mu.Unlock()
	if init == nil {
		return 0, 0, 0
	}
	// The node's init started containerd and adopted the shims (they detach from it).
	for _, pid := range childrenOf(init.cmd.Process.Pid) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		rss, _ := residentBytes(pid)
		switch name := strings.TrimSpace(string(comm)); {
		case name == "containerd":
			containerd = rss
		case strings.HasPrefix(name, "containerd-shim"):
			shims += rss
			n++
		}
	}
	return containerd, shims, n
}

// residentBytes is a process's VmRSS.
func residentBytes(pid int) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, true
		}
	}
	return 0, false
}

// childrenOf lists the processes whose parent is pid (by /proc/<pid>/stat's field 4).
func childrenOf(pid int) []int {
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(d))
			out = append(out, child)
		}
	}
	return out
}
