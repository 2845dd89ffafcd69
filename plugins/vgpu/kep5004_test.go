package vgpu

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins/proportion"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/plugins/vgpu/dracost"
)

// KEP-5004 (a DeviceClass with extendedResourceName: volcano.sh/vgpu-number, the
// DRAExtendedResource gate on) does not bring a vGPU pod onto a DRA node under Volcano
// v1.14.1: with Tessera's plugin the node is refused as a DRA node; with Volcano's plugins
// alone proportion finds the queue "overused" (its deserved share has no vgpu-number, since
// no node advertises it), and without proportion allocate's own resource fit refuses the
// node ("Insufficient volcano.sh/vgpu-number") although the DRA plugin's PreFilter has
// prepared the extended-resource claim. docs/dra.md, "Why not KEP-5004".
func TestKEP5004ExtendedResourceDoesNotReachDRANodes(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.DRAExtendedResource, true)
	for _, c := range []struct {
		name     string
		tessera  bool
		dropProp bool
		want     string // in the job's or the task's fit errors; "" : not considered at all
	}{
		{"with Tessera's plugin the node is a DRA node", true, false, "the node's cards are DRA devices"},
		{"with Volcano's plugins alone the queue is overused", false, false, ""},
		{"without proportion, allocate's resource fit refuses the node", false, true, "Insufficient volcano.sh/vgpu-number"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dra, slice := draNode("dra", 2)
			if !c.tessera {
				delete(dra.Annotations, api.AnnotationCardAPI)
			}
			delete(dra.Status.Allocatable, api.ResourceNumber) // a DRA node advertises no vGPU slots
			delete(dra.Status.Capacity, api.ResourceNumber)
			dc := deviceClass(dracost.Driver)
			name := api.ResourceNumber
			dc.Spec.ExtendedResourceName = &name
			pod := vgpuPod("number-only", "pg", 1, 0, 0, nil)
			for _, rl := range []corev1.ResourceList{pod.Spec.Containers[0].Resources.Requests, pod.Spec.Containers[0].Resources.Limits} {
				delete(rl, api.ResourceMemory)
				delete(rl, api.ResourceCores)
			}
			tc := &uthelper.TestCommonStruct{
				Nodes: []*corev1.Node{dra}, ResourceSlices: []*resourceapi.ResourceSlice{slice},
				DeviceClasses: []*resourceapi.DeviceClass{dc},
				Queues:        []*schedulingv1.Queue{util.BuildQueue("q1", 1, nil)},
				PodGroups:     []*schedulingv1.PodGroup{util.BuildPodGroup("pg", "ns", "q1", 1, nil, schedulingv1.PodGroupInqueue)},
				Pods:          []*corev1.Pod{pod},
			}
			ts := draTiers()
			var kept []conf.PluginOption
			for _, o := range ts[0].Plugins {
				if (o.Name == PluginName && !c.tessera) || (o.Name == proportion.PluginName && c.dropProp) {
					continue
				}
				kept = append(kept, o)
			}
			ts[0].Plugins = kept
			testSched = NewScheduler()
			ssn, _ := open(t, tc, ts)
			tc.Run([]framework.Action{allocate.New()})
			for _, job := range ssn.Jobs {
				for _, task := range job.Tasks {
					if task.NodeName != "" {
						t.Fatalf("%s placed on %s", task.Name, task.NodeName)
					}
					why := job.JobFitErrors
					if fe, ok := job.NodesFitErrors[task.UID]; ok {
						why += fe.Error()
					}
					if (c.want == "" && why != "") || !strings.Contains(why, c.want) {
						t.Errorf("%s: fit errors %q, want %q", task.Name, why, c.want)
					}
				}
			}
		})
	}
}
