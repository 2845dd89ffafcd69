package vgpu

import (
	"fmt"
	"testing"

	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"
)

// shareScene is one node whose cards queue early holds whole (an elastic job of
// minimum one), and queue late's gang of members that each need cores% of a card.
func shareScene(cards, members int, cores int64) *uthelper.TestCommonStruct {
	tc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{gpuNode("n1", cards, "NVIDIA A100", 40960)},
		Queues:    []*schedulingv1.Queue{util.BuildQueue("early", 1, nil), util.BuildQueue("late", 1, nil)},
		PodGroups: []*schedulingv1.PodGroup{util.BuildPodGroup("pg-a", "ns", "early", 1, nil, schedulingv1.PodGroupRunning)},
	}
	for i := 0; i < cards; i++ {
		p := holding(fmt.Sprintf("a-%d", i), "n1", fmt.Sprintf("GPU-n1-%d", i), 100, 1)
		p.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-a"
		tc.Pods = append(tc.Pods, p)
	}
	pg := util.BuildPodGroup("pg-late", "ns", "late", int32(members), nil, schedulingv1.PodGroupInqueue)
	tc.PodGroups = append(tc.PodGroups, pg)
	for i := 0; i < members; i++ {
		tc.Pods = append(tc.Pods, vgpuPod(fmt.Sprintf("late-%d", i), "pg-late", 1, 8000, cores, nil))
	}
	return tc
}

// A gang whose members can share one card: the first member reclaims a card, the
// others are pipelined onto the rest of it with no eviction of their own (Volcano's
// reclaim pipelines a task without evicting when no tier offers victims on the node).
// With the shipped conf the whole gang is pipelined after one eviction.
func TestReclaimServesAGangWhoseMembersShareAReclaimedCard(t *testing.T) {
	actions, tiers, _, _, err := scheduler.UnmarshalSchedulerConf(exampleConf(t, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		members int
		cores   int64
	}{{2, 50}, {4, 25}, {3, 30}} {
		t.Run(fmt.Sprintf("%dx%d", tt.members, tt.cores), func(t *testing.T) {
			ssn, got := runEvictWith(t, shareScene(4, tt.members, tt.cores), tiers, actions...)
			if len(got) != 1 {
				t.Fatalf("evicted %v, want one of queue early's pods: the gang fits the card it frees", got)
			}
			for _, job := range ssn.Jobs {
				if job.Name == "pg-late" && len(job.TaskStatusIndex[vapi.Pipelined]) != tt.members {
					t.Fatalf("%d of the gang's %d members pipelined, want all", len(job.TaskStatusIndex[vapi.Pipelined]), tt.members)
				}
			}
		})
	}
}

// When CPU is scarce, Volcano's proportion still finds queue early above its share
// once the first member's victim is gone and, in a later tier, offers early's pods as
// victims for the second member: reclaim would evict one of them for nothing (the
// member fits the freed card already). The plugin then does not offer the node to the
// second member, the gang stays short and its statement is rolled back: nothing is
// evicted. With proportion's reclaim victims turned off (the shipped conf), the gang
// is served after one eviction.
func TestReclaimSharesAFreedCardOnlyWhereNoTierOffersVictims(t *testing.T) {
	scarce := func() *uthelper.TestCommonStruct {
		tc := shareScene(4, 2, 50)
		tc.Nodes[0].Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("10")
		tc.Nodes[0].Status.Capacity = tc.Nodes[0].Status.Allocatable
		for _, n := range []string{"a-cpu-0", "a-cpu-1"} {
			p := runningCPU(n, "n1")
			p.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-a"
			tc.Pods = append(tc.Pods, p)
		}
		// Late also waits for CPU it cannot get: its deserved share grows past early's.
		tc.PodGroups = append(tc.PodGroups, util.BuildPodGroup("pg-late-cpu", "ns", "late", 1, nil, schedulingv1.PodGroupInqueue))
		big := cpuPod("late-cpu", "pg-late-cpu")
		big.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("6")
		tc.Pods = append(tc.Pods, big)
		return tc
	}
	for _, tt := range []struct {
		name      string
		from, to  string
		wantGang  int
		wantEvict int
	}{
		{"shipped conf", "", "", 2, 1},
		{"proportion offers reclaim victims", "proportion\n    enableReclaimable: false", "proportion", 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			text := exampleConf(t, "", "")
			if tt.from != "" {
				if !strings.Contains(text, "- name: "+tt.from+"\n") {
					t.Fatalf("the shipped conf does not set %q", tt.from)
				}
				text = strings.Replace(text, "- name: "+tt.from+"\n", "- name: "+tt.to+"\n", 1)
			}
			actions, tiers, _, _, err := scheduler.UnmarshalSchedulerConf(text)
			if err != nil {
				t.Fatal(err)
			}
			ssn, got := runEvictWith(t, scarce(), tiers, actions...)
			vgpuEvicted := 0
			for _, e := range got {
				if strings.HasPrefix(e, "ns/a-cpu") {
					t.Fatalf("evicted the CPU-only pod %s (all: %v)", e, got)
				}
				vgpuEvicted++
			}
			gang := 0
			for _, job := range ssn.Jobs {
				if job.Name == "pg-late" {
					gang = len(job.TaskStatusIndex[vapi.Pipelined])
				}
			}
			if vgpuEvicted != tt.wantEvict || gang != tt.wantGang {
				t.Fatalf("evicted %v and pipelined %d gang members, want %d evicted and %d pipelined", got, gang, tt.wantEvict, tt.wantGang)
			}
		})
	}
}
