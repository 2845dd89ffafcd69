package scale

import (
	"fmt"
	"math/rand"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/tessera-gpu/tessera/api"
)

// Queue is one Volcano queue of the workload.
type Queue struct {
	Name   string
	Weight int32
}

// Queues are the workload's three queues, weighted 1:2:3.
var Queues = []Queue{{"team-a", 1}, {"team-b", 2}, {"team-c", 3}}

// Namespace holds every job of the run.
const Namespace = "scale"

// JobSpec is one generated VolcanoJob: Replicas identical pods, all of them its gang.
type JobSpec struct {
	Name     string
	Queue    string
	Replicas int
	// CPUOnly jobs ask for no card.
	CPUOnly bool
	// Per pod: cards, and per card memory (MiB or percent) and cores (percent).
	Cards, MemMiB, MemPct, Cores int
	// TypeFilter, when set, is the model substring the pods must run on
	// (nvidia.com/use-gputype, which Tessera and deviceshare both read).
	TypeFilter string
	// Per pod CPU (millicores) and host memory (MiB).
	CPUMilli, HostMiB int
	// DRA jobs ask for their cards through the ResourceClaimTemplate named after the
	// job (ClaimTemplate) where the run gives them DRA nodes (MarkDRA).
	DRA bool
}

// Pods is how many pods the job makes.
func (j JobSpec) Pods() int { return j.Replicas }

// CardShare is what one pod of the job takes of the cards, in card cores (100 = one
// card's SMs) and MiB; zero for a CPU-only job.
func (j JobSpec) CardShare() (cores, mib float64) {
	if j.CPUOnly {
		return 0, 0
	}
	mem := float64(j.MemMiB)
	if j.MemMiB == 0 {
		mem = float64(j.MemPct) * CardMiB / 100
	}
	return float64(j.Cards * j.Cores), float64(j.Cards) * mem
}

// Generate returns n jobs drawn from seed: gangs of 1 to 8 pods, cpuOnly of them
// (a fraction) CPU-only; the rest in five shapes (small slices of a card in MiB, a
// quarter or half card in percent, a whole card, two half cards, four whole cards),
// one in five with a type filter; queues taken in turn. The same seed gives the same
// jobs, so every scheduler of a run sees one workload.
func Generate(n int, seed int64, cpuOnly float64) []JobSpec {
	rng := rand.New(rand.NewSource(seed))
	out := make([]JobSpec, n)
	for i := range out {
		j := JobSpec{Name: fmt.Sprintf("job-%05d", i), Queue: Queues[i%len(Queues)].Name, Replicas: 1 + rng.Intn(8),
			CPUMilli: 500 * (1 + rng.Intn(4)), HostMiB: 1024 * (1 + rng.Intn(8))}
		if rng.Float64() < cpuOnly {
			j.CPUOnly = true
			out[i] = j
			continue
		}
		switch r := rng.Float64(); {
		case r < 0.40:
			j.Cards, j.MemMiB, j.Cores = 1, 8192+4096*rng.Intn(5), 10+5*rng.Intn(5)
		case r < 0.60:
			pct := 25 * (1 + rng.Intn(2))
			j.Cards, j.MemPct, j.Cores = 1, pct, pct
		case r < 0.85:
			j.Cards, j.MemPct, j.Cores = 1, 100, 100
		case r < 0.95:
			j.Cards, j.MemPct, j.Cores = 2, 50, 50
		default:
			j.Cards, j.MemPct, j.Cores = 4, 100, 100
			j.Replicas = 1 + rng.Intn(2)
		}
		if rng.Float64() < 0.2 {
			j.TypeFilter = "A100"
			if rng.Intn(3) == 0 {
				j.TypeFilter = "H100"
			}
		}
		out[i] = j
	}
	return out
}

// VolcanoJob is the job as submitted. withCards false leaves out every vGPU resource
// and filter: the floor run, where Volcano places the same pods by CPU and memory only.
// A DRA job with cards references its claim template instead of the vGPU resources.
func (j JobSpec) VolcanoJob(withCards bool) *batchv1alpha1.Job {
	ctr := corev1.Container{Name: "main", Image: "scale/worker", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(j.CPUMilli), resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(int64(j.HostMiB)<<20, resource.BinarySI),
		}, Limits: corev1.ResourceList{}}}
	ann := map[string]string{}
	var claims []corev1.PodResourceClaim
	if withCards && !j.CPUOnly && j.DRA {
		ctr.Resources.Claims = []corev1.ResourceClaim{{Name: ClaimName}}
		claims = []corev1.PodResourceClaim{{Name: ClaimName, ResourceClaimTemplateName: ptr(j.Name)}}
	} else if withCards && !j.CPUOnly {
		set := func(name string, v int) {
			if v > 0 {
				ctr.Resources.Limits[corev1.ResourceName(name)] = *resource.NewQuantity(int64(v), resource.DecimalSI)
			}
		}
		set(api.ResourceNumber, j.Cards)
		set(api.ResourceMemory, j.MemMiB)
		set(api.ResourceMemoryPercentage, j.MemPct)
		set(api.ResourceCores, j.Cores)
		if j.TypeFilter != "" {
			ann[api.NvidiaUseGPUType] = j.TypeFilter
		}
	}
	n := int32(j.Replicas)
	return &batchv1alpha1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: j.Name},
		Spec: batchv1alpha1.JobSpec{SchedulerName: "volcano", Queue: j.Queue, MinAvailable: n,
			Tasks: []batchv1alpha1.TaskSpec{{Name: "worker", Replicas: n, Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: ann},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{ctr},
					ResourceClaims: claims},
			}}}},
	}
}
