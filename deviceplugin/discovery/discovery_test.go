package discovery

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

func TestDiscover(t *testing.T) {
	tests := []struct {
		name      string
		lib       nvml.Interface
		cards     int
		skipped   int
		numa      []int
		sms       int
		memoryMiB int64
		links     map[[2]int]api.LinkType
	}{
		{
			name: "the DGX A100 reports eight cards with NVSwitch links to every other card",
			lib:  nvmlfake.DGXA100(), cards: 8, numa: []int{0, 0, 0, 0, 1, 1, 1, 1}, sms: 108, memoryMiB: 40960,
			links: map[[2]int]api.LinkType{{0, 1}: "NV12", {0, 7}: "NV12", {3, 4}: "NV12"},
		},
		{
			name: "a driver that supports no topology queries yields unknown NUMA and SYS links",
			lib:  nvmlfake.NotSupported(dgxa100.New()), cards: 8, numa: []int{-1, -1, -1, -1, -1, -1, -1, -1}, sms: 0, memoryMiB: 40960,
			links: map[[2]int]api.LinkType{{0, 1}: api.LinkCrossNUMA, {2, 5}: api.LinkCrossNUMA},
		},
		{
			name: "four cards on two NUMA nodes pair up by NVLink and cross NUMA by SYS",
			lib:  nvmlfake.FourCardsTwoNUMA(), cards: 4, numa: []int{0, 0, 1, 1}, sms: 56, memoryMiB: 24576,
			links: map[[2]int]api.LinkType{{0, 1}: "NV4", {2, 3}: "NV4", {0, 2}: api.LinkCrossNUMA, {1, 3}: api.LinkCrossNUMA},
		},
		{
			name: "a card that cannot report its UUID is skipped and the others are kept",
			lib:  nvmlfake.WithFailingCard(), cards: 2, skipped: 1, numa: []int{0, 0}, sms: 40, memoryMiB: 15360,
			links: map[[2]int]api.LinkType{{0, 1}: api.LinkHostBridge},
		},
		{
			name: "sixteen cards split over two NUMA nodes use the host bridge within a node",
			lib:  nvmlfake.Cards(16), cards: 16, numa: []int{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}, sms: 142, memoryMiB: 46068,
			links: map[[2]int]api.LinkType{{0, 7}: api.LinkHostBridge, {7, 8}: api.LinkCrossNUMA},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Discover(tt.lib, Options{Shares: 10})
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if len(res.Devices) != tt.cards || len(res.Skipped) != tt.skipped {
				t.Fatalf("got %d cards and %d skipped, want %d and %d", len(res.Devices), len(res.Skipped), tt.cards, tt.skipped)
			}
			for i, d := range res.Devices {
				c := d.Card
				if c.NUMA != tt.numa[i] || c.SMCount != tt.sms || c.MemoryMiB != tt.memoryMiB || c.Shares != 10 || !c.Healthy {
					t.Errorf("card %d = %+v, want numa %d, %d SMs, %d MiB, 10 shares, healthy", i, c, tt.numa[i], tt.sms, tt.memoryMiB)
				}
			}
			for pair, want := range tt.links {
				if got := res.Links[pair[0]][pair[1]]; got != want {
					t.Errorf("link %v = %q, want %q", pair, got, want)
				}
			}
			inv := &api.NodeInventory{Cards: res.Cards(), Links: res.Links}
			if _, err := api.EncodeInventory(inv); err != nil {
				t.Errorf("inventory does not encode: %v", err)
			}
		})
	}
}

func TestDiscoverReportsMIGMode(t *testing.T) {
	m := nvmlfake.NewMachine([]nvmlfake.CardSpec{{Name: "A100", MemoryMiB: 40960, MIG: true}, {Name: "A100", MemoryMiB: 40960}})
	res, err := Discover(m, Options{Shares: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Devices[0].Card.MIG || res.Devices[1].Card.MIG {
		t.Errorf("MIG flags = %v, %v; want true, false", res.Devices[0].Card.MIG, res.Devices[1].Card.MIG)
	}
}

func TestDiscoverFailsClearly(t *testing.T) {
	tests := []struct {
		name   string
		lib    nvml.Interface
		shares int
		want   error
		text   string
	}{
		{"a machine whose only card is unreadable has no usable cards",
			nvmlfake.NewMachine([]nvmlfake.CardSpec{{Name: "T4", MemoryMiB: 1, BrokenUUID: true}}), 4, ErrNoCards, "GetUUID"},
		{"zero shares per card is refused before NVML is asked", nvmlfake.Cards(2), 0, nil, "shares per card is 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Discover(tt.lib, Options{Shares: tt.shares})
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tt.want, tt.text)
			}
		})
	}
}
