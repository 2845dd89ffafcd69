package vgpu

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/pluginargs"
	"github.com/tessera-gpu/tessera/plugins/vgpu/dracost"
)

// orderScenario: two 4-card DRA nodes, "full" with two cards held by running claims
// and "empty" with none, and two pending pods asking for one whole card each through
// claims, with the node policy policy ("" for the plugin's default, binpack).
func orderScenario(policy string) *uthelper.TestCommonStruct {
	full, fullSlice := draNode("full", 4)
	empty, emptySlice := draNode("empty", 4)
	tc := &uthelper.TestCommonStruct{
		Nodes:          []*corev1.Node{full, empty},
		ResourceSlices: []*resourceapi.ResourceSlice{fullSlice, emptySlice},
		DeviceClasses:  []*resourceapi.DeviceClass{deviceClass(dracost.Driver)},
		Queues:         []*schedulingv1.Queue{util.BuildQueue("q", 1, nil)},
		PodGroups: []*schedulingv1.PodGroup{
			util.BuildPodGroup("pg-run", "ns", "q", 1, nil, schedulingv1.PodGroupRunning),
			util.BuildPodGroup("pg-new", "ns", "q", 1, nil, schedulingv1.PodGroupInqueue),
		},
	}
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("run-%d", i)
		pod := claimPod(name, "pg-run", "full", name)
		tc.Pods = append(tc.Pods, pod)
		tc.ResourceClaims = append(tc.ResourceClaims, allocatedClaim(name, "full", pod.UID, []string{fmt.Sprintf("card-%d", i)}, "", ""))
	}
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("new-%d", i)
		pod := claimPod(name, "pg-new", "", name)
		if policy != "" {
			pod.Annotations[api.AnnotationNodePolicy] = policy
		}
		tc.Pods = append(tc.Pods, pod)
		tc.ResourceClaims = append(tc.ResourceClaims, wholeCardClaim(name, dracost.Class))
	}
	return tc
}

// Volcano's allocator picks the card inside a DRA node; Tessera orders the nodes by the
// pod's policy over what the claims hold: binpack fills the node that already holds
// two cards, spread keeps to the empty one. Volcano's own nodeorder plugin, which
// scores the pods' CPU and memory, prefers the emptier node, so binpack fails without
// the plugin's DRA node order.
func TestDRANodeOrderFollowsThePodsPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy, want string
	}{{"", "full"}, {string(api.PolicySpread), "empty"}} {
		t.Run("policy="+tc.policy, func(t *testing.T) {
			ssn, _ := draSession(t, orderScenario(tc.policy))
			var placed []string
			for _, job := range ssn.Jobs {
				for _, task := range job.Tasks {
					if strings.HasPrefix(task.Name, "new-") && task.NodeName != "" {
						placed = append(placed, task.Name+"@"+task.NodeName)
						if task.NodeName != tc.want {
							t.Errorf("%s placed on %s, want %s", task.Name, task.NodeName, tc.want)
						}
					}
				}
			}
			if len(placed) != 2 {
				t.Fatalf("placed %v, want both pending pods", placed)
			}
		})
	}
}

// draRequest turns a pending pod's claims into the request Tessera scores: one
// container request per claim request, with the pod's policy; allocated claims and
// other drivers' requests ask for nothing more; a request whose shape cannot be known
// is an error naming its field.
func TestDRARequestReadsThePodsPendingClaims(t *testing.T) {
	capacity := func(mem, cores string) *resourceapi.CapacityRequirements {
		return &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			dracost.CapacityMemory: resource.MustParse(mem), dracost.CapacityCores: resource.MustParse(cores)}}
	}
	frac := wholeCardClaim("frac", dracost.Class)
	frac.Spec.Devices.Requests[0].Exactly.Count = 2
	frac.Spec.Devices.Requests[0].Exactly.Capacity = capacity("8Gi", "25")
	whole := wholeCardClaim("whole", dracost.Class)
	other := wholeCardClaim("other", "gpu.example.com")
	done := allocatedClaim("done", "full", "", []string{"card-0"}, "", "")
	all := wholeCardClaim("all", dracost.Class)
	all.Spec.Devices.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	claims := map[string]*resourceapi.ResourceClaim{}
	for _, c := range []*resourceapi.ResourceClaim{frac, whole, other, done, all} {
		claims["ns/"+c.Name] = c
	}
	podWith := func(names ...string) *corev1.Pod {
		p := claimPod("p", "pg", "", names[0])
		p.Spec.ResourceClaims = nil
		for _, n := range names {
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: n, ResourceClaimName: ptr.To(n)})
		}
		p.Annotations[api.AnnotationCardPolicy] = string(api.PolicySpread)
		return p
	}
	args := pluginargs.Defaults()
	ask := func(names ...string) (*placement.Request, error) {
		p := podWith(names...)
		return draRequest(p, podClaimKeys(p), claims, args)
	}
	req, err := ask("frac", "whole", "other", "done")
	if err != nil {
		t.Fatal(err)
	}
	want := []api.ContainerRequest{
		{Name: "claim ns/frac: spec.devices.requests[0].exactly", Cards: 2, MemoryMiB: 8192, Cores: 25},
		{Name: "claim ns/whole: spec.devices.requests[0].exactly", Cards: 1, MemoryPercent: 100, Cores: 100},
	}
	if fmt.Sprint(req.Containers) != fmt.Sprint(want) || req.CardPolicy != api.PolicySpread {
		t.Errorf("request %+v (card policy %s), want %+v with spread", req.Containers, req.CardPolicy, want)
	}
	if req, err := ask("other", "done"); req != nil || err != nil {
		t.Errorf("a pod with only allocated and other drivers' claims asks %+v (%v), want nothing", req, err)
	}
	if _, err := ask("all"); err == nil || !strings.Contains(err.Error(), "requests[0].exactly.allocationMode") {
		t.Errorf("allocationMode All: %v, want an error naming the field", err)
	}
}
