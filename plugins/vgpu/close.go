package vgpu

import (
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"volcano.sh/apis/pkg/apis/scheduling"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
)

// OnSessionClose reports what the session left: the PodGroups of jobs kept out
// before their pods existed, and the metrics.
func (p *vgpuPlugin) OnSessionClose(ssn *framework.Session) {
	p.reportPodless(ssn)
	p.publishMetrics(ssn)
	_, _, booked := p.ledger.Counts()
	klog.V(3).InfoS("vgpu session closed", "booked", booked)
}

// publishMetrics records the session's card usage and pending vGPU tasks.
func (p *vgpuPlugin) publishMetrics(ssn *framework.Session) {
	m := p.metrics
	for _, v := range []*prometheus.GaugeVec{m.pending, m.queueMemory, m.queueCards} {
		v.Reset()
	}
	m.publishCards(p.ledger.EachCard)
	m.publishOutOfService(p.ledger.EachCard)
	m.notInCache.Set(float64(p.cacheMissing))
	m.publishClaimsSkipped(p.ledger.ClaimsSkipped())
	if p.shares != nil {
		m.publishShares(p.shares.Standings())
	}
	for _, job := range ssn.Jobs {
		for _, task := range job.TaskStatusIndex[vapi.Pending] {
			tr := p.request(task)
			if tr == nil {
				continue
			}
			reason := tr.Refused.Dominant()
			switch {
			case tr.Err != nil:
				reason = book.PendingInvalid
			case reason == book.PendingNotTried && p.refusedGang(job.UID):
				reason = book.PendingGang
			}
			m.pending.WithLabelValues(reason).Inc()
		}
	}
}

// reportPodless writes, on the PodGroup of each job the plugin kept out of the queue
// before any of its pods existed, why: Volcano's gang plugin reports only jobs that
// have pods, and a VolcanoJob has none until it is enqueued.
func (p *vgpuPlugin) reportPodless(ssn *framework.Session) {
	p.gangsRefused.Range(func(k, _ any) bool {
		job, ok := ssn.Jobs[k.(vapi.JobID)]
		if !ok || len(job.Tasks) > 0 || job.JobFitErrors == "" {
			return true
		}
		cond := &scheduling.PodGroupCondition{Type: scheduling.PodGroupUnschedulableType, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.Now(), TransitionID: string(ssn.UID), Reason: schedulingv1beta1.NotEnoughResourcesReason,
			Message: job.JobFitErrors}
		if err := ssn.UpdatePodGroupCondition(job, cond); err != nil {
			klog.ErrorS(err, "Cannot record why a VolcanoJob is not enqueued", "job", klog.KRef(job.Namespace, job.Name))
		}
		return true
	})
}
