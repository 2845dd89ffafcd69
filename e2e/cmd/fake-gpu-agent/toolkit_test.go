package main

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/deviceplugin/cdi"
	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
)

// The MIG machine starts with its instances in place, and the fake toolkit's spec names
// each MIG device both ways the NVIDIA toolkit does by default ("<card>:<MIG index>" and
// its own UUID), beside the cards; on a real-runtime node each MIG device is a stub card
// file of the instance's size that names its parent.
func TestTheMIGMachineAndItsToolkitSpecListEveryInstance(t *testing.T) {
	m, err := NewMachine("h100migx2", "gpu-e", true)
	if err != nil {
		t.Fatal(err)
	}
	res, err := discovery.Discover(m, discovery.Options{Shares: 1})
	if err != nil {
		t.Fatal(err)
	}
	var migs []string
	profiles := map[string]int{}
	for _, d := range res.Devices {
		for _, in := range d.Card.MIGInstances {
			migs = append(migs, in.UUID)
			profiles[in.Profile]++
		}
	}
	if len(res.Devices) != 2 || profiles["3g.40gb"] != 3 || profiles["1g.10gb"] != 4 || len(migs) != 7 {
		t.Fatalf("discovered %d cards with instances %v, want 2 cards, three 3g.40gb and four 1g.10gb", len(res.Devices), profiles)
	}
	dir, host := t.TempDir(), t.TempDir()
	if err := writeToolkitSpec(dir, m, &Driver{HostDir: host, LibDir: "/usr/lib/x86_64-linux-gnu"}); err != nil {
		t.Fatal(err)
	}
	names, problems := cdi.DeviceNames([]string{dir}, "nvidia.com/gpu")
	if len(problems) > 0 {
		t.Fatalf("the spec does not load: %v", problems)
	}
	want := append([]string{"0", "1", "0:0", "0:1", "1:0", "1:1", "1:2", "1:3", "1:4", driverUUID("gpu-e", 0), driverUUID("gpu-e", 1)}, migs...)
	var got []string
	for n := range names {
		got = append(got, n)
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("toolkit devices\n%v\nwant\n%v", got, want)
	}
	b, err := os.ReadFile(filepath.Join(host, "cards", "0-mig-0"))
	if err != nil {
		t.Fatal(err)
	}
	first := res.Devices[0].Card.MIGInstances[0]
	if line := strings.Fields(string(b)); len(line) != 4 || line[0] != first.UUID || line[1] != strconv.FormatInt(first.MemoryMiB, 10) || line[3] != driverUUID("gpu-e", 0) {
		t.Errorf("stub file of card 0's first MIG device: %q, want its UUID, memory, SMs and parent %s", b, driverUUID("gpu-e", 0))
	}
}
