package vgpu

import (
	"fmt"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler"
	_ "volcano.sh/volcano/pkg/scheduler/actions" // the actions the conf names
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins/binpack"
	"volcano.sh/volcano/pkg/scheduler/plugins/capacity"
	"volcano.sh/volcano/pkg/scheduler/plugins/conformance"
	"volcano.sh/volcano/pkg/scheduler/plugins/deviceshare"
	"volcano.sh/volcano/pkg/scheduler/plugins/drf"
	"volcano.sh/volcano/pkg/scheduler/plugins/gang"
	"volcano.sh/volcano/pkg/scheduler/plugins/nodeorder"
	"volcano.sh/volcano/pkg/scheduler/plugins/overcommit"
	"volcano.sh/volcano/pkg/scheduler/plugins/predicates"
	"volcano.sh/volcano/pkg/scheduler/plugins/priority"
	"volcano.sh/volcano/pkg/scheduler/plugins/proportion"
	"volcano.sh/volcano/pkg/scheduler/plugins/sla"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
)

// confPlugins are the builders of every plugin the example conf may enable (Volcano's
// test harness unregisters builders when a session closes, so each session registers
// them again).
func confPlugins(t testing.TB, tiers []conf.Tier) map[string]framework.PluginBuilder {
	t.Helper()
	all := map[string]framework.PluginBuilder{
		priority.PluginName: priority.New, gang.PluginName: gang.New, conformance.PluginName: conformance.New,
		overcommit.PluginName: overcommit.New, drf.PluginName: drf.New, predicates.PluginName: predicates.New,
		proportion.PluginName: proportion.New, capacity.PluginName: capacity.New, nodeorder.PluginName: nodeorder.New,
		binpack.PluginName: binpack.New, deviceshare.PluginName: deviceshare.New, sla.PluginName: sla.New, PluginName: newPlugin,
	}
	for _, tier := range tiers {
		for _, p := range tier.Plugins {
			if _, ok := all[p.Name]; !ok {
				t.Fatalf("the example conf enables %s, which this test does not build", p.Name)
			}
		}
	}
	return all
}

// exampleConf reads config/volcano-scheduler.conf, optionally with one plugin name
// swapped for another.
func exampleConf(t testing.TB, from, to string) string {
	t.Helper()
	b, err := os.ReadFile("../../config/volcano-scheduler.conf")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if from != "" {
		if !strings.Contains(text, "- name: "+from+"\n") {
			t.Fatalf("the example conf does not enable %s", from)
		}
		text = strings.Replace(text, "- name: "+from+"\n", "- name: "+to+"\n", 1)
	}
	return text
}

// TestExampleConfAdmitsWithinTheQueueAndRefusesBeyondIt runs the shipped
// volcano-scheduler.conf (its actions and every plugin it enables, with Volcano's
// proportion, and again with capacity in its place) over three queues. vGPU jobs are
// admitted where the queue has room; Volcano itself holds a queue to its capability in
// card slots (volcano.sh/vgpu-number, which it counts), and Tessera's queue share holds
// it to its capability in card memory (which Volcano leaves to Tessera).
func TestExampleConfAdmitsWithinTheQueueAndRefusesBeyondIt(t *testing.T) {
	for _, queuePlugin := range []string{"proportion", "capacity"} {
		t.Run(queuePlugin, func(t *testing.T) {
			actions, tiers, cfg, _, err := scheduler.UnmarshalSchedulerConf(exampleConf(t, "proportion", queuePlugin))
			if err != nil {
				t.Fatalf("the example conf does not load: %v", err)
			}
			capped := func(name string, rl corev1.ResourceList) *schedulingv1.Queue {
				q := util.BuildQueue(name, 1, rl)
				if queuePlugin == "capacity" {
					q.Spec.Deserved = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi")}
				}
				return q
			}
			tc := &uthelper.TestCommonStruct{
				Nodes: []*corev1.Node{gpuNode("n1", 4, "NVIDIA A100", 40960), gpuNode("n2", 4, "NVIDIA A100", 40960)},
				Queues: []*schedulingv1.Queue{
					capped("roomy", nil),
					capped("slots", corev1.ResourceList{api.ResourceNumber: resource.MustParse("2")}),
					capped("memory", corev1.ResourceList{api.ResourceMemory: resource.MustParse("8192")}),
				},
			}
			for _, j := range []struct {
				queue string
				tasks int32
			}{{"roomy", 2}, {"slots", 4}, {"memory", 2}} {
				pg := util.BuildPodGroup("pg-"+j.queue, "ns", j.queue, j.tasks, nil, schedulingv1.PodGroupPending)
				// As Volcano's job controller sets it: enqueue consults the plugins.
				pg.Spec.MinResources = &corev1.ResourceList{}
				tc.PodGroups = append(tc.PodGroups, pg)
				for i := int32(0); i < j.tasks; i++ {
					tc.Pods = append(tc.Pods, vgpuPod(fmt.Sprintf("%s-%d", j.queue, i), pg.Name, 1, 8192, 25, nil))
				}
			}
			testSched = NewScheduler()
			tc.Plugins = confPlugins(t, tiers)
			ssn := tc.RegisterSession(tiers, cfg)
			t.Cleanup(tc.Close)
			tc.Run(actions)

			got := placedPerQueue(t, ssn)
			if got["roomy"] != 2 {
				t.Errorf("queue roomy placed %d of 2 (%s); a vGPU job in a queue with room must be admitted", got["roomy"], jobState(ssn, "pg-roomy"))
			}
			if got["slots"] != 0 {
				t.Errorf("queue slots placed %d; its capability of 2 card slots must keep a 4-slot gang out", got["slots"])
			}
			if got["memory"] != 0 {
				t.Errorf("queue memory placed %d; its capability of 8192 MiB must keep a 16384 MiB gang out", got["memory"])
			}
			// Volcano does not count card memory: Tessera holds the memory-capped gang
			// back, and says so.
			if s := jobState(ssn, "pg-memory"); !strings.Contains(s, "queue memory's capability of 8192 MiB of card memory") {
				t.Errorf("pg-memory is held back without Tessera's reason: %s", s)
			}
		})
	}
}

// jobState describes a job's podgroup phase and the reasons its tasks were refused.
func jobState(ssn *framework.Session, pg string) string {
	for _, job := range ssn.Jobs {
		if job.Name != pg {
			continue
		}
		var reasons []string
		for _, fe := range job.NodesFitErrors {
			reasons = append(reasons, fe.Error())
		}
		counts := map[vapi.TaskStatus]int{}
		for _, tk := range job.Tasks {
			counts[tk.Status]++
		}
		return fmt.Sprintf("phase %s, tasks %v; %s %s", job.PodGroup.Status.Phase, counts, job.JobFitErrors, strings.Join(reasons, "; "))
	}
	return "no such job"
}
