package vgpu

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	"volcano.sh/apis/pkg/apis/scheduling"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
)

// The demand of VolcanoJob members whose pods do not exist yet. Volcano's job
// controller creates a VolcanoJob's pods only once its PodGroup has left Pending, and
// then at the controller's pace; until then the session sees the job but nothing of
// what its members ask of the cards (a PodGroup's minResources leaves out resources a
// template sets only as limits, as vGPU requests are). Counting only the pods that
// exist, the queue shares of a burst were divided among the jobs that happened to be
// enqueued first: a queue of weight 1 filled past its share with gangs no reclaim may
// take back before the others' pods appeared. The plugin therefore reads the missing
// members' requests from the job's task templates.

// unseenMembers is what the members of a VolcanoJob whose pods the session does not
// see yet ask for: vgpu lists one request per such vGPU member, others counts the
// members without vGPU requests. Only a job whose PodGroup is Pending or Inqueue
// (its pods not all created) has unseen members; a template the plugin cannot read
// counts for nothing here (its pods will carry the error).
type unseenMembers struct {
	vgpu   []*book.TaskRequest
	others int
}

// unseen returns the job's unseen members, remembered for the session.
func (p *vgpuPlugin) unseen(job *vapi.JobInfo) unseenMembers {
	if p.templates == nil || job == nil || job.PodGroup == nil {
		return unseenMembers{}
	}
	if v, ok := p.unseenByJob.Load(job.UID); ok {
		return v.(unseenMembers)
	}
	u := p.readUnseen(job)
	p.unseenByJob.Store(job.UID, u)
	return u
}

func (p *vgpuPlugin) readUnseen(job *vapi.JobInfo) unseenMembers {
	var u unseenMembers
	switch job.PodGroup.Status.Phase {
	case scheduling.PodGroupPending, scheduling.PodGroupInqueue, "":
	default:
		return u
	}
	owner := volcanoJobOwner(job.PodGroup.OwnerReferences)
	if owner == "" {
		return u
	}
	vj, ok := p.templates.get(job.Namespace, owner)
	if !ok || vj.Status.State.Phase != "" && vj.Status.State.Phase != batchv1alpha1.Pending {
		return u
	}
	seen := map[string]int{}
	for _, t := range job.Tasks {
		if t.Pod != nil {
			seen[t.Pod.Annotations[batchv1alpha1.TaskSpecKey]]++
		}
	}
	for i := range vj.Spec.Tasks {
		spec := &vj.Spec.Tasks[i]
		missing := int(spec.Replicas) - seen[spec.Name]
		if missing <= 0 {
			continue
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: vj.Namespace, Name: vj.Name + "-" + spec.Name,
			Annotations: spec.Template.Annotations, Labels: spec.Template.Labels}, Spec: spec.Template.Spec}
		if !p.args.Resources.HasVGPURequest(pod) {
			u.others += missing
			continue
		}
		tr, err := p.requests.Template(pod, int(job.MinAvailable))
		if err != nil {
			klog.V(4).InfoS("VolcanoJob task template has no valid vGPU request; its demand counts once its pods exist",
				"job", klog.KRef(vj.Namespace, vj.Name), "task", spec.Name, "err", err)
			continue
		}
		for k := 0; k < missing; k++ {
			u.vgpu = append(u.vgpu, tr)
		}
	}
	return u
}

// volcanoJobOwner is the name of the VolcanoJob controlling a PodGroup, or "".
func volcanoJobOwner(refs []metav1.OwnerReference) string {
	for _, r := range refs {
		if r.Kind == "Job" && r.APIVersion == batchv1alpha1.SchemeGroupVersion.String() && r.Controller != nil && *r.Controller {
			return r.Name
		}
	}
	return ""
}
