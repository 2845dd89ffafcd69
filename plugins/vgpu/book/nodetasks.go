package book

import (
	vapi "volcano.sh/volcano/pkg/scheduler/api"
)

// NodeTasks is one node's vGPU tasks as preempt and reclaim look at them for every
// pending task: those running (eviction candidates, with their UID hashes) and those
// being evicted. It is built once per state of the node: the plugin's event handlers
// Touch the node whenever a vGPU task there is allocated, pipelined, evicted or
// restored, and the count of the node's tasks guards against any other change
// (evictmemo.go). A built value is never modified, so readers share it without a lock.
type NodeTasks struct {
	epoch   uint64
	count   int
	Running []RunningTask
	// Releasing names the set of vGPU tasks being evicted (XOR of their hashes);
	// AnyReleasing says whether there is one.
	Releasing    uint64
	AnyReleasing bool
}

// RunningTask is a running vGPU task, an eviction candidate.
type RunningTask struct {
	Task *vapi.TaskInfo
	Job  *vapi.JobInfo // nil when the session does not know it
	Hash uint64
}

func buildNodeTasks(node *vapi.NodeInfo, jobs map[vapi.JobID]*vapi.JobInfo, epoch uint64, isVGPU func(*vapi.TaskInfo) bool) *NodeTasks {
	nt := &NodeTasks{epoch: epoch, count: len(node.Tasks)}
	for _, t := range node.Tasks {
		switch {
		case t.Status != vapi.Running && t.Status != vapi.Releasing:
		case !isVGPU(t):
		case t.Status == vapi.Releasing:
			nt.AnyReleasing = true
			nt.Releasing ^= uidHash(t.UID) * 3
		default:
			nt.Running = append(nt.Running, RunningTask{Task: t, Job: jobs[t.Job], Hash: uidHash(t.UID)})
		}
	}
	return nt
}

// uidHash spreads a task's UID over 64 bits; XOR over a set names the set.
func uidHash(uid vapi.TaskID) uint64 {
	// FNV-1a, inline: the predicate hashes every candidate of every node it is asked about.
	h := uint64(14695981039346656037)
	for i := 0; i < len(uid); i++ {
		h ^= uint64(uid[i])
		h *= 1099511628211
	}
	return h
}
