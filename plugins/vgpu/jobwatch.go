package vgpu

import (
	"sync"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	vcclient "volcano.sh/apis/pkg/client/clientset/versioned"
	vcinformers "volcano.sh/apis/pkg/client/informers/externalversions"
	batchlisters "volcano.sh/apis/pkg/client/listers/batch/v1alpha1"
)

// jobTemplates watches VolcanoJobs for one scheduler process. It starts on the first
// session that has a Volcano client and answers nothing until its cache has synced:
// until then the plugin counts the pods it sees, as without it.
type jobTemplates struct {
	// once starts the watch; lister and synced are set under it and read-only after.
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
