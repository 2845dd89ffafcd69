package handoff_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/internal/testing/kubeletsim"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// expect is what one container must get.
type expect struct {
	uuids, mem, sm string
}

func checkResponse(t *testing.T, who string, a *kubeletsim.Allocation, want expect) {
	t.Helper()
	if a == nil {
		t.Fatalf("%s: no allocate response", who)
	}
	r := a.Response
	got := expect{r.Envs[api.EnvVisibleUUIDs], r.Envs[api.EnvMemoryLimitMiB], r.Envs[api.EnvSMLimit]}
	if got != want || r.Envs["NVIDIA_VISIBLE_DEVICES"] != want.uuids {
		t.Errorf("%s: got cards %q memory %q SM %q (NVIDIA_VISIBLE_DEVICES %q), want %+v", who, got.uuids, got.mem, got.sm, r.Envs["NVIDIA_VISIBLE_DEVICES"], want)
	}
}

func limitsFor(want expect) string {
	return fmt.Sprintf("version=1\n%s=%s\n%s=%s\n%s=%s\n%s=fixed-share\n%s=/dev/shm/tessera-main.region\n%s=info\n",
		api.EnvVisibleUUIDs, want.uuids, api.EnvMemoryLimitMiB, want.mem, api.EnvSMLimit, want.sm, api.EnvQoS, api.EnvSharedRegion, api.EnvLogLevel)
}

