package book

import (
	"sync"
	"testing"

	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// A task's request is parsed once per session, with its job's gang size; tasks of
// one shape share a number, a task without vGPU asks for nothing and a malformed
// request keeps its reason.
func TestRequestsParseEachTaskOnceWithItsGang(t *testing.T) {
	jobs := map[vapi.JobID]*vapi.JobInfo{"ns/gang": {UID: "ns/gang", MinAvailable: 4}}
	r := NewRequests(pluginargs.Defaults(), jobs)
	task := func(name string, cores int64) *vapi.TaskInfo {
		ti := vapi.NewTaskInfo(vgpuPod(name, "", 1, 1000, cores))
		ti.Job = "ns/gang"
		return ti
	}
	a, b, c := task("a", 10), task("b", 10), task("c", 20)
	ta := r.Of(a)
	if ta == nil || ta.Err != nil || ta.Req.GangSize != 4 {
		t.Fatalf("a's request: %+v, want one parsed with gang size 4", ta)
	}
	if r.Of(a) != ta {
		t.Error("a's request was parsed again")
	}
	if tb, tc := r.Of(b), r.Of(c); tb.Shape != ta.Shape || tc.Shape == ta.Shape {
		t.Errorf("shapes a=%d b=%d c=%d: want a and b alike, c apart", ta.Shape, tb.Shape, tc.Shape)
	}
	cpu := vgpuPod("cpu", "", 0, 0, 0)
	cpu.Spec.Containers[0].Resources.Limits = nil
	if got := r.Of(vapi.NewTaskInfo(cpu)); got != nil {
		t.Errorf("a task without vGPU resources got %+v", got)
	}
	bad := vgpuPod("bad", "", 1, 1000, 10)
	bad.Annotations[api.AnnotationQoS] = "gold"
	if got := r.Of(vapi.NewTaskInfo(bad)); got == nil || got.Err == nil {
		t.Errorf("a malformed request got %+v, want its error", got)
	}
	if got := r.Of(&vapi.TaskInfo{UID: "podless"}); got != nil {
		t.Errorf("a task without a pod got %+v", got)
	}
	if tr, err := r.Template(vgpuPod("template", "", 1, 1000, 10), 8); err != nil || tr.Req.GangSize != 8 || tr.Shape == ta.Shape {
		t.Errorf("template: %+v, %v; want gang size 8 and a shape of its own", tr, err)
	}
	if _, err := r.Template(bad, 1); err == nil {
		t.Error("a malformed template parsed")
	}
}

// Volcano asks for requests from parallel predicates: run under -race.
func TestRequestsUnderConcurrentPredicates(t *testing.T) {
	r := NewRequests(pluginargs.Defaults(), nil)
	ti := vapi.NewTaskInfo(vgpuPod("a", "", 1, 1000, 10))
	var wg sync.WaitGroup
	got := make([]*TaskRequest, 8)
	for w := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[w] = r.Of(ti)
		}()
	}
	wg.Wait()
	for _, tr := range got {
		if tr != got[0] {
			t.Fatal("two workers got different requests for one task")
		}
	}
}

func TestShapeIDsNumberEachKeyOnce(t *testing.T) {
	var ids shapeIDs
	a, b := ids.Of("a"), ids.Of("b")
	if a == b || ids.Of("a") != a || ids.Of("b") != b {
		t.Fatalf("ids: a=%d b=%d, again a=%d b=%d", a, b, ids.Of("a"), ids.Of("b"))
	}
}
