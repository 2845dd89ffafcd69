package charttest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// EnvKubeAPIServer names a kube-apiserver binary (the e2e harness builds one into
// e2e/.cache/bin). With it and etcd on PATH, the dry-run test starts its own
// control plane instead of needing TESSERA_CHART_KUBECONFIG.
const EnvKubeAPIServer = "TESSERA_KUBE_APISERVER"

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startControlPlane runs etcd and kube-apiserver in a temporary directory, with an
// admin token, and returns a kubeconfig for it. Both stop when the test ends.
func startControlPlane(t *testing.T, apiserver string) string {
	t.Helper()
	// The e2e harness builds etcd beside kube-apiserver (Kubernetes 1.34 needs etcd >= 3.5).
	etcd := filepath.Join(filepath.Dir(apiserver), "etcd")
	if _, err := os.Stat(etcd); err != nil {
		if etcd, err = exec.LookPath("etcd"); err != nil {
			t.Skipf("SKIPPED: %s is set but there is no etcd beside it or on PATH (make e2e builds both)", EnvKubeAPIServer)
		}
	}
	dir := t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	saKey := write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	saPub := write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	tokens := write("tokens.csv", []byte(`chart-test-token,admin,admin,"system:masters"`+"\n"))
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	start := func(name string, args ...string) {
		log, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			log.Close()
		})
	}
	start("etcd", etcd, "--name", "chart-test", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", freePort(t)))
	port := freePort(t)
	start("kube-apiserver", apiserver, "--etcd-servers="+etcdURL, "--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port), "--cert-dir="+filepath.Join(dir, "certs"), "--token-auth-file="+tokens,
		"--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+saPub, "--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range=10.96.0.0/16", "--enable-priority-and-fairness=false",
		// No controller-manager creates ServiceAccounts here; let pods in without one.
		"--disable-admission-plugins=ServiceAccount")
	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(90 * time.Second)
	for {
		req, _ := http.NewRequest("GET", server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer chart-test-token")
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "kube-apiserver.log"))
			t.Fatalf("kube-apiserver not ready after 90s; its log:\n%s", log)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return write("kubeconfig", []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: chart-test-token}}]
contexts: [{name: test, context: {cluster: test, user: admin}}]
current-context: test
`, server)))
}
