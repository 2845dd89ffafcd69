package vgpu

import (
	"os"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v2"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/uthelper"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/pluginargs"
)

func TestNodeInventoryProblemsAreNamedInTheReason(t *testing.T) {
	stale := gpuNode("stale", 2, "NVIDIA A100", 40960)
	stale.Annotations[api.AnnotationHeartbeat] = time.Now().Add(-10 * time.Minute).UTC().Format(time.RFC3339)
	broken := gpuNode("broken", 2, "NVIDIA A100", 40960)
	broken.Annotations[api.AnnotationInventory] = `{"version":"v1","cards":[{"uuid":"GPU-x","index":0,"model":"m","memoryMiB":-1,"numa":0,"shares":1,"healthy":true}]}`
	future := gpuNode("future", 2, "NVIDIA A100", 40960)
	future.Annotations[api.AnnotationInventory] = `{"version":"v9","cards":[]}`
	utc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{stale, broken, future},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1)},
		Pods:      []*corev1.Pod{vgpuPod("p", "pg", 1, 1000, 10, nil)},
		Queues:    queues(),
	}
	ssn, _ := session(t, utc, true, nil)
	if a := taskAssignments(t, ssn)["p"]; a != nil {
		t.Fatalf("placed on %s, whose agent is gone or whose inventory is unusable", a.Node)
	}
	msg := jobMessage(ssn)
	for _, want := range []string{"node stale: node agent heartbeat is 10m", "cards[0].memoryMiB", `version "v9"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("reason %q does not contain %q", msg, want)
		}
	}
}

// A node whose agent serves its cards through DRA still publishes its inventory (the
// CLI and the book read it), but has no vGPU slots: a vGPU pod never goes there, and the
// reason says where such pods belong. A node of the device plugin beside it takes it.
func TestANodeServingDRAIsNotOfferedToVGPUPods(t *testing.T) {
	dra := gpuNode("dra", 2, "NVIDIA A100", 40960)
	dra.Annotations[api.AnnotationCardAPI] = api.CardAPIDRA
	utc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{dra},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1)},
		Pods:      []*corev1.Pod{vgpuPod("p", "pg", 1, 1000, 10, nil)},
		Queues:    queues(),
	}
	ssn, _ := session(t, utc, true, nil)
	if a := taskAssignments(t, ssn)["p"]; a != nil {
		t.Fatalf("placed on %s, whose cards are DRA devices", a.Node)
	}
	if msg := jobMessage(ssn); !strings.Contains(msg, "node dra: the node's cards are DRA devices") {
		t.Errorf("reason %q does not say the node serves DRA", msg)
	}
	dp := gpuNode("dp", 2, "NVIDIA A100", 40960)
	dp.Annotations[api.AnnotationCardAPI] = api.CardAPIDevicePlugin
	utc = &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{dra, dp},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1)},
		Pods:      []*corev1.Pod{vgpuPod("p", "pg", 1, 1000, 10, nil)},
		Queues:    queues(),
	}
	ssn, _ = session(t, utc, true, nil)
	if a := taskAssignments(t, ssn)["p"]; a == nil || a.Node != "dp" {
		t.Fatalf("assignment %+v, want the device plugin's node dp", a)
	}
}

func TestHAMiRegisteredNodeIsScheduledAndCompatAnnotationsWritten(t *testing.T) {
	node := cpuNode("hami")
	node.Annotations = map[string]string{
		api.VolcanoNodeRegister:  "GPU-h0,10,16384,NVIDIA-Tesla-T4,true:GPU-h1,10,16384,NVIDIA-Tesla-T4,false:",
		api.VolcanoNodeHandshake: "Requesting_" + time.Now().Format("2006.01.02 15:04:05"),
	}
	node.Status.Allocatable[api.ResourceNumber] = *node.Status.Allocatable.Pods()
	utc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{node},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1)},
		Pods:      []*corev1.Pod{vgpuPod("p", "pg", 1, 8000, 40, nil)},
		Queues:    queues(),
	}
	ssn, _ := session(t, utc, true, framework.Arguments{pluginargs.KeyVolcanoCompat: true})
	a := taskAssignments(t, ssn)["p"]
	if a == nil || a.Containers[0].Cards[0].UUID != "GPU-h0" {
		t.Fatalf("assignment %+v, want the healthy card GPU-h0", a)
	}
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			got := task.Pod.Annotations[api.VolcanoAssignedIDs]
			if got != "GPU-h0,NVIDIA,8000,40:" || task.Pod.Annotations[api.VolcanoDevicesToAllocate] != got {
				t.Fatalf("Volcano grammar %q, want %q on both keys", got, "GPU-h0,NVIDIA,8000,40:")
			}
			if task.Pod.Annotations[api.VolcanoBindPhase] != api.VolcanoBindPhaseAllocating {
				t.Fatalf("bind phase %q", task.Pod.Annotations[api.VolcanoBindPhase])
			}
		}
	}
}

func TestExampleSchedulerConfLoadsAndItsArgumentsAreValid(t *testing.T) {
	b, err := os.ReadFile("../../config/volcano-scheduler.conf")
	if err != nil {
		t.Fatal(err)
	}
	var c conf.SchedulerConfiguration
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		t.Fatalf("config/volcano-scheduler.conf does not parse: %v", err)
	}
	found := false
	for _, tier := range c.Tiers {
		for _, p := range tier.Plugins {
			switch p.Name {
			case PluginName:
				found = true
				if _, err := pluginargs.Parse(p.Arguments); err != nil {
					t.Fatalf("example arguments rejected: %v", err)
				}
				if len(p.Arguments) < 5 {
					t.Fatalf("example documents only %d arguments", len(p.Arguments))
				}
			case "deviceshare":
				if v, _ := p.Arguments["deviceshare.VGPUEnable"].(bool); v {
					t.Fatal("the example turns Volcano's VGPUEnable on beside Tessera")
				}
			}
		}
	}
	if !found {
		t.Fatal("the example does not enable the vgpu plugin")
	}
}

// TestHAMiRegistrationIsReadWithoutAHandshake: Volcano master and HAMi's Volcano device
// plugin no longer write volcano.sh/node-vgpu-handshake, and an old one may be left
// behind. The registration is read as the node's current cards whatever the handshake
// says; the node's own Ready condition (the not-ready taint) is what takes a dead node
// out of scheduling.
func TestHAMiRegistrationIsReadWithoutAHandshake(t *testing.T) {
	for name, handshake := range map[string]string{
		"no handshake":      "",
		"a day-old one":     "Reported_" + time.Now().Add(-24*time.Hour).Format("2006.01.02 15:04:05"),
		"a deleted one":     "Deleted_" + time.Now().Add(-time.Hour).Format("2006.01.02 15:04:05"),
		"an unreadable one": "yesterday",
	} {
		t.Run(name, func(t *testing.T) {
			node := cpuNode("hami")
			node.Annotations = map[string]string{api.VolcanoNodeRegister: "GPU-h0,10,16384,NVIDIA-Tesla-T4,true:"}
			if handshake != "" {
				node.Annotations[api.VolcanoNodeHandshake] = handshake
			}
			node.Status.Allocatable[api.ResourceNumber] = *node.Status.Allocatable.Pods()
			utc := &uthelper.TestCommonStruct{
				Nodes:     []*corev1.Node{node},
				PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1)},
				Pods:      []*corev1.Pod{vgpuPod("p", "pg", 1, 8000, 40, nil)},
				Queues:    queues(),
			}
			ssn, _ := session(t, utc, true, nil)
			if a := taskAssignments(t, ssn)["p"]; a == nil || a.Containers[0].Cards[0].UUID != "GPU-h0" {
				t.Fatalf("assignment %+v, want card GPU-h0 of the registration", a)
			}
		})
	}
}
