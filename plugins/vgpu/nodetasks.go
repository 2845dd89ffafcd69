package vgpu

import (
	vapi "volcano.sh/volcano/pkg/scheduler/api"
)

// nodeTasks is one node's vGPU tasks as preempt and reclaim look at them for every
// pending task: those running (eviction candidates, with their UID hashes) and those
// being evicted. It is built once per state of the node: the plugin's event handlers
// bump the node's epoch whenever a vGPU task there is allocated, pipelined, evicted
// or restored, and the count of the node's tasks guards against any other change.
// A built value is never modified, so readers share it without a lock.
type nodeTasks struct {
	epoch   uint64
	count   int
	running []runningTask
	// releasing names the set of vGPU tasks being evicted (XOR of their hashes);
	// anyReleasing says whether there is one.
	releasing    uint64
	anyReleasing bool
}

type runningTask struct {
	task *vapi.TaskInfo
	job  *vapi.JobInfo // nil when the session does not know it
	hash uint64
}

func buildNodeTasks(node *vapi.NodeInfo, jobs map[vapi.JobID]*vapi.JobInfo, epoch uint64, isVGPU func(*vapi.TaskInfo) bool) *nodeTasks {
	nt := &nodeTasks{epoch: epoch, count: len(node.Tasks)}
	for _, t := range node.Tasks {
		switch {
		case t.Status != vapi.Running && t.Status != vapi.Releasing:
		case !isVGPU(t):
		case t.Status == vapi.Releasing:
			nt.anyReleasing = true
			nt.releasing ^= uidHash(t.UID) * 3
		default:
			nt.running = append(nt.running, runningTask{task: t, job: jobs[t.Job], hash: uidHash(t.UID)})
		}
	}
	return nt
}

// nodeTasks returns the node's vGPU tasks, built again only when the node changed.
func (l *ledger) nodeTasks(node *vapi.NodeInfo, jobs map[vapi.JobID]*vapi.JobInfo, isVGPU func(*vapi.TaskInfo) bool) *nodeTasks {
	l.mu.RLock()
	e, ok := l.entries[node.Name]
	l.mu.RUnlock()
	if !ok {
		return buildNodeTasks(node, jobs, 0, isVGPU)
	}
	slot := &e.evicts
	epoch := slot.epoch.Load()
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if nt := slot.tasks; nt != nil && nt.epoch == epoch && nt.count == len(node.Tasks) {
		return nt
	}
	slot.tasks = buildNodeTasks(node, jobs, epoch, isVGPU)
	return slot.tasks
}

// touch records that a vGPU task on the node changed state in this session.
func (l *ledger) touch(node string) {
	l.mu.RLock()
	e, ok := l.entries[node]
	l.mu.RUnlock()
	if ok {
		e.evicts.epoch.Add(1)
	}
}
