package vgpu

import (
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/plugins/engine"
)

// onAllocate books the task's cards and writes the assignment on the session's copy
// of the pod, so that it reaches the API server on the Binding. When the cards cannot
// be booked it sets e.Err: Volcano then rolls the allocation back (every handler's
// DeallocateFunc runs) instead of binding a vGPU pod without cards.
func (p *vgpuPlugin) onAllocate(e *framework.Event) {
	task := e.Task
	p.touched(task)
	if task.Status == vapi.Pipelined {
		p.onPipeline(e)
		return
	}
	if task.Status != vapi.Allocated {
		// An evicted task restored by a discarded statement kept its cards.
		return
	}
	tr := p.request(task)
	if tr == nil {
		return
	}
	ref := klog.KRef(task.Namespace, task.Name)
	if tr.err != nil {
		// Only an action that skips the predicates gets here: never bind without cards.
		e.Err = fmt.Errorf("%s: task %s has no valid vGPU request: %w", PluginName, ref, tr.err)
		return
	}
	defer p.metrics.timed("allocate", time.Now())
	l := p.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.nodes[task.NodeName]
	if !ok {
		e.Err = fmt.Errorf("%s: task %s was allocated to node %s, which has no usable vGPU inventory", PluginName, ref, task.NodeName)
		klog.ErrorS(e.Err, "Refusing the allocation")
		return
	}
	fit, ferr := engine.FitPod(n, tr.req)
	if ferr != nil {
		e.Err = fmt.Errorf("%s: task %s no longer fits the cards of node %s: %w", PluginName, ref, n.Name, ferr)
		klog.ErrorS(e.Err, "Refusing the allocation", "detail", ferr.Detail())
		return
	}
	if err := n.Reserve(fit.Containers, tr.req.Options.QoS); err != nil {
		e.Err = fmt.Errorf("%s: reserving cards on node %s for task %s: %w", PluginName, n.Name, ref, err)
		klog.ErrorS(e.Err, "Refusing the allocation")
		return
	}
	l.version[n.Name]++
	a := &api.PodAssignment{Version: api.AssignmentVersion, Node: n.Name, QoS: tr.req.Options.QoS, Containers: fit.Containers}
	encoded, err := api.EncodeAssignment(a)
	if err != nil {
		n.Release(fit.Containers, tr.req.Options.QoS)
		e.Err = fmt.Errorf("%s: encoding the assignment of task %s: %w", PluginName, ref, err)
		klog.ErrorS(e.Err, "Refusing the allocation")
		return
	}
	original := task.Pod
	pod := original.DeepCopy()
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	now := p.now()
	pod.Annotations[api.AnnotationAssignment] = encoded
	pod.Annotations[api.AnnotationAssignedAt] = strconv.FormatInt(now.UnixNano(), 10)
	pod.Annotations[api.AnnotationHandoff] = api.HandoffPending
	if p.args.VolcanoCompat {
		ids := api.EncodeVolcanoPodDevices(a)
		pod.Annotations[api.VolcanoAssignedIDs] = ids
		pod.Annotations[api.VolcanoDevicesToAllocate] = ids
		pod.Annotations[api.VolcanoAssignedNode] = n.Name
		pod.Annotations[api.VolcanoAssignedTime] = strconv.FormatInt(now.Unix(), 10)
		pod.Annotations[api.VolcanoBindPhase] = api.VolcanoBindPhaseAllocating
		pod.Annotations[api.VolcanoBindTime] = strconv.FormatInt(now.Unix(), 10)
	}
	task.Pod = pod
	l.booked[task.UID] = &booking{node: n.Name, containers: fit.Containers, qos: tr.req.Options.QoS, original: original}
	p.store.put(types.UID(task.UID), a, now)
	klog.V(4).InfoS("vGPU cards assigned", "task", ref, "node", n.Name, "assignment", encoded)
}

// onDeallocate gives back the cards of an allocation that is rolled back.
func (p *vgpuPlugin) onDeallocate(e *framework.Event) {
	task := e.Task
	p.touched(task)
	p.unpipeline(task.UID)
	if task.Status == vapi.Releasing {
		// An evicted pod holds its cards until it is gone; a later session sees that.
		return
	}
	l := p.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.booked[task.UID]
	if !ok {
		return
	}
	l.version[b.node]++
	if n, ok := l.nodes[b.node]; ok {
		for _, err := range n.Release(b.containers, b.qos) {
			klog.ErrorS(err, "Releasing vGPU cards", "task", klog.KRef(task.Namespace, task.Name))
		}
	}
	task.Pod = b.original
	delete(l.booked, task.UID)
	p.store.delete(types.UID(task.UID))
	klog.V(4).InfoS("vGPU cards released", "task", klog.KRef(task.Namespace, task.Name), "node", b.node)
}

// touched marks the node of a vGPU task whose state changed, so that preempt and
// reclaim look at the node's tasks again.
func (p *vgpuPlugin) touched(task *vapi.TaskInfo) {
	if p.ledger != nil && task.NodeName != "" && p.request(task) != nil {
		p.ledger.touch(task.NodeName)
	}
}
