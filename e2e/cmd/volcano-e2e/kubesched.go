package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
)

// Volcano's CI runs its suites on a kind cluster, where kube-scheduler places every pod
// that does not name Volcano's scheduler. Some specs rely on it: "Gang scheduling" fills
// the cluster with a ReplicaSet's pods (default scheduler) before its gang, and the
// placeholder pods some specs use to shrink the cluster name no scheduler either. The
// harness runs no kube-scheduler (its scenarios schedule every pod with Volcano), so this
// command starts one beside it, built from the same Kubernetes module as the control plane.

// kubeLDFlags make the program report its version, as the harness builds its API server.
const kubeLDFlags = "-X k8s.io/component-base/version.gitVersion=v1.34.2 " +
	"-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34"

// BuildKubeScheduler builds kube-scheduler v1.34.2 in the e2e/tools/kube module into
// cacheDir, unless a build newer than that module's go.sum is there.
func BuildKubeScheduler(ctx context.Context, e2eDir, cacheDir string) (string, error) {
	dir := filepath.Join(e2eDir, "tools", "kube")
	out := filepath.Join(cacheDir, "kube-scheduler")
	sum, err := os.Stat(filepath.Join(dir, "go.sum"))
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(out); err == nil && st.ModTime().After(sum.ModTime()) {
		return out, nil
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-ldflags", kubeLDFlags, "-o", out, "k8s.io/kubernetes/cmd/kube-scheduler")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build kube-scheduler: %w\n%s", err, b)
	}
	return out, nil
}

// StartKubeScheduler runs kube-scheduler against the cluster (logs/kube-scheduler.log;
// Stop ends it with the rest) and waits until it answers its health check.
func StartKubeScheduler(ctx context.Context, c *cluster.Cluster, bin string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	if err := c.StartAux("kube-scheduler", bin, "--kubeconfig="+c.Kubeconfig,
		"--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port)); err != nil {
		return err
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// Its serving certificate is self-signed; only the answer matters here.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health check
	}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("healthz: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-scheduler not healthy after 60 s (%w; its log in %s)", err, c.LogDir())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
