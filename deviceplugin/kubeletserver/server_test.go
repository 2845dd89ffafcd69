package kubeletserver_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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
	return startWith(t, shares, false)
}

func startWith(t *testing.T, shares int, reportNUMA bool) (context.Context, *kubeletsim.Kubelet, *cards.Registry, string) {
	t.Helper()
	ctx, k, reg, dir, _ := serve(t, shares, kubeletserver.Options{ReportNUMA: reportNUMA}, noHandler{})
	return ctx, k, reg, dir
}

// serve runs a server with opts (its directory, socket, resource and watch interval
// filled in) over the four-card fake machine with shares slots per card, registered
// with a fake kubelet, until the test ends.
func serve(t *testing.T, shares int, opts kubeletserver.Options, h kubeletserver.Handler) (context.Context, *kubeletsim.Kubelet, *cards.Registry, string, *kubeletserver.Server) {
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
	opts.PluginDir, opts.SocketName, opts.Resource, opts.WatchInterval = dir, "tessera.sock", api.ResourceNumber, 10*time.Millisecond
	srv := kubeletserver.New(opts, reg, h)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; k.Stop(); os.RemoveAll(dir) })
	return ctx, k, reg, dir, srv
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

// With slotTopology none the kubelet's Topology Manager must see no NUMA node on any
// slot (it then has no preference and never narrows the choice to one node); with numa
// every slot carries its card's node (cards 0-1 on node 0, 2-3 on node 1).
func TestSlotsCarryTheirCardsNUMANodeOnlyWhenAskedTo(t *testing.T) {
	for _, tt := range []struct {
		name   string
		report bool
		want   []int64 // per card; -1 = no topology
	}{
		{"slot topology none sends no NUMA node", false, []int64{-1, -1, -1, -1}},
		{"slot topology numa sends each card's node", true, []int64{0, 0, 1, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, k, reg, dir := startWith(t, 2, tt.report)
			if err := k.WaitFor(ctx, kubeletsim.RegisteredAtLeast(1)); err != nil {
				t.Fatal(err)
			}
			conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "tessera.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			numa := map[string]int64{}
			for i, c := range reg.Inventory().Cards {
				numa[c.UUID] = tt.want[i]
			}
			if len(resp.Devices) != 8 {
				t.Fatalf("%d slots, want 8", len(resp.Devices))
			}
			for _, d := range resp.Devices {
				uuid, _, _ := cards.ParseSlotID(d.ID)
				got := int64(-1)
				if d.Topology != nil {
					if len(d.Topology.Nodes) != 1 {
						t.Fatalf("slot %s: topology %v", d.ID, d.Topology)
					}
					got = d.Topology.Nodes[0].ID
				}
				if got != numa[uuid] {
					t.Errorf("slot %s: NUMA node %d, want %d", d.ID, got, numa[uuid])
				}
			}
		})
	}
}
