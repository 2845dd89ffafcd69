package book

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// TaskRequest is a task's parsed vGPU demand for one session; Err is the reason a
// malformed request or annotation makes the task unschedulable (Req is nil then).
type TaskRequest struct {
	Req *placement.Request
	Err error
	// Refused counts the reasons nodes gave this session, for the pending metric.
	Refused Refusals
	// Shape is the session's number for the request's shape (shapeKey): tasks of one
	// shape fit alike, and the ledger remembers its answers under this number.
	Shape ShapeID
}

// Requests parses each task's vGPU demand once per session and remembers it: every
// hook asks for it, the predicates on Volcano's parallel workers.
type Requests struct {
	args pluginargs.Args
	// gangs is each job's minimum member count at session open, read when a request
	// is parsed; never written after NewRequests.
	gangs map[vapi.JobID]int
	// byTask holds each task's *TaskRequest (nil: it asks for no vGPU), stored once
	// per task; a sync.Map, read lock-free by the parallel predicates.
	byTask sync.Map
	shapes shapeIDs
}

// NewRequests returns an empty memo for a session of jobs, reading pods with args.
func NewRequests(args pluginargs.Args, jobs map[vapi.JobID]*vapi.JobInfo) *Requests {
	gangs := make(map[vapi.JobID]int, len(jobs))
	for id, job := range jobs {
		gangs[id] = int(job.MinAvailable)
	}
	return &Requests{args: args, gangs: gangs}
}

// Of returns the task's parsed vGPU demand, or nil for a task without one.
func (r *Requests) Of(task *vapi.TaskInfo) *TaskRequest {
	if task.Pod == nil {
		return nil
	}
	if v, ok := r.byTask.Load(task.UID); ok {
		return v.(*TaskRequest)
	}
	var tr *TaskRequest
	if r.args.Resources.HasVGPURequest(task.Pod) {
		tr = r.parse(task.Pod, r.gangs[task.Job])
	}
	v, _ := r.byTask.LoadOrStore(task.UID, tr)
	return v.(*TaskRequest)
}

// Template parses what a member not yet created will ask for, from its job's pod
// template, with the job's gang size. It is not remembered by task: the caller
// remembers it by job.
func (r *Requests) Template(pod *corev1.Pod, gangSize int) (*TaskRequest, error) {
	tr := r.parse(pod, gangSize)
	return tr, tr.Err
}

func (r *Requests) parse(pod *corev1.Pod, gangSize int) *TaskRequest {
	req, err := r.args.Request(pod)
	if err != nil {
		return &TaskRequest{Err: err}
	}
	req.GangSize = gangSize
	return &TaskRequest{Req: req, Shape: r.shapes.Of(shapeKey(req))}
}

// ShapeID is a session's number for one request shape.
type ShapeID uint32

// shapeIDs numbers the request shapes of one session: a task's shape is looked up
// once, when its request is parsed, and every predicate after that compares numbers.
type shapeIDs struct {
	// mu guards ids: requests are parsed on Volcano's parallel workers.
	mu  sync.Mutex
	ids map[string]ShapeID
}

// Of returns key's number, giving it the next one the first time.
func (s *shapeIDs) Of(key string) ShapeID {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.ids[key]
	if !ok {
		if s.ids == nil {
			s.ids = map[string]ShapeID{}
		}
		id = ShapeID(len(s.ids))
		s.ids[key] = id
	}
	return id
}

// shapeKey names a request's shape: requests with equal keys fit every node alike.
// %#v quotes every string, so type lists ["A100 X"] and ["A100", "X"] differ.
func shapeKey(r *placement.Request) string { return fmt.Sprintf("%#v", *r) }
