package health

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/config"
	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

func setup(t *testing.T) (*nvmlfake.Machine, *cards.Registry, *Monitor) {
	t.Helper()
	m := nvmlfake.Cards(4)
	res, err := discovery.Discover(m, discovery.Options{Shares: 2})
	if err != nil {
		t.Fatal(err)
	}
	devs := map[string]nvml.Device{}
	for _, d := range res.Devices {
		devs[d.Card.UUID] = d.Handle
	}
	reg := cards.NewRegistry(res.Cards(), res.Links)
	mon := New(m, devs, reg, Options{FatalXIDs: config.DefaultFatalXIDs, CheckInterval: 10 * time.Millisecond,
		RecoverAfter: 150 * time.Millisecond, EventWait: 10 * time.Millisecond})
	return m, reg, mon
}

func waitHealth(t *testing.T, reg *cards.Registry, uuid string, want bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if c, _ := reg.Card(uuid); c.Healthy == want {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("card %s never became healthy=%v (reason %q)", uuid, want, reg.UnhealthyReason(uuid))
}

func TestHealthFollowsEventsAndChecks(t *testing.T) {
	tests := []struct {
		name    string
		card    int
		break_  func(m *nvmlfake.Machine)
		repair  func(m *nvmlfake.Machine)
		reason  string
		healthy bool // the verdict after break_ while the monitor runs for a while
	}{
		{"a fatal XID marks the card unhealthy until it has been quiet for a while",
			1, func(m *nvmlfake.Machine) { m.InjectXID(1, 79) }, func(*nvmlfake.Machine) {}, "fatal XID 79", false},
		{"a card that stops answering is unhealthy until it answers again",
			2, func(m *nvmlfake.Machine) { m.SetLost(2, true) }, func(m *nvmlfake.Machine) { m.SetLost(2, false) }, "NVML query failed: ERROR_GPU_IS_LOST", false},
		{"an application XID leaves the card healthy",
			3, func(m *nvmlfake.Machine) { m.InjectXID(3, 13) }, func(*nvmlfake.Machine) {}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reg, mon := setup(t)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); mon.Run(ctx) }()
			defer func() { cancel(); <-done }()
			uuid := m.UUID(tt.card)
			tt.break_(m)
			if tt.healthy {
				time.Sleep(100 * time.Millisecond)
				waitHealth(t, reg, uuid, true)
				return
			}
			waitHealth(t, reg, uuid, false)
			if got := reg.UnhealthyReason(uuid); got != tt.reason {
				t.Errorf("reason = %q, want %q", got, tt.reason)
			}
			if c, _ := reg.Card(m.UUID(0)); !c.Healthy {
				t.Error("another card turned unhealthy")
			}
			tt.repair(m)
			waitHealth(t, reg, uuid, true)
		})
	}
}

// An NVML library whose event wait times out without waiting must not turn the
// event loop into a busy spin (go-nvml's mocks, for one, keep every call they get).
func TestEventLoopDoesNotSpinOnAnEarlyTimeout(t *testing.T) {
	_, _, mon := setup(t)
	mon.opts.EventWait = 50 * time.Millisecond
	set := &mock.EventSet{
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_TIMEOUT },
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	mon.events(ctx, set)
	if n := len(set.WaitCalls()); n > 20 {
		t.Errorf("%d waits in 500ms with a 50ms wait period, want about 10", n)
	}
}
