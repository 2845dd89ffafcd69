package placement

import (
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

// reserved is a healthy card whose agent publishes a CUDA context reserve of mib.
func reserved(mib int64) api.Card { return api.Card{Healthy: true, ContextReserveMiB: mib} }

// A container whose memory on a card is below what one CUDA context takes there
// (vgpu-core counts it inside the limit) is refused the card: it would start and then
// fail its first cuInit. At or above the reserve, or where the reserve is unknown, the
// card takes it as before.
func TestTheContextReserveKeepsSmallContainersOffACard(t *testing.T) {
	for _, tc := range []struct {
		name string
		node *Node
		req  api.ContainerRequest
		want string // "" fits
	}{
		{"a request below the reserve is refused with both figures", testNode(reserved(518)),
			api.ContainerRequest{Name: "train", MemoryMiB: 256},
			`container "train" asks 256Mi of vGPU memory; cards on this node need at least 518Mi for a CUDA context (contextReserve)`},
		{"a request at the reserve fits", testNode(reserved(518)), api.ContainerRequest{MemoryMiB: 518}, ""},
		{"a request above the reserve fits", testNode(reserved(518)), api.ContainerRequest{MemoryMiB: 4096}, ""},
		{"an unknown reserve (an older agent) refuses nothing", testNode(reserved(0)), api.ContainerRequest{MemoryMiB: 1}, ""},
		{"a percentage is sized by the card before it is compared", testNode(reserved(520)),
			api.ContainerRequest{Name: "infer", MemoryPercent: 1},
			`container "infer" asks 1% of vGPU memory (400Mi of a card on this node); cards on this node need at least 520Mi for a CUDA context (contextReserve)`},
		{"a percentage above the reserve fits", testNode(reserved(520)), api.ContainerRequest{MemoryPercent: 2}, ""},
		{"the whole card (no memory asked) fits", testNode(reserved(520)), api.ContainerRequest{MemoryPercent: 100}, ""},
		{"a card with a smaller reserve takes what another refuses", testNode(reserved(600), reserved(518)), api.ContainerRequest{MemoryMiB: 550}, ""},
		{"the least reserve is quoted when every card refuses", testNode(reserved(600), reserved(540)),
			api.ContainerRequest{Name: "c", MemoryMiB: 530},
			`container "c" asks 530Mi of vGPU memory; cards on this node need at least 540Mi for a CUDA context (contextReserve)`},
		{"the reserve is named when it is what stands, beside an unhealthy card", testNode(reserved(518), api.Card{Healthy: false}),
			api.ContainerRequest{Name: "c", MemoryMiB: 100},
			`container "c" asks 100Mi of vGPU memory; cards on this node need at least 518Mi`},
		{"cards are counted when too few would be left without the reserve", testNode(reserved(518), api.Card{Healthy: false}),
			api.ContainerRequest{Name: "c", Cards: 2, MemoryMiB: 100},
			`container "c" needs 2 cards, 0 of 2 fit (1 below the CUDA context reserve, 1 unhealthy)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := FitPod(tc.node, req(api.PolicyBinpack, tc.req))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %s", err.Detail())
			case tc.want != "" && err == nil:
				t.Fatalf("placed on %v, want a refusal", cardsOf(f))
			case tc.want != "" && !strings.HasPrefix(err.Error(), tc.want):
				t.Fatalf("reason %q\nwant it to begin %q", err.Error(), tc.want)
			}
		})
	}
}

// The reserve is a property of the card and the request: evicting tenants cannot
// help, so preempt and reclaim leave the node alone, and the pending metric counts
// the refusal under its own name.
func TestAContextReserveRefusalIsNotResolvable(t *testing.T) {
	_, err := FitPod(used(testNode(reserved(518), reserved(518)), 1, 39000, 50, 1), req(api.PolicyBinpack, api.ContainerRequest{MemoryMiB: 256}))
	if err == nil {
		t.Fatal("placed a 256 MiB container on cards that need 518 MiB for a context")
	}
	if err.Resolvable() {
		t.Error("Resolvable() = true; evicting tenants cannot make a context smaller")
	}
	if d := err.Dominant(); d != ReasonContextReserve {
		t.Errorf("Dominant() = %q, want %q", d, ReasonContextReserve)
	}
	const card = "card 0 (GPU-a): below the CUDA context reserve: 256 MiB wanted, a CUDA context takes 518 MiB on this card (contextReserve)"
	if !strings.Contains(err.Detail(), card) {
		t.Errorf("detail %q\nwant it to contain %q", err.Detail(), card)
	}
}

// A node of an agent that predates the reserve (no tessera.io/context-reserve beside
// its inventory) has no reserve on its cards, and the engine places on it exactly what
// it placed before: the smallest request fits.
func TestAnInventoryWithoutTheReserveChangesNothing(t *testing.T) {
	inv, err := api.DecodeInventory(`{"version":"v1","cards":[{"uuid":"GPU-a","index":0,"model":"NVIDIA H100 80GB HBM3","memoryMiB":81559,"numa":0,"shares":10,"healthy":true}]}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []api.ContainerRequest{{MemoryMiB: 1}, {MemoryMiB: 256}, {MemoryPercent: 1}} {
		if _, ferr := FitPod(NewNode("old-agent", inv, 1), req(api.PolicyBinpack, r)); ferr != nil {
			t.Errorf("%+v refused on an old agent's inventory: %s", r, ferr.Detail())
		}
	}
}
