package vgpu

import (
	"testing"
	"time"

	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
)

// backToBack runs two sessions over one scheduler cache whose informer never shows
// the first session's binds, the window in which a naive plugin books a card twice.
// forget simulates a plugin without the in-flight store.
func backToBack(t *testing.T, forget bool) (first, second map[string]*api.PodAssignment) {
	testSched = NewScheduler()
	binder := util.NewFakeBinder(10)
	sc := cache.NewCustomMockSchedulerCache("utmock-scheduler", binder, util.NewFakeEvictor(0), &util.FakeStatusUpdater{}, nil, nil)
	sc.AddOrUpdateNode(gpuNode("n1", 1, "NVIDIA A100", 40960))
	sc.AddQueueV1beta1(util.BuildQueue("q1", 1, nil))
	sc.AddPodGroupV1beta1(podGroup("pg1", 1))
	sc.AddPod(vgpuPod("first", "pg1", 1, 30000, 30, nil))
	uthelper.RegisterPlugins(builders(nil))
	t.Cleanup(framework.CleanupPluginBuilders)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	sc.Run(stop)

	run := func() map[string]*api.PodAssignment {
		ssn := framework.OpenSession(sc, tiers(true, nil), nil)
		defer framework.CloseSession(ssn)
		act := allocate.New()
		act.Initialize()
		act.Execute(ssn)
		act.UnInitialize()
		return taskAssignments(t, ssn)
	}
	first = run()
	select {
	case <-binder.Channel:
	case <-time.After(5 * time.Second):
		t.Fatal("first pod was never bound")
	}
	if forget {
		testSched = NewScheduler()
	}
	sc.AddPodGroupV1beta1(podGroup("pg2", 1))
	sc.AddPod(vgpuPod("second", "pg2", 1, 30000, 30, nil))
	second = run()
	return first, second
}

func TestBackToBackSessionsNeverDoubleBook(t *testing.T) {
	first, second := backToBack(t, false)
	if first["first"] == nil {
		t.Fatal("first session placed nothing")
	}
	if a := second["second"]; a != nil {
		t.Fatalf("second session put 30000 MiB on a 40960 MiB card already holding 30000 MiB: %+v", a)
	}
}

func TestWithoutTheStoreTheSameCardIsBookedTwice(t *testing.T) {
	// The control for the test above: it shows the window is real.
	_, second := backToBack(t, true)
	if second["second"] == nil {
		t.Fatal("expected the double booking the in-flight store prevents; the test above proves nothing")
	}
}
