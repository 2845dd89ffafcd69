package pluginargs

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestTheShippedConfHasNoFindings(t *testing.T) {
	b, err := os.ReadFile("../config/volcano-scheduler.conf")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ConfFindings(string(b))
	if err != nil || len(got) != 0 {
		t.Errorf("config/volcano-scheduler.conf: findings %q, err %v; want none", got, err)
	}
}

func TestConfFindingsNameWhatKeepsThePluginFromItsJob(t *testing.T) {
	const tier1 = "- plugins: [{name: priority}, {name: gang, enablePreemptable: false}, {name: conformance}, {name: vgpu}]\n"
	cases := []struct {
		name, conf string
		want       []string // one substring per finding, in order
	}{
		{"proportion's reclaim victims left on (the switch absent means on)",
			"actions: \"enqueue, allocate, reclaim\"\ntiers:\n" + tier1 + "- plugins: [{name: drf}, {name: proportion}]\n",
			[]string{"proportion (tier 2) offers reclaim victims"}},
		{"capacity with enableReclaimable: true",
			"actions: allocate, reclaim\ntiers:\n" + tier1 + "- plugins: [{name: capacity, enableReclaimable: true}]\n",
			[]string{"capacity (tier 2) offers reclaim victims"}},
		{"no reclaim action: proportion's switch does not matter",
			"actions: allocate, backfill\ntiers:\n" + tier1 + "- plugins: [{name: proportion}]\n", nil},
		{"vgpu in the second tier with preempt",
			"actions: allocate, preempt\ntiers:\n- plugins: [{name: gang}]\n- plugins: [{name: vgpu}]\n",
			[]string{"vgpu plugin is in tier 2, not the first"}},
		{"vgpu in the second tier without eviction actions",
			"actions: allocate\ntiers:\n- plugins: [{name: gang}]\n- plugins: [{name: vgpu}]\n", nil},
		{"deviceshare managing vGPUs too (a string true)",
			"actions: allocate\ntiers:\n" + tier1 + "- plugins: [{name: deviceshare, arguments: {deviceshare.VGPUEnable: \"true\"}}]\n",
			[]string{"deviceshare.VGPUEnable is true"}},
		{"all three",
			"actions: allocate, reclaim\ntiers:\n- plugins: [{name: gang}]\n- plugins: [{name: vgpu}, {name: deviceshare, arguments: {deviceshare.VGPUEnable: true}}]\n- plugins: [{name: proportion}]\n",
			[]string{"tier 2, not the first", "deviceshare.VGPUEnable", "proportion (tier 3)"}},
	}
	for _, c := range cases {
		got, err := ConfFindings(c.conf)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: findings %q, want %d", c.name, got, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: finding %d is %q, want it to say %q", c.name, i, got[i], w)
			}
		}
	}
	if _, err := ConfFindings("actions: allocate\ntiers: [{plugins: [{name: gang}]}]"); !errors.Is(err, ErrNotEnabled) {
		t.Errorf("a conf without vgpu: %v, want ErrNotEnabled", err)
	}
	if _, err := ConfFindings("tiers: ["); err == nil {
		t.Error("an unreadable conf gave no error")
	}
}
