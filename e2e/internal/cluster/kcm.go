package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"
)

// startKubeControllerManager runs kube-controller-manager as a cluster does, so that the
// garbage collector removes a deleted VolcanoJob's pods and PodGroups, namespaces
// delete, and the node lifecycle controller owns the not-ready taint. It checks the
// nodes every second (instead of 5 s) so that a node is schedulable soon after its
// kubelet reports Ready.
func (c *Cluster) startKubeControllerManager(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	dir := filepath.Join(c.Opts.RunDir, "apiserver")
	args := append([]string{"--kubeconfig=" + c.Kubeconfig, "--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig, "--leader-elect=false", "--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port), "--cert-dir=" + filepath.Join(c.Opts.RunDir, "controller-manager"),
		"--service-account-private-key-file=" + filepath.Join(dir, "sa.key"), "--use-service-account-credentials=false",
		"--node-monitor-period=1s"}, c.kcmGateArgs()...)
	p, err := startProc(c.logDir, "kube-controller-manager", c.Opts.Bin.ControllerManager, args...)
	if err != nil {
		return err
	}
	c.add(p)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// Its serving certificate is self-signed; only the answer matters here.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health check
	}}
	return waitFor(ctx, "kube-controller-manager healthz", 60*time.Second, p, func(context.Context) (bool, error) {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("healthz: %s", resp.Status)
	})
}
