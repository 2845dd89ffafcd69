package kubeletserver_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
	"github.com/tessera-gpu/tessera/deviceplugin/kubeletserver"
	"github.com/tessera-gpu/tessera/internal/testing/kubeletsim"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

type noHandler struct{}

func (noHandler) Preferred(context.Context, *pluginapi.ContainerPreferredAllocationRequest) ([]string, error) {
	return nil, nil
}
func (noHandler) Allocate(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return &pluginapi.AllocateResponse{}, nil
}
func (noHandler) PreStart(context.Context, []string) error { return nil }

func start(t *testing.T, shares int) (context.Context, *kubeletsim.Kubelet, *cards.Registry, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	dir, err := os.MkdirTemp("", "ks")
	if err != nil {
		t.Fatal(err)
	}
	k, err := kubeletsim.Start(kubeletsim.Options{PluginDir: dir, Resource: api.ResourceNumber})
	if err != nil {
		t.Fatal(err)
	}
	res, err := discovery.Discover(nvmlfake.FourCardsTwoNUMA(), discovery.Options{Shares: shares})
	if err != nil {
		t.Fatal(err)
	}
	reg := cards.NewRegistry(res.Cards(), res.Links)
	srv := kubeletserver.New(kubeletserver.Options{PluginDir: dir, SocketName: "tessera.sock", Resource: api.ResourceNumber,
		WatchInterval: 10 * time.Millisecond}, reg, noHandler{})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; k.Stop(); os.RemoveAll(dir) })
	return ctx, k, reg, dir
}

func TestThePluginRegistersAndRegistersAgainAfterAKubeletRestart(t *testing.T) {
	ctx, k, _, dir := start(t, 3)
	if err := k.WaitFor(ctx, kubeletsim.RegisteredAtLeast(1)); err != nil {
		t.Fatalf("no registration: %v", err)
	}
	if got := len(k.Health()); got != 12 {
		t.Fatalf("kubelet sees %d slots, want 4 cards x 3 shares", got)
	}
	for i := 2; i <= 3; i++ {
		if err := k.Restart(); err != nil {
			t.Fatal(err)
		}
		if err := k.WaitFor(ctx, kubeletsim.RegisteredAtLeast(i)); err != nil {
			t.Fatalf("no registration %d after kubelet restart: %v", i, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "tessera.sock")); err != nil {
			t.Fatalf("plugin socket not served again: %v", err)
		}
	}
}

func TestListAndWatchReportsHealthChangesOfEveryShareOfACard(t *testing.T) {
	ctx, k, reg, _ := start(t, 2)
	if err := k.WaitFor(ctx, kubeletsim.RegisteredAtLeast(1)); err != nil {
		t.Fatal(err)
	}
	uuid := reg.Inventory().Cards[2].UUID
	steps := []struct {
		name    string
		healthy bool
		want    string
	}{
		{"a card marked unhealthy shows both its slots unhealthy", false, pluginapi.Unhealthy},
		{"the card recovering shows both slots healthy again", true, pluginapi.Healthy},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if !reg.SetHealth(uuid, st.healthy, "test") {
				t.Fatal("SetHealth reported no change")
			}
			err := k.WaitFor(ctx, func(k *kubeletsim.Kubelet) bool {
				h := k.Health()
				return h[cards.SlotID(uuid, 0)] == st.want && h[cards.SlotID(uuid, 1)] == st.want
			})
			if err != nil {
				t.Fatalf("kubelet sees %v: %v", k.Health(), err)
			}
			for id, h := range k.Health() {
				if u, _, _ := cards.ParseSlotID(id); u != uuid && h != pluginapi.Healthy {
					t.Errorf("slot %s of another card is %s", id, h)
				}
			}
		})
	}
}
