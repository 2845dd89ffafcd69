package agent

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// The handoff's view of a card's MIG devices is NVML's at the time of the call, not the
// layout discovery read at start: instances created or destroyed since are seen.
func TestTheHandoffReadsMIGLayoutsFromNVMLEachTime(t *testing.T) {
	m := nvmlfake.MIGCards(nvmlfake.H100SXM5x80GB())
	first, err := m.CreateMIGDevice(0, "3g.40gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := discovery.Discover(m, discovery.Options{Shares: 1})
	if err != nil {
		t.Fatal(err)
	}
	reg := cards.NewRegistry(res.Cards(), res.Links)
	layout := nvmlMIGLayout(map[string]nvml.Device{m.UUID(0): m.Devices[0]}, reg)
	second, err := m.CreateMIGDevice(0, "1g.10gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DestroyMIGDevice(first); err != nil {
		t.Fatal(err)
	}
	got, err := layout(m.UUID(0))
	if err != nil || len(got) != 1 || got[0].UUID != second || got[0].Profile != "1g.10gb" {
		t.Fatalf("layout now: %+v (%v), want only the 1g.10gb %s created after start", got, err, second)
	}
	if _, err := layout("GPU-elsewhere"); err == nil || !strings.Contains(err.Error(), "not on this node") {
		t.Errorf("a card of another node: err = %v", err)
	}
}
