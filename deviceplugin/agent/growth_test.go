//go:build linux

package agent

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
	"github.com/tessera-gpu/tessera/deviceplugin/usage"
	"github.com/tessera-gpu/tessera/internal/testing/kubeletsim"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// TestTheAgentCutsARegionBackAsItsContainerGrowsIt: a tenant container, which has its
// region mounted read-write, makes it 100 GiB long; on the default install (no tmpfs per
// container directory) the agent cuts it back within moments, not at its next GC pass
// (an hour here), and counts it.
func TestTheAgentCutsARegionBackAsItsContainerGrowsIt(t *testing.T) {
	size, err := usage.RegionFileSize()
	if err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, cfg := agentOnFakeKubelet(t, "--gc-interval=1h")
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	machine := nvmlfake.FourCardsTwoNUMA()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Deps{NVML: machine, Client: client, MetricsListener: lis}) }()
	if err := k.WaitFor(ctx, kubeletsim.RegisteredAtLeast(1)); err != nil {
		t.Fatalf("no registration: %v", err)
	}
	p, _ := admitOnePod(ctx, t, client, k, machine.UUID(1), api.QoSFixedShare, 4096, 25)
	if err := k.StartContainers(ctx, p); err != nil {
		t.Fatal(err)
	}
	region := filepath.Join((&records.Store{Root: cfg.StateDir}).ContainerDir(string(p.UID), "main"), records.RegionFileName)
	if err := os.Truncate(region, 100<<30); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := os.Stat(region)
		if err == nil && st.Size() == size {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the region is still %d bytes long", st.Size())
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, err := http.Get("http://" + lis.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `tessera_agent_region_growth_cuts_total{node="node-a"} 1`; !strings.Contains(string(body), want) {
		t.Errorf("metrics lack %s", want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
