package charttest

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"volcano.sh/volcano/pkg/scheduler"
	"volcano.sh/volcano/pkg/scheduler/conf"

	// The actions and plugins a real vc-scheduler registers, so that the conf is
	// checked against the same registry.
	_ "volcano.sh/volcano/pkg/scheduler/actions"
	_ "volcano.sh/volcano/pkg/scheduler/plugins"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/pluginargs"
	"github.com/tessera-gpu/tessera/plugins/vgpu"
)

// schedulerConf parses the rendered volcano-scheduler.conf with Volcano's own loader.
func schedulerConf(t *testing.T, r *Rendered) []conf.Tier {
	t.Helper()
	var cm corev1.ConfigMap
	r.Get(t, "ConfigMap", "gpu-tessera-scheduler-conf", &cm)
	s, ok := cm.Data["volcano-scheduler.conf"]
	if !ok {
		t.Fatalf("ConfigMap has no volcano-scheduler.conf: %v", cm.Data)
	}
	actions, tiers, _, _, err := scheduler.UnmarshalSchedulerConf(s)
	if err != nil {
		t.Fatalf("Volcano rejects the rendered conf: %v\n%s", err, s)
	}
	var names []string
	for _, a := range actions {
		names = append(names, a.Name())
	}
	// preempt and reclaim are what take cards back for a queue below its share (docs/queues.md).
	if got := strings.Join(names, ", "); got != "enqueue, allocate, backfill, preempt, reclaim" {
		t.Errorf("actions %v, want enqueue, allocate, backfill, preempt, reclaim", names)
	}
	return tiers
}

// vgpuArgs finds the vgpu plugin, checks it is enabled and deviceshare does not
// share vGPUs, and returns its parsed arguments.
func vgpuArgs(t *testing.T, tiers []conf.Tier) pluginargs.Args {
	t.Helper()
	var found *conf.PluginOption
	for ti := range tiers {
		for pi := range tiers[ti].Plugins {
			p := &tiers[ti].Plugins[pi]
			if p.Name == "deviceshare" {
				if v, ok := p.Arguments["deviceshare.VGPUEnable"]; ok && v != false {
					t.Errorf("deviceshare.VGPUEnable = %v; it must stay off", v)
				}
			}
			if p.Name == vgpu.PluginName {
				if ti != 0 {
					t.Errorf("vgpu is in tier %d, want the first tier (where Volcano asks for victims)", ti)
				}
				found = p
			}
		}
	}
	if found == nil {
		t.Fatalf("the vgpu plugin is not in the conf: %+v", tiers)
	}
	for _, off := range []*bool{found.EnabledPredicate, found.EnabledNodeOrder, found.EnabledJobEnqueued} {
		if off != nil && !*off {
			t.Errorf("a vgpu hook is disabled: %+v", found)
		}
	}
	args, err := pluginargs.Parse(found.Arguments)
	if err != nil {
		t.Errorf("the vgpu plugin rejects its rendered arguments: %v", err)
	}
	return args
}

func TestDefaultConfEnablesVGPUWithItsDefaults(t *testing.T) {
	tiers := schedulerConf(t, MustRender(t, ""))
	got := vgpuArgs(t, tiers)
	want := pluginargs.Defaults()
	if got.NodePolicy != want.NodePolicy || got.CardPolicy != want.CardPolicy || got.Weight != want.Weight ||
		got.TopologyWeight != want.TopologyWeight || got.MemoryOversubscription != want.MemoryOversubscription ||
		got.HeartbeatTimeout != want.HeartbeatTimeout || got.PendingTTL != want.PendingTTL ||
		got.VolcanoCompat != want.VolcanoCompat || got.QueueShare != want.QueueShare || got.Resources != want.Resources {
		t.Errorf("chart defaults differ from the plugin's documented defaults:\n got %+v\nwant %+v", got, want)
	}
	var names []string
	for _, tier := range tiers {
		for _, p := range tier.Plugins {
			names = append(names, p.Name)
		}
	}
	for _, need := range []string{"gang", "predicates", "proportion", "nodeorder"} {
		var ok bool
		for _, n := range names {
			ok = ok || n == need
		}
		if !ok {
			t.Errorf("default conf lacks %s: %v", need, names)
		}
	}
}

func TestCustomConfCarriesTheChosenArguments(t *testing.T) {
	tiers := schedulerConf(t, MustRender(t, "testdata/custom-values.yaml"))
	got := vgpuArgs(t, tiers)
	if got.NodePolicy != api.PolicySpread || got.CardPolicy != api.PolicyTopology || got.Weight != 20 ||
		got.MemoryOversubscription != 1.5 || got.HeartbeatTimeout != 45*time.Second || !got.VolcanoCompat || got.QueueShare ||
		got.Resources.Number != "example.com/vgpu" {
		t.Errorf("custom vgpu arguments not carried: %+v", got)
	}
	var deviceshare bool
	for _, tier := range tiers {
		for _, p := range tier.Plugins {
			deviceshare = deviceshare || p.Name == "deviceshare"
		}
	}
	if !deviceshare {
		t.Errorf("the custom tiers' deviceshare entry (GPU number sharing off, VGPUEnable off) was dropped")
	}
}

// `tessera explain --scheduler-configmap` reads the chart's ConfigMap: the CLI must
// come to the same arguments as the scheduler from it.
func TestTheCLIReadsTheChartsConfLikeTheScheduler(t *testing.T) {
	for _, values := range []string{"", "testdata/custom-values.yaml"} {
		r := MustRender(t, values)
		want := vgpuArgs(t, schedulerConf(t, r))
		var cm corev1.ConfigMap
		r.Get(t, "ConfigMap", "gpu-tessera-scheduler-conf", &cm)
		got, err := pluginargs.FromConf(cm.Data["volcano-scheduler.conf"])
		if err != nil {
			t.Errorf("%q: the CLI rejects the chart's conf: %v", values, err)
		}
		if got != want {
			t.Errorf("%q: CLI reads %+v, scheduler %+v", values, got, want)
		}
	}
}

// The chart's default conf, which runs preempt and reclaim, keeps nothing in the way of
// the vgpu plugin.
func TestTheChartsConfHasNoFindingsWithEvictionOn(t *testing.T) {
	r := MustRender(t, "")
	var cm corev1.ConfigMap
	r.Get(t, "ConfigMap", "gpu-tessera-scheduler-conf", &cm)
	findings, err := pluginargs.ConfFindings(cm.Data["volcano-scheduler.conf"])
	if err != nil || len(findings) != 0 {
		t.Errorf("findings %q, err %v", findings, err)
	}
}
