package vgpu

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	"volcano.sh/apis/pkg/apis/scheduling"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	vcclient "volcano.sh/apis/pkg/client/clientset/versioned"
	vcinformers "volcano.sh/apis/pkg/client/informers/externalversions"
	batchlisters "volcano.sh/apis/pkg/client/listers/batch/v1alpha1"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"
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

// jobTemplates watches VolcanoJobs for one scheduler process. It starts on the first
// session that has a Volcano client and answers nothing until its cache has synced:
// until then the plugin counts the pods it sees, as without it.
type jobTemplates struct {
	once   sync.Once
	lister batchlisters.JobLister
	synced cache.InformerSynced
	stop   chan struct{}
}

func newJobTemplates() *jobTemplates { return &jobTemplates{stop: make(chan struct{})} }

// start begins watching VolcanoJobs through client, once.
func (j *jobTemplates) start(client vcclient.Interface) {
	if client == nil {
		return
	}
	j.once.Do(func() {
		f := vcinformers.NewSharedInformerFactory(client, 0)
		inf := f.Batch().V1alpha1().Jobs()
		// Only the task templates are read: drop what grows with the job's life.
		if err := inf.Informer().SetTransform(trimJob); err != nil {
			klog.ErrorS(err, "VolcanoJob cache keeps whole objects")
		}
		j.lister, j.synced = inf.Lister(), inf.Informer().HasSynced
		f.Start(j.stop)
		klog.V(2).InfoS("Watching VolcanoJobs for the card demand of members not yet created")
	})
}

// close stops the watch (tests; the scheduler's lives as long as the process).
func (j *jobTemplates) close() {
	select {
	case <-j.stop:
	default:
		close(j.stop)
	}
}

func trimJob(obj interface{}) (interface{}, error) {
	if job, ok := obj.(*batchv1alpha1.Job); ok {
		job.ManagedFields = nil
		job.Status = batchv1alpha1.JobStatus{State: job.Status.State}
	}
	return obj, nil
}

// get returns the VolcanoJob, or false when it is not known (yet).
func (j *jobTemplates) get(namespace, name string) (*batchv1alpha1.Job, bool) {
	if j == nil || j.lister == nil || !j.synced() {
		return nil, false
	}
	job, err := j.lister.Jobs(namespace).Get(name)
	return job, err == nil
}

// count is how many VolcanoJobs the cache holds (for tests and logs).
func (j *jobTemplates) count() int {
	if j == nil || j.lister == nil || !j.synced() {
		return 0
	}
	jobs, _ := j.lister.List(labels.Everything())
	return len(jobs)
}

// unseenMembers is what the members of a VolcanoJob whose pods the session does not
// see yet ask for: vgpu lists one request per such vGPU member, others counts the
// members without vGPU requests. Only a job whose PodGroup is Pending or Inqueue
// (its pods not all created) has unseen members; a template the plugin cannot read
// counts for nothing here (its pods will carry the error).
type unseenMembers struct {
	vgpu   []*taskRequest
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
		r, err := p.args.Request(pod)
		if err != nil {
			klog.V(4).InfoS("VolcanoJob task template has no valid vGPU request; its demand counts once its pods exist",
				"job", klog.KRef(vj.Namespace, vj.Name), "task", spec.Name, "err", err)
			continue
		}
		r.GangSize = int(job.MinAvailable)
		tr := &taskRequest{req: r, shape: p.shapes.of(shapeKey(r))}
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
