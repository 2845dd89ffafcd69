package vgpu

import (
	"time"

	vapi "volcano.sh/volcano/pkg/scheduler/api"
)

// nodeOrder scores a node by where the task's cards would go, × vgpu.Weight; 0 for
// other tasks. The score is the predicate's, remembered by the ledger.
func (p *vgpuPlugin) nodeOrder(task *vapi.TaskInfo, node *vapi.NodeInfo) (float64, error) {
	tr := p.request(task)
	if tr == nil && p.draOrder != nil {
		// A pod whose cards come through claims: scored on DRA nodes (draorder.go).
		if s, ok := p.draOrder.score(task, node.Name); ok {
			return s * p.args.Weight, nil
		}
		return 0, nil
	}
	if tr == nil || tr.Err != nil {
		return 0, nil
	}
	defer p.metrics.timed("node_order", time.Now())
	s, ok := p.ledger.CachedScore(node.Name, tr.Shape, tr.Req)
	if !ok {
		return 0, nil
	}
	return s * p.args.Weight, nil
}
