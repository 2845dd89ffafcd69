package vgpu

import (
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/cmd/scheduler/app/options"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins"
	"volcano.sh/volcano/pkg/scheduler/plugins/gang"
	"volcano.sh/volcano/pkg/scheduler/plugins/nodeorder"
	"volcano.sh/volcano/pkg/scheduler/plugins/predicates"
	"volcano.sh/volcano/pkg/scheduler/plugins/proportion"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

func TestMain(m *testing.M) {
	options.Default()
	os.Exit(m.Run())
}

// gpuNode builds a node whose agent published cards of the given model and size.
func gpuNode(name string, cards int, model string, memMiB int64) *corev1.Node {
	inv := &api.NodeInventory{Version: api.InventoryVersion}
	for i := 0; i < cards; i++ {
		inv.Cards = append(inv.Cards, api.Card{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: model,
			MemoryMiB: memMiB, SMCount: 108, NUMA: i * 2 / max(cards, 1), Shares: 10, Healthy: true})
	}
	s, err := api.EncodeInventory(inv)
	if err != nil {
		panic(err)
	}
	n := cpuNode(name)
	n.Status.Allocatable[api.ResourceNumber] = *resource.NewQuantity(int64(cards*10), resource.DecimalSI)
	n.Status.Capacity = n.Status.Allocatable
	n.Annotations = map[string]string{api.AnnotationInventory: s, api.AnnotationHeartbeat: time.Now().UTC().Format(time.RFC3339)}
	return n
}

func cpuNode(name string) *corev1.Node {
	return util.BuildNode(name, corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}, map[string]string{})
}

// vgpuPod builds a pending pod in group pg whose one container asks for cards ×
// (memMiB, cores). Extra annotations are added, never replacing the group's.
func vgpuPod(name, pg string, cards, memMiB, cores int64, ann map[string]string) *corev1.Pod {
	req := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1"),
		corev1.ResourceMemory: resource.MustParse("1Gi"),
		api.ResourceNumber:    *resource.NewQuantity(cards, resource.DecimalSI),
		api.ResourceMemory:    *resource.NewQuantity(memMiB, resource.DecimalSI),
		api.ResourceCores:     *resource.NewQuantity(cores, resource.DecimalSI),
	}
	p := util.BuildPod("ns", name, "", corev1.PodPending, req, pg, nil, nil)
	p.Spec.Containers[0].Name = "main"
	p.Spec.Containers[0].Resources.Limits = req
	for k, v := range ann {
		p.Annotations[k] = v
	}
	return p
}

func cpuPod(name, pg string) *corev1.Pod {
	p := util.BuildPod("ns", name, "", corev1.PodPending, corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}, pg, nil, nil)
	p.Spec.Containers[0].Name = "main"
	return p
}

func podGroup(name string, min int32) *schedulingv1.PodGroup {
	return util.BuildPodGroup(name, "ns", "q1", min, nil, schedulingv1.PodGroupInqueue)
}

func queues() []*schedulingv1.Queue {
	return []*schedulingv1.Queue{util.BuildQueue("q1", 1, nil)}
}

// tiers enables gang, proportion and predicates beside vgpu (when withVGPU), with every
// hook on as volcano-scheduler.conf would default them.
func tiers(withVGPU bool, args framework.Arguments) []conf.Tier {
	names := []string{gang.PluginName, proportion.PluginName, predicates.PluginName, nodeorder.PluginName}
	if withVGPU {
		names = append(names, PluginName)
	}
	var opts []conf.PluginOption
	for _, n := range names {
		o := conf.PluginOption{Name: n}
		if n == PluginName {
			o.Arguments = args
		}
		plugins.ApplyPluginConfDefaults(&o)
		opts = append(opts, o)
	}
	return []conf.Tier{{Plugins: opts}}
}

// builders returns the plugin builders, capturing the vgpu plugin each session builds.
// testSched is the scheduler the tests' plugin builders share; a test that needs an
// empty in-flight store starts a fresh one.
var testSched = NewScheduler()

func newPlugin(a framework.Arguments) framework.Plugin { return testSched.New(a) }

func builders(captured **vgpuPlugin) map[string]framework.PluginBuilder {
	return map[string]framework.PluginBuilder{
		gang.PluginName:       gang.New,
		proportion.PluginName: proportion.New,
		predicates.PluginName: predicates.New,
		nodeorder.PluginName:  nodeorder.New,
		PluginName: func(a framework.Arguments) framework.Plugin {
			p := newPlugin(a).(*vgpuPlugin)
			if captured != nil {
				*captured = p
			}
			return p
		},
	}
}

// booked is how many tasks the session booked cards for.
func booked(p *vgpuPlugin) int {
	_, _, n := p.ledger.Counts()
	return n
}

// requested is what a queue's vGPU tasks ask of the cards, by the queue share.
func requested(p *vgpuPlugin, queue vapi.QueueID) fairshare.Amount {
	for _, q := range p.shares.Standings() {
		if q.Queue == queue {
			return q.Requested
		}
	}
	return fairshare.Amount{}
}
