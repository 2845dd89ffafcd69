package suite

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// probeOutput is what vgpu-probe (e2e/images/vgpu-probe) printed in one container: its
// first report, its two processes' results and its report after them.
type probeOutput struct {
	uid, limitsWrite, limitsMount, env, children string
	// region is the region's path the limits file names, regionFS the filesystem under it,
	// regionGrow what a fallocate of 1 GiB on it got.
	region, regionFS, regionGrow string
	uuids, devices               []string
	// meminfo and after are cuMemGetInfo's (free, total) per card UUID, before and after.
	meminfo, after map[string][2]uint64
	// hold is the process that held memory while another filled the card; kept the one
	// that holds memory until the container ends.
	hold, kept struct {
		bytes uint64
		rc    string
	}
	fill map[string]probeFill
	// hook are the hook library's own lines ("[tessera <pid>] ...").
	hook []string
	done bool
}

// probeFill is the fill process's result on one card.
type probeFill struct {
	ordinal          int
	free, total, got uint64
	rc               string
}

// probeLog is the log file of the container's run after restarts earlier ones, as the
// kubelet names it under the node's podLogsDir.
func probeLog(p corev1.Pod, container string, restarts int32) string {
	return filepath.Join(cl.NodeDir(p.Spec.NodeName), "pod-logs", fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID),
		container, fmt.Sprintf("%d.log", restarts))
}

// readProbe waits until the container's first probe has printed "probe done" and parses its
// log (CRI format: time, stream, tag, line).
func readProbe(p corev1.Pod, container string, timeout time.Duration) (*probeOutput, string, error) {
	return readProbeRun(p, container, 0, timeout)
}

// readProbeRun is readProbe for the container's run after restarts earlier ones.
func readProbeRun(p corev1.Pod, container string, restarts int32, timeout time.Duration) (*probeOutput, string, error) {
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(probeLog(p, container, restarts))
		var lines []string
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if f := strings.SplitN(sc.Text(), " ", 4); len(f) == 4 {
				lines = append(lines, f[3])
			}
		}
		out := parseProbe(lines)
		if out.done {
			return out, strings.Join(lines, "\n"), nil
		}
		if time.Now().After(deadline) {
			return out, strings.Join(lines, "\n"), fmt.Errorf("%s/%s (after %d restarts): no \"probe done\" after %s",
				p.Name, container, restarts, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func parseProbe(lines []string) *probeOutput {
	o := &probeOutput{meminfo: map[string][2]uint64{}, after: map[string][2]uint64{}, fill: map[string]probeFill{}}
	u := func(s string) uint64 { v, _ := strconv.ParseUint(s, 10, 64); return v }
	reports := 0
	for _, line := range lines {
		if strings.HasPrefix(line, "[tessera ") {
			o.hook = append(o.hook, line)
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "probe" {
			continue
		}
		switch {
		case f[1] == "uid" && len(f) == 3:
			reports++
			if reports == 1 {
				o.uid = f[2]
			}
		case f[1] == "uuids" && len(f) == 3 && reports == 1:
			o.uuids = strings.Split(f[2], ",")
		case f[1] == "meminfo" && len(f) == 7:
			m := o.meminfo
			if reports > 1 {
				m = o.after
			}
			m[f[3]] = [2]uint64{u(f[4]), u(f[5])}
		case f[1] == "devices" && reports == 1:
			o.devices = f[2:]
		case f[1] == "limits-write" && len(f) == 3 && reports == 1:
			o.limitsWrite = f[2]
		case f[1] == "limits-mount" && len(f) == 3 && reports == 1:
			o.limitsMount = f[2]
		case f[1] == "region" && len(f) == 4 && reports == 1:
			o.region, o.regionFS = f[2], f[3]
		case f[1] == "region-grow" && len(f) == 3 && reports == 1:
			o.regionGrow = f[2]
		case f[1] == "env" && len(f) == 3 && reports == 1:
			o.env = f[2]
		case f[1] == "hold" && len(f) == 5:
			o.hold.bytes, o.hold.rc = u(f[3]), f[4]
		case f[1] == "kept" && len(f) == 5:
			o.kept.bytes, o.kept.rc = u(f[3]), f[4]
		case f[1] == "fill" && len(f) == 8:
			ord, _ := strconv.Atoi(f[2])
			o.fill[f[3]] = probeFill{ordinal: ord, free: u(f[4]), total: u(f[5]), got: u(f[6]), rc: f[7]}
		case f[1] == "children":
			o.children = strings.Join(f[2:], " ")
		case f[1] == "done":
			o.done = true
		}
	}
	return o
}

// containerProcess finds the host pid of a container's process running path: the process
// whose cgroup path names the container's ID (containerd's runc shim puts each container in
// a cgroup named by it under its pod's).
func containerProcess(id, path string) (int, error) {
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	for _, dir := range procs {
		cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err != nil || !bytes.Contains(cg, []byte(id)) {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || !bytes.HasPrefix(cmd, []byte(path+"\x00")) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(dir))
		// The probe's main process; its children (hold, fill) have ended by "probe done".
		if st, err := os.ReadFile(filepath.Join(dir, "stat")); err == nil && !bytes.Contains(st, []byte(") Z ")) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process of %s in container %s", path, id)
}

// processStart is a process's start time in clock ticks (field 22 of /proc/<pid>/stat), so
// that a pid reused by another process is not taken for the same one.
func processStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// kubeletMetric reads one unlabelled sample from the node's kubelet's /metrics (its
// port from the node's KubeletConfiguration; anonymous access is allowed), or -1.
func kubeletMetric(ctx context.Context, node, name string) float64 {
	conf, err := os.ReadFile(filepath.Join(cl.NodeDir(node), "kubelet.yaml"))
	if err != nil {
		return -1
	}
	var port string
	for _, line := range strings.Split(string(conf), "\n") {
		if v, ok := strings.CutPrefix(line, "port: "); ok {
			port = strings.TrimSpace(v)
		}
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the kubelet's self-signed serving certificate
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:"+port+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := client.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return -1
}

// agentSeries returns the samples of the node agent's /metrics (scraped with the admin's
// token, as the chart guards it) whose series name and labels start with prefix and hold
// every one of labels (`name="value"`).
func agentSeries(ctx context.Context, node, prefix string, labels ...string) (map[string]float64, error) {
	// One scrape may not eat the caller's whole wait: a slow one is retried.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cl.AgentMetricsURL(node), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+cl.Rest.BearerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", cl.AgentMetricsURL(node), resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// killContainer kills every process of the container (those whose cgroup path names its
// ID) with SIGKILL, as the kernel's OOM killer or a crash ends them.
func killContainer(id string) (int, error) {
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	killed := 0
	for _, dir := range procs {
		cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err != nil || !bytes.Contains(cg, []byte(id)) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(dir))
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			killed++
		}
	}
	if killed == 0 {
		return 0, fmt.Errorf("no process in container %s", id)
	}
	return killed, nil
}
