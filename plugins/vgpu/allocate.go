package vgpu

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
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
	if tr.Err != nil {
		// Only an action that skips the predicates gets here: never bind without cards.
		e.Err = fmt.Errorf("%s: task %s has no valid vGPU request: %w", PluginName, ref, tr.Err)
		return
	}
	defer p.metrics.timed("allocate", time.Now())
	original := task.Pod
	containers, err := p.ledger.Book(task.UID, task.NodeName, tr.Req, original)
	if err != nil {
		e.Err = fmt.Errorf("%s: task %s: %w", PluginName, ref, err)
		var ferr *placement.FitError
		if errors.As(err, &ferr) {
			klog.ErrorS(e.Err, "Refusing the allocation", "detail", ferr.Detail())
		} else {
			klog.ErrorS(e.Err, "Refusing the allocation")
		}
		return
	}
	node := task.NodeName
	a := &api.PodAssignment{Version: api.AssignmentVersion, Node: node, QoS: tr.Req.Options.QoS, Containers: containers}
	encoded, err := api.EncodeAssignment(a)
	if err != nil {
		p.ledger.Release(task.UID)
		e.Err = fmt.Errorf("%s: encoding the assignment of task %s: %w", PluginName, ref, err)
		klog.ErrorS(e.Err, "Refusing the allocation")
		return
	}
	pod := original.DeepCopy()
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	now := p.now()
	pod.Annotations[api.AnnotationAssignment] = encoded
	pod.Annotations[api.AnnotationAssignedAt] = strconv.FormatInt(now.UnixNano(), 10)
	pod.Annotations[api.AnnotationHandoff] = api.HandoffPending
	// Volcano's grammar cannot name a MIG device: an agent reading it would hand out
	// the whole parent card, so a MIG assignment travels in Tessera's annotation only.
	if p.args.VolcanoCompat && !hasMIG(containers) {
		ids := api.EncodeVolcanoPodDevices(a)
		pod.Annotations[api.VolcanoAssignedIDs] = ids
		pod.Annotations[api.VolcanoDevicesToAllocate] = ids
		pod.Annotations[api.VolcanoAssignedNode] = node
		pod.Annotations[api.VolcanoAssignedTime] = strconv.FormatInt(now.Unix(), 10)
		pod.Annotations[api.VolcanoBindPhase] = api.VolcanoBindPhaseAllocating
		pod.Annotations[api.VolcanoBindTime] = strconv.FormatInt(now.Unix(), 10)
	}
	if p.signer != nil {
		key, ok := p.signer.Key()
		if !ok {
			p.ledger.Release(task.UID)
			e.Err = fmt.Errorf("%s: task %s: no assignment signing key has been read yet; the node agents would refuse an unsigned assignment", PluginName, ref)
			klog.ErrorS(e.Err, "Refusing the allocation")
			return
		}
		pod.Annotations[api.AnnotationAssignmentSignature] = key.SignPod(pod, node)
	}
	task.Pod = pod
	p.inFlight.Put(types.UID(task.UID), a, now)
	p.metrics.placed(original.CreationTimestamp.Time, now)
	klog.V(4).InfoS("vGPU cards assigned", "task", ref, "node", node, "assignment", encoded)
}

// onPipeline refuses to pipeline a vGPU task onto a node whose cards will not take it
// once the pods being evicted there are gone (Volcano pipelines when CPU, memory and
// slots fit, cards unseen); a refused pipeline is rolled back by Volcano. An accepted
// one keeps its cards in view for the other pipelines of the session.
func (p *vgpuPlugin) onPipeline(e *framework.Event) {
	task := e.Task
	tr := p.request(task)
	if tr == nil || p.ssn == nil {
		return
	}
	ref := klog.KRef(task.Namespace, task.Name)
	if tr.Err != nil {
		e.Err = fmt.Errorf("%s: task %s has no valid vGPU request: %w", PluginName, ref, tr.Err)
		return
	}
	node, ok := p.ssn.Nodes[task.NodeName]
	if !ok {
		e.Err = fmt.Errorf("%s: task %s pipelined to unknown node %s", PluginName, ref, task.NodeName)
		return
	}
	n := p.futureNode(node)
	if n == nil {
		e.Err = fmt.Errorf("%s: task %s pipelined to node %s, which has no usable vGPU inventory", PluginName, ref, task.NodeName)
		return
	}
	fit, ferr := placement.FitPod(n, tr.Req)
	if ferr != nil {
		e.Err = fmt.Errorf("%s: task %s will not fit the cards of node %s even once its evicted pods are gone: %w", PluginName,
			ref, task.NodeName, ferr)
		klog.V(3).InfoS("Refusing to pipeline a vGPU task", "err", e.Err)
		p.metrics.pipelinesRefused.Inc()
		return
	}
	p.pipelined.Add(task.UID, book.PipelinedFit{Node: task.NodeName, Containers: fit.Containers, Tenancy: tr.Req.Tenancy()})
}

// onDeallocate gives back the cards of an allocation that is rolled back.
func (p *vgpuPlugin) onDeallocate(e *framework.Event) {
	task := e.Task
	p.touched(task)
	p.pipelined.Remove(task.UID)
	if task.Status == vapi.Releasing {
		// An evicted pod holds its cards until it is gone; a later session sees that.
		return
	}
	b, ok := p.ledger.Release(task.UID)
	if !ok {
		return
	}
	task.Pod = b.Original
	p.inFlight.Delete(types.UID(task.UID))
	klog.V(4).InfoS("vGPU cards released", "task", klog.KRef(task.Namespace, task.Name), "node", b.Node)
}

// touched marks the node of a vGPU task whose state changed, so that preempt and
// reclaim look at the node's tasks again.
func (p *vgpuPlugin) touched(task *vapi.TaskInfo) {
	if p.ledger != nil && task.NodeName != "" && p.request(task) != nil {
		p.ledger.Touch(task.NodeName)
	}
}

// hasMIG reports whether an assignment names a MIG instance.
func hasMIG(cs []api.ContainerAssignment) bool {
	for _, c := range cs {
		for _, card := range c.Cards {
			if card.IsMIG() {
				return true
			}
		}
	}
	return false
}