func TestFiftyPodsBoundInQuickSuccessionEachGetTheirOwnCards(t *testing.T) {
	h := newHarness(t, nvmlfake.DGXA100(), 16)
	h.waitRegistered(1)
	type job struct {
		p    *podT
		want expect
	}
	var jobs []job
	for i := 0; i < 50; i++ {
		a, b := i%8, (i+3)%8
		mem, cores := int64(1000+i), 5+i%40
		cs := []ctrCard{{a, mem, cores}}
		if i%2 == 0 {
			cs = append(cs, ctrCard{b, mem + 1, cores + 1})
		}
		p, want := h.podOnCards(fmt.Sprintf("job-%02d", i), cs)
		jobs = append(jobs, job{p, want})
		h.bind(p.Pod)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(jobs))
	for _, j := range jobs {
		wg.Add(1)
		go func(j job) {
			defer wg.Done()
			resps, err := h.kubelet.Admit(h.ctx, j.p.Pod)
			if err != nil {
				errs <- fmt.Errorf("%s: admit: %w", j.p.Name, err)
				return
			}
			checkResponse(t, j.p.Name, resps["main"], j.want)
			if err := h.kubelet.StartContainers(h.ctx, j.p.Pod); err != nil {
				errs <- fmt.Errorf("%s: start: %w", j.p.Name, err)
			}
		}(j)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	used := map[string]string{}
	for _, j := range jobs {
		h.waitHandoff(j.p.Pod, api.HandoffDone)
		if got := h.limitsFile(j.p.Pod, "main"); got != limitsFor(j.want) {
			t.Errorf("%s: limits file\n%s\nwant\n%s", j.p.Name, got, limitsFor(j.want))
		}
		for _, id := range h.kubelet.Devices(j.p.Pod, "main") {
			if other, dup := used[id]; dup {
				t.Errorf("slot %s given to %s and %s", id, other, j.p.Name)
			}
			used[id] = j.p.Name
		}
	}
}

func TestAMultiContainerPodGetsEachContainerItsOwnCards(t *testing.T) {
	h := newHarness(t, nvmlfake.FourCardsTwoNUMA(), 4)
	h.waitRegistered(1)
	u := h.uuids
	p := pod("trainer",
		ctr{"learner", []api.CardAssignment{card(u[3], 8000, 50), card(u[2], 9000, 60)}},
		ctr{"sidecar", nil},
		ctr{"actor", []api.CardAssignment{card(u[2], 2000, 20)}},
	)
	// The pod's region volume, mounted by the actor only (as the webhook would not do: the
	// learner then keeps its region in its /dev/shm).
	p.Spec.Volumes = append(p.Spec.Volumes, api.RegionVolume(2))
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == "actor" {
			p.Spec.Containers[i].VolumeMounts = append(p.Spec.Containers[i].VolumeMounts, api.RegionVolumeMount())
		}
	}
	h.bind(p)
	resps, err := h.kubelet.Admit(h.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	checkResponse(t, "learner", resps["learner"], expect{u[2] + "," + u[3], "9000,8000", "60,50"})
	checkResponse(t, "actor", resps["actor"], expect{u[2], "2000", "20"})
	if _, ok := resps["sidecar"]; ok {
		t.Error("the container without vGPU was allocated devices")
	}
	if err := h.kubelet.StartContainers(h.ctx, p); err != nil {
		t.Fatal(err)
	}
	h.waitHandoff(p, api.HandoffDone)
	if got := h.limitsFile(p, "actor"); !strings.Contains(got, api.EnvMemoryLimitMiB+"=2000\n") ||
		!strings.Contains(got, api.EnvSharedRegion+"=/var/run/tessera-region/tessera-actor.region\n") {
		t.Errorf("actor limits file (region on the pod's volume):\n%s", got)
	}
	if got := h.limitsFile(p, "learner"); !strings.Contains(got, api.EnvSharedRegion+"=/dev/shm/tessera-learner.region\n") {
		t.Errorf("learner limits file (no volume mounted: region in /dev/shm):\n%s", got)
	}
	mounts := map[string]string{}
	for _, m := range resps["actor"].Response.Mounts {
		mounts[m.ContainerPath] = m.HostPath
	}
	if !strings.HasSuffix(mounts["/var/run/tessera/limits.env"], "/pods/uid-trainer/actor/limits.env") ||
		mounts["/etc/ld.so.preload"] == "" || len(mounts) != 3 {
		t.Errorf("actor mounts = %v; want the hook library, the preload file and the limits file only", mounts)
	}
}

func TestAVolcanoAssignmentIsReadWhenTesseraIsAbsent(t *testing.T) {
	h := newHarness(t, nvmlfake.Cards(2), 2)
	h.waitRegistered(1)
	p := pod("legacy", ctr{"main", []api.CardAssignment{card(h.uuids[1], 3000, 30)}})
	delete(p.Annotations, api.AnnotationAssignment)
	p.Annotations[api.VolcanoAssignedIDs] = h.uuids[1] + ",NVIDIA,3000,30:"
	h.bind(p)
	resps, err := h.kubelet.Admit(h.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	checkResponse(t, "legacy", resps["main"], expect{h.uuids[1], "3000", "30"})
	if err := h.kubelet.StartContainers(h.ctx, p); err != nil {
		t.Fatal(err)
	}
	h.waitHandoff(p, api.HandoffDone)
}

// The real kubelet (v1.34), under churn, has recorded one slot for two containers it was
// setting up at once. Each has its own cards from the scheduler, so both are prepared
// and both start, each with its own limits, rather than both being refused forever.
func TestTwoContainersTheKubeletRecordsOnOneSlotBothStart(t *testing.T) {
	h := newHarness(t, nvmlfake.FourCardsTwoNUMA(), 4)
	h.waitRegistered(1)
	a := pod("a", ctr{"main", []api.CardAssignment{card(h.uuids[1], 4096, 25)}})
	b := pod("b", ctr{"main", []api.CardAssignment{card(h.uuids[1], 8192, 50)}})
	h.bind(a)
	if _, err := h.kubelet.Admit(h.ctx, a); err != nil {
		t.Fatal(err)
	}
	h.kubelet.LoseAllocation(a.UID) // a's slot counts as free for the next admission
	h.bind(b)
	if _, err := h.kubelet.Admit(h.ctx, b); err != nil {
		t.Fatal(err)
	}
	sa, sb := h.kubelet.Devices(a, "main"), h.kubelet.Devices(b, "main")
	if len(sa) != 1 || len(sb) != 1 || sa[0] != sb[0] {
		t.Fatalf("the kubelet should have recorded one slot for both: a %v, b %v", sa, sb)
	}
	for _, p := range []*podT{{a}, {b}} {
		if err := h.kubelet.StartContainers(h.ctx, p.Pod); err != nil {
			t.Fatalf("start %s: %v", p.Name, err)
		}
		h.waitHandoff(p.Pod, api.HandoffDone)
	}
	if la, lb := h.limitsFile(a, "main"), h.limitsFile(b, "main"); !strings.Contains(la, "4096") || !strings.Contains(lb, "8192") {
		t.Errorf("each container must get its own limits:\na: %s\nb: %s", la, lb)
	}
}
