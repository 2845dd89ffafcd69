// Package health marks cards unhealthy on fatal NVML XID and ECC events and on failed
// periodic checks, and healthy again once a card answers and has had no fatal event
// for a while. Health changes reach ListAndWatch and the inventory through the registry.
package health

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/deviceplugin/cards"
)

// Options tune the monitor.
type Options struct {
	FatalXIDs []uint64
	// CheckInterval is how often every card is queried.
	CheckInterval time.Duration
	// RecoverAfter is how long after its last fatal event a card that answers again
	// becomes healthy.
	RecoverAfter time.Duration
	// EventWait is how long one NVML event wait blocks.
	EventWait time.Duration
}

// Monitor watches the cards discovery found.
type Monitor struct {
	lib     nvml.Interface
	devices map[string]nvml.Device
	reg     *cards.Registry
	opts    Options
	fatal   map[uint64]bool

	mu        sync.Mutex
	lastFatal map[string]time.Time
	now       func() time.Time
}

// New returns a monitor for devices (card UUID -> NVML handle).
func New(lib nvml.Interface, devices map[string]nvml.Device, reg *cards.Registry, opts Options) *Monitor {
	m := &Monitor{lib: lib, devices: devices, reg: reg, opts: opts, fatal: map[uint64]bool{},
		lastFatal: map[string]time.Time{}, now: time.Now}
	for _, x := range opts.FatalXIDs {
		m.fatal[x] = true
	}
	if m.opts.EventWait <= 0 {
		m.opts.EventWait = time.Second
	}
	return m
}

// Run watches events and checks periodically until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if set, err := m.register(); err != nil {
		klog.ErrorS(err, "NVML events unavailable; relying on the periodic check alone")
	} else {
		wg.Add(1)
		go func() { defer wg.Done(); m.events(ctx, set) }()
	}
	t := time.NewTicker(m.opts.CheckInterval)
	defer t.Stop()
	for {
		m.Check()
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-t.C:
		}
	}
}

func (m *Monitor) register() (nvml.EventSet, error) {
	set, ret := m.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("EventSetCreate: %v", ret)
	}
	want := uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError)
	for uuid, d := range m.devices {
		supported, ret := d.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			klog.V(2).InfoS("Card supports no events", "uuid", uuid, "nvml", ret)
			continue
		}
		if ret := d.RegisterEvents(supported&want, set); ret != nvml.SUCCESS {
			klog.ErrorS(fmt.Errorf("RegisterEvents: %v", ret), "Card events unavailable", "uuid", uuid)
		}
	}
	return set, nil
}

func (m *Monitor) events(ctx context.Context, set nvml.EventSet) {
	defer set.Free()
	for ctx.Err() == nil {
		start := time.Now()
		e, ret := set.Wait(uint32(m.opts.EventWait / time.Millisecond))
		switch {
		case ret == nvml.ERROR_TIMEOUT:
			// A library that times out without waiting would turn this loop into a
			// busy spin; wait out the rest of the period ourselves.
			if rest := m.opts.EventWait - time.Since(start); rest > m.opts.EventWait/2 {
				select {
				case <-ctx.Done():
				case <-time.After(rest):
				}
			}
			continue
		case ret != nvml.SUCCESS:
			klog.ErrorS(fmt.Errorf("EventSet.Wait: %v", ret), "Waiting for NVML events failed")
			select {
			case <-ctx.Done():
			case <-time.After(m.opts.EventWait):
			}
			continue
		}
		m.handle(e)
	}
}

func (m *Monitor) handle(e nvml.EventData) {
	var reason string
	switch {
	case e.EventType == nvml.EventTypeXidCriticalError && m.fatal[e.EventData]:
		reason = fmt.Sprintf("fatal XID %d", e.EventData)
	case e.EventType == nvml.EventTypeDoubleBitEccError:
		reason = "double-bit ECC error"
	default:
		klog.V(3).InfoS("Ignoring NVML event", "type", e.EventType, "data", e.EventData)
		return
	}
	var uuids []string
	if e.Device != nil {
		uuid, ret := e.Device.GetUUID()
		if ret != nvml.SUCCESS {
			klog.ErrorS(fmt.Errorf("GetUUID: %v", ret), "Event for a card that cannot be named; marking every card", "reason", reason)
		} else {
			uuids = []string{uuid}
		}
	}
	if uuids == nil {
		for uuid := range m.devices {
			uuids = append(uuids, uuid)
		}
	}
	m.mu.Lock()
	for _, u := range uuids {
		m.lastFatal[u] = m.now()
	}
	m.mu.Unlock()
	for _, u := range uuids {
		if m.reg.SetHealth(u, false, reason) {
			klog.InfoS("Card unhealthy", "uuid", u, "reason", reason)
		}
	}
}

// Check queries every card once: one that does not answer is unhealthy; one that
// answers and had no fatal event within RecoverAfter is healthy.
func (m *Monitor) Check() {
	for uuid, d := range m.devices {
		healthy, reason := true, ""
		if _, ret := d.GetMemoryInfo(); ret != nvml.SUCCESS {
			healthy, reason = false, fmt.Sprintf("NVML query failed: %v", ret)
		} else {
			m.mu.Lock()
			last, ok := m.lastFatal[uuid]
			m.mu.Unlock()
			if ok && m.now().Sub(last) < m.opts.RecoverAfter {
				continue // keep the event's verdict and reason
			}
		}
		if m.reg.SetHealth(uuid, healthy, reason) {
			if healthy {
				klog.InfoS("Card healthy again", "uuid", uuid)
			} else {
				klog.InfoS("Card unhealthy", "uuid", uuid, "reason", reason)
			}
		}
	}
}
