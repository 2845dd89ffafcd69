// Package workload builds VolcanoJobs for the scenarios and checks what the cluster did
// with them: where pods landed, what each container received, and the card ledger.
package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/kubelet"
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
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}
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
	return fmt.Sprint(len(pods), " pods ", m)
}

// Records reads every container record the kubelet stand-ins wrote, by pod UID/container.
func Records(nodeRecordDirs []string) (map[string]kubelet.Record, error) {
	out := map[string]kubelet.Record{}
	for _, dir := range nodeRecordDirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			var r kubelet.Record
			if err := json.Unmarshal(b, &r); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			out[r.UID+"/"+r.Container] = r
		}
	}
	return out, nil
}

// CheckHandoff compares what a running pod's containers received with its assignment:
// node, visible cards, memory limit and SM limit, in the environment and in the limits
// file, and the kubelet's slot IDs. It returns every mismatch.
func CheckHandoff(p corev1.Pod, records map[string]kubelet.Record) []string {
	var bad []string
	fail := func(f string, a ...any) {
		bad = append(bad, fmt.Sprintf("%s/%s: ", p.Namespace, p.Name)+fmt.Sprintf(f, a...))
	}
	raw := p.Annotations[api.AnnotationAssignment]
	if raw == "" {
		fail("no %s annotation", api.AnnotationAssignment)
		return bad
	}
	a, err := api.DecodeAssignment(raw)
	if err != nil {
		fail("%v", err)
		return bad
	}
	if a.Node != p.Spec.NodeName {
		fail("assignment names node %q, pod is on %q", a.Node, p.Spec.NodeName)
	}
	if h := p.Annotations[api.AnnotationHandoff]; h != api.HandoffDone {
		fail("%s is %q, want done", api.AnnotationHandoff, h)
	}
	for _, ca := range a.Containers {
		r, ok := records[string(p.UID)+"/"+ca.Name]
		if !ok {
			fail("container %s: no kubelet record", ca.Name)
			continue
		}
		if r.UID != string(p.UID) || r.Node != p.Spec.NodeName {
			fail("container %s: record is for uid %s on %s", ca.Name, r.UID, r.Node)
		}
		want := map[string]string{}
		for _, c := range ca.Cards {
			cores := c.Cores
			if cores == 0 {
				cores = 100
			}
			want[c.UUID] = fmt.Sprintf("%d/%d", c.MemoryMiB, cores)
		}
		for src, env := range map[string]map[string]string{"env": r.Env, "limits file": r.LimitsFile} {
			got, err := perCard(env)
			if err != nil {
				fail("container %s %s: %v", ca.Name, src, err)
			} else if !equal(got, want) {
				fail("container %s %s: got %v, assignment %v", ca.Name, src, got, want)
			}
		}
		slotCards := map[string]bool{}
		for _, id := range r.DeviceIDs {
			uuid, _, _ := strings.Cut(id, "::")
			slotCards[uuid] = true
		}
		if len(slotCards) != len(want) || len(r.DeviceIDs) != len(want) {
			fail("container %s: kubelet slots %v for cards %v", ca.Name, r.DeviceIDs, keys(want))
		}
		for u := range want {
			if !slotCards[u] {
				fail("container %s: kubelet slots %v miss card %s", ca.Name, r.DeviceIDs, u)
			}
		}
	}
	return bad
}

func perCard(env map[string]string) (map[string]string, error) {
	uuids := split(env[api.EnvVisibleUUIDs])
	mem, sm := split(env[api.EnvMemoryLimitMiB]), split(env[api.EnvSMLimit])
	if len(uuids) == 0 || len(mem) != len(uuids) || len(sm) != len(uuids) {
		return nil, fmt.Errorf("%s=%q %s=%q %s=%q", api.EnvVisibleUUIDs, env[api.EnvVisibleUUIDs],
			api.EnvMemoryLimitMiB, env[api.EnvMemoryLimitMiB], api.EnvSMLimit, env[api.EnvSMLimit])
	}
	out := map[string]string{}
	for i, u := range uuids {
		out[u] = mem[i] + "/" + sm[i]
	}
	return out, nil
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
