// Package workload builds VolcanoJobs for the scenarios and checks what the cluster did
// with them: where pods landed, what each container received, and the card ledger.
package workload

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/tessera-gpu/tessera/api"
)

// Container is one container's vGPU request. Zero fields are left out of the limits.
type Container struct {
	Name                  string
	Cards, MemMiB, MemPct int
	Cores                 int
	CPUOnly               bool
	SleepSeconds          int // 0: runs until deleted
}

// Task is one task of a job.
type Task struct {
	Name        string
	Replicas    int32
	Containers  []Container
	Annotations map[string]string
}

// Every container requests this much CPU and memory: every kubelet on this machine reports
// the machine's own capacity (2 CPUs, 24 GiB on the project's machines), so a request
// sized for a real node would let only a handful of pods onto each simulated one.
const (
	RequestCPU    = "10m"
	RequestMemory = "16Mi"
)

// Job returns a VolcanoJob for Volcano's scheduler in the queue, spelled out as the
// samples do. An empty queue and a zero minAvailable are left to Volcano's admission
// webhook, which also fills in a missing schedulerName.
func Job(ns, name, queue string, minAvailable int32, tasks ...Task) *batchv1alpha1.Job {
	j := &batchv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1alpha1.JobSpec{SchedulerName: "volcano", Queue: queue, MinAvailable: minAvailable}}
	for _, t := range tasks {
		spec := corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever}
		for _, c := range t.Containers {
			ctr := corev1.Container{Name: c.Name, Image: "busybox", Command: []string{"sleep", "infinity"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse(RequestCPU), corev1.ResourceMemory: resource.MustParse(RequestMemory)}}}
			if c.SleepSeconds > 0 {
				ctr.Command = []string{"sleep", strconv.Itoa(c.SleepSeconds)}
			}
			set := func(name string, v int) {
				if v > 0 {
					ctr.Resources.Limits[corev1.ResourceName(name)] = *resource.NewQuantity(int64(v), resource.DecimalSI)
				}
			}
			if !c.CPUOnly {
				set(api.ResourceNumber, c.Cards)
				set(api.ResourceMemory, c.MemMiB)
				set(api.ResourceMemoryPercentage, c.MemPct)
				set(api.ResourceCores, c.Cores)
			}
			spec.Containers = append(spec.Containers, ctr)
		}
		j.Spec.Tasks = append(j.Spec.Tasks, batchv1alpha1.TaskSpec{Name: t.Name, Replicas: t.Replicas,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: t.Annotations}, Spec: spec}})
	}
	return j
}

// Pods lists the pods of a job (label volcano.sh/job-name).
func Pods(ctx context.Context, c kubernetes.Interface, ns, job string) ([]corev1.Pod, error) {
	l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "volcano.sh/job-name=" + job})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// WaitPods polls until cond holds for the job's pods or the timeout passes.
func WaitPods(ctx context.Context, c kubernetes.Interface, ns, job string, timeout time.Duration, cond func([]corev1.Pod) bool) ([]corev1.Pod, error) {
	deadline := time.Now().Add(timeout)
	for {
		pods, err := Pods(ctx, c, ns, job)
		if err == nil && cond(pods) {
			return pods, nil
		}
		if time.Now().After(deadline) {
			return pods, fmt.Errorf("job %s/%s: condition not met after %s (%s)", ns, job, timeout, Summary(pods))
		}
		select {
		case <-ctx.Done():
			return pods, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// AllPhase is a WaitPods condition: n pods, all in the phase.
func AllPhase(n int, phase corev1.PodPhase) func([]corev1.Pod) bool {
	return func(pods []corev1.Pod) bool {
		if len(pods) != n {
			return false
		}
		for _, p := range pods {
			if p.Status.Phase != phase {
				return false
			}
		}
		return true
	}
}

// Summary counts pods by phase (and bound or not), for error messages.
func Summary(pods []corev1.Pod) string {
	m := map[string]int{}
	for _, p := range pods {
		k := string(p.Status.Phase)
		if p.Spec.NodeName == "" {
			k += "/unbound"
		}
		m[k]++
	}
	out := fmt.Sprint(len(pods), " pods ", m)
	shown := 0
	for _, p := range pods {
		if p.Status.Phase != corev1.PodFailed || shown == 3 {
			continue
		}
		shown++
		out += fmt.Sprintf("; failed %s on %s: %s", p.Name, p.Spec.NodeName, failure(p))
	}
	return out
}

// failure says why a pod failed: the kubelet's reason and message, or its containers' exits.
func failure(p corev1.Pod) string {
	why := strings.TrimSpace(p.Status.Reason + " " + p.Status.Message)
	for _, c := range p.Status.ContainerStatuses {
		if t := c.State.Terminated; t != nil && t.ExitCode != 0 {
			why += fmt.Sprintf(" container %s exited %d (%s %s)", c.Name, t.ExitCode, t.Reason, t.Message)
		}
	}
	if why == "" {
		return "no reason recorded"
	}
	return strings.TrimSpace(why)
}
