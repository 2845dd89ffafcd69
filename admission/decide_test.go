package admission

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// vgpuPod is a Deployment-made pod asking, per container, for the given limits.
func vgpuPod(ann map[string]string, limits ...map[string]int64) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", GenerateName: "infer-7d9f-", Annotations: ann},
		Spec: corev1.PodSpec{SchedulerName: corev1.DefaultSchedulerName}}
	for i, l := range limits {
		c := corev1.Container{Name: []string{"main", "side", "third"}[i], Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}
		for k, v := range l {
			c.Resources.Limits[corev1.ResourceName(k)] = *resource.NewQuantity(v, resource.DecimalSI)
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	return p
}

func cpuPod() *corev1.Pod {
	p := vgpuPod(nil, map[string]int64{"cpu": 2})
	return p
}

var half = map[string]int64{api.ResourceNumber: 1, api.ResourceMemoryPercentage: 50, api.ResourceCores: 50}

// regionOps is the end of the patch of a pod with one vGPU container and no volumes:
// its region volume and the container's mount (region_test.go tests them in depth).
func regionOps() string {
	vol, _ := json.Marshal(api.RegionVolume(1))
	mount, _ := json.Marshal(api.RegionVolumeMount())
	return `{"op":"add","path":"/spec/volumes","value":[` + string(vol) + `]},` +
		`{"op":"add","path":"/spec/containers/0/volumeMounts","value":[` + string(mount) + `]}]`
}

func TestMutate(t *testing.T) {
	p := NewPolicy(DefaultConfig())
	cases := []struct {
		name    string
		review  Review
		want    string // the JSON patch, "" for none
		allowed bool
	}{
		{"a Deployment's vGPU pod goes to volcano in the configured default queue",
			Review{Operation: Create, Pod: vgpuPod(nil, half)},
			`[{"op":"add","path":"/spec/schedulerName","value":"volcano"},{"op":"add","path":"/metadata/annotations","value":{"scheduling.volcano.sh/queue-name":"default"}},` + regionOps(), true},
		{"the namespace's default queue wins over the configured one",
			Review{Operation: Create, Pod: vgpuPod(map[string]string{"app": "x"}, half), NamespaceQueue: "research"},
			`[{"op":"add","path":"/spec/schedulerName","value":"volcano"},{"op":"add","path":"/metadata/annotations/scheduling.volcano.sh~1queue-name","value":"research"},` + regionOps(), true},
		{"a queue the pod names is kept",
			Review{Operation: Create, Pod: vgpuPod(map[string]string{PodQueueAnnotation: "mine"}, half), NamespaceQueue: "research"},
			`[{"op":"add","path":"/spec/schedulerName","value":"volcano"},` + regionOps(), true},
		{"a VolcanoJob's pod keeps its scheduler and gets no queue annotation",
			Review{Operation: Create, Pod: func() *corev1.Pod {
				p := vgpuPod(map[string]string{GroupAnnotation: "job-1-pg", JobQueueAnnotation: "q1"}, half)
				p.Spec.SchedulerName = "volcano"
				return p
			}()}, "[" + regionOps(), true},
		{"a pod in a hand-made PodGroup gets the scheduler but no queue",
			Review{Operation: Create, Pod: vgpuPod(map[string]string{GroupAnnotation: "pg"}, half)},
			`[{"op":"add","path":"/spec/schedulerName","value":"volcano"},` + regionOps(), true},
		{"a CPU-only pod is never touched",
			Review{Operation: Create, Pod: cpuPod(), NamespaceQueue: "research"}, "", true},
		{"an update is never mutated",
			Review{Operation: Update, Pod: vgpuPod(nil, half), OldPod: vgpuPod(nil, half)}, "", true},
		{"a malformed request is still routed: the validating webhook refuses it",
			Review{Operation: Create, Pod: vgpuPod(map[string]string{api.AnnotationQoS: "gold"}, half)},
			`[{"op":"add","path":"/spec/schedulerName","value":"volcano"},{"op":"add","path":"/metadata/annotations/scheduling.volcano.sh~1queue-name","value":"default"},` + regionOps(), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := p.Mutate(c.review)
			if d.Allowed != c.allowed {
				t.Fatalf("allowed %v, want %v (%s)", d.Allowed, c.allowed, d.Message)
			}
			got := ""
			if len(d.Patch) > 0 {
				b, err := json.Marshal(d.Patch)
				if err != nil {
					t.Fatal(err)
				}
				got = string(b)
			}
			if got != c.want {
				t.Errorf("patch\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestMutateUsesTheConfiguredSchedulerAndResourceNames(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SchedulerName, cfg.DefaultQueue = "volcano-gpu", "gpu"
	cfg.Resources.Number = "example.com/vgpu"
	p := NewPolicy(cfg)
	d := p.Mutate(Review{Operation: Create, Pod: vgpuPod(nil, map[string]int64{"example.com/vgpu": 1})})
	b, _ := json.Marshal(d.Patch)
	if want := `[{"op":"add","path":"/spec/schedulerName","value":"volcano-gpu"},{"op":"add","path":"/metadata/annotations","value":{"scheduling.volcano.sh/queue-name":"gpu"}},` + regionOps(); string(b) != want {
		t.Errorf("patch %s, want %s", b, want)
	}
	if d := p.Mutate(Review{Operation: Create, Pod: vgpuPod(nil, map[string]int64{api.ResourceNumber: 1})}); len(d.Patch) != 0 {
		t.Errorf("a pod asking for Volcano's names, which this cluster renamed, was patched: %+v", d.Patch)
	}
}

func routed(ann map[string]string, limits ...map[string]int64) *corev1.Pod {
	p := vgpuPod(ann, limits...)
	p.Spec.SchedulerName = "volcano"
	return p
}

func TestValidate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Limits = []Limit{
		{Namespace: "team-a", AllowedQoS: []api.QoSClass{api.QoSFixedShare, api.QoSBurstShare}, MaxCores: 50, MaxMemoryPercent: 50},
		{Queue: "small", MaxCards: 1, MaxMemoryMiB: 8192},
		{Namespace: "team-b", MaxMemoryMiB: 8192, MaxMemoryPercent: 25},
	}
	p := NewPolicy(cfg)
	inB := func(pod *corev1.Pod) *corev1.Pod { pod.Namespace = "team-b"; return pod }
	cases := []struct {
		name   string
		review Review
		want   string // "" allowed, else a substring of the refusal
	}{
		{"a request within the namespace's limits passes",
			Review{Operation: Create, Pod: routed(nil, half)}, ""},
		{"a malformed QoS annotation is refused with the scheduler's message",
			Review{Operation: Create, Pod: routed(map[string]string{api.AnnotationQoS: "gold"}, half)},
			`vgpu: annotation tessera.io/qos: invalid: qos "gold": want best-effort, fixed-share or burst-share`},
		{"memory without a card count is refused with the scheduler's message",
			Review{Operation: Create, Pod: routed(nil, map[string]int64{api.ResourceMemory: 1024})},
			`vgpu: invalid: container "main" volcano.sh/vgpu-memory is 1024 without volcano.sh/vgpu-number`},
		{"a pod left on the default scheduler is refused",
			Review{Operation: Create, Pod: vgpuPod(nil, half)}, `spec.schedulerName: "default-scheduler": vGPU pods must be placed by volcano`},
		{"best-effort is refused where the namespace forbids it",
			Review{Operation: Create, Pod: routed(map[string]string{api.AnnotationQoS: "best-effort"}, half)},
			"namespace team-a allows tessera.io/qos fixed-share, burst-share; this pod asks best-effort"},
		{"best-effort passes in a namespace without the rule",
			Review{Operation: Create, Pod: inB(routed(map[string]string{api.AnnotationQoS: "best-effort"},
				map[string]int64{api.ResourceNumber: 1, api.ResourceMemory: 4096}))}, ""},
		{"too many cores are refused, naming the container",
			Review{Operation: Create, Pod: routed(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemoryPercentage: 50, api.ResourceCores: 80})},
			`namespace team-a allows at most 50% of a card's cores (volcano.sh/vgpu-cores); container "main" asks 80%`},
		{"no cores at all is uncapped and breaks a core limit",
			Review{Operation: Create, Pod: routed(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemoryPercentage: 50})},
			"which runs uncapped"},
		{"no memory asks for the whole card and breaks a memory limit",
			Review{Operation: Create, Pod: routed(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceCores: 50})},
			`container "main" asks the whole card`},
		{"memory in MiB cannot be checked against a limit in percent",
			Review{Operation: Create, Pod: routed(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemory: 1024, api.ResourceCores: 50})},
			"limits card memory in percent (at most 50%); container \"main\" asks 1024 MiB (volcano.sh/vgpu-memory), which cannot be checked without the card: ask with volcano.sh/vgpu-memory-percentage"},
		{"every container is checked",
			Review{Operation: Create, Pod: routed(nil, half, map[string]int64{api.ResourceNumber: 1, api.ResourceMemoryPercentage: 60, api.ResourceCores: 10})},
			`container "side" asks 60%`},
		{"a queue's rule applies to the queue the pod names",
			Review{Operation: Create, Pod: inB(routed(map[string]string{PodQueueAnnotation: "small"},
				map[string]int64{api.ResourceNumber: 2, api.ResourceMemory: 4096}))},
			`queue small allows at most 1 cards per container (volcano.sh/vgpu-number); container "main" asks 2`},
		{"a queue's rule applies to the namespace's default queue",
			Review{Operation: Create, Pod: inB(routed(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemory: 9000})), NamespaceQueue: "small"},
			"queue small allows at most 8192 MiB of card memory (volcano.sh/vgpu-memory); container \"main\" asks 9000 MiB"},
		{"a VolcanoJob's queue is read from the job's annotation",
			Review{Operation: Create, Pod: inB(routed(map[string]string{GroupAnnotation: "j", JobQueueAnnotation: "small"},
				map[string]int64{api.ResourceNumber: 3, api.ResourceMemory: 1024}))}, "queue small allows at most 1 cards"},
		{"both units limited: percent checked against percent",
			Review{Operation: Create, Pod: inB(routed(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemoryPercentage: 30}))},
			"namespace team-b allows at most 25% of a card's memory"},
		{"a CPU-only pod is never refused",
			Review{Operation: Create, Pod: func() *corev1.Pod {
				p := cpuPod()
				p.Annotations = map[string]string{api.AnnotationQoS: "gold"}
				return p
			}()}, ""},
		{"an update that changes the QoS of a pending pod is checked",
			Review{Operation: Update, Pod: routed(map[string]string{api.AnnotationQoS: "best-effort"}, half), OldPod: routed(nil, half)},
			"this pod asks best-effort"},
		{"an update that leaves what Tessera reads alone passes",
			Review{Operation: Update, Pod: routed(map[string]string{api.AnnotationQoS: "best-effort", "x": "y"}, half),
				OldPod: routed(map[string]string{api.AnnotationQoS: "best-effort"}, half)}, ""},
		{"an update of a bound pod passes: its cards are chosen",
			Review{Operation: Update, Pod: func() *corev1.Pod {
				p := routed(map[string]string{api.AnnotationQoS: "gold"}, half)
				p.Spec.NodeName = "gpu-a"
				return p
			}(), OldPod: routed(nil, half)}, ""},
		{"an update of a pod being deleted passes",
			Review{Operation: Update, Pod: func() *corev1.Pod {
				p := routed(map[string]string{api.AnnotationQoS: "gold"}, half)
				p.DeletionTimestamp = &metav1.Time{}
				return p
			}(), OldPod: routed(nil, half)}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := p.Validate(c.review)
			switch {
			case c.want == "" && !d.Allowed:
				t.Errorf("refused: %s", d.Message)
			case c.want != "" && d.Allowed:
				t.Errorf("allowed, want a refusal containing %q", c.want)
			case c.want != "" && !strings.Contains(d.Message, c.want):
				t.Errorf("refusal\n %s\nwant it to contain\n %s", d.Message, c.want)
			}
			if len(d.Patch) > 0 {
				t.Errorf("validation patched: %+v", d.Patch)
			}
		})
	}
}

// The refusal is the plugin's own reason for the same pending pod: "vgpu: task NAME: "
// and the error pluginargs.Args.Request gives, which the plugin stores as the task's
// request error (the e2e scenario compares with the reason the scheduler writes).
func TestRefusalIsTheSchedulersReasonWordForWord(t *testing.T) {
	p := NewPolicy(DefaultConfig())
	for _, ann := range []map[string]string{
		{api.AnnotationNUMABind: "yes"},
		{api.AnnotationNodePolicy: "fastest"},
		{api.AnnotationGPUTypeInclude: " , "},
		{api.AnnotationQoS: "Best-Effort"},
		{api.AnnotationScoreWeights: "pack=3,topology=1"},
	} {
		pod := routed(ann, half)
		pod.Name = "infer-7d9f-x2b8q" // generated before validating admission
		_, err := pluginargs.Defaults().Request(pod)
		if err == nil {
			t.Fatalf("%v: the scheduler accepts it", ann)
		}
		d := p.Validate(Review{Operation: Create, Pod: pod})
		if want := "vgpu: task infer-7d9f-x2b8q: " + err.Error(); d.Message != want {
			t.Errorf("%v: webhook says %q, scheduler %q", ann, d.Message, want)
		}
	}
}

func TestAnswersAllowEverythingWithoutLimits(t *testing.T) {
	p := NewPolicy(DefaultConfig())
	for _, q := range []string{"best-effort", "fixed-share", "burst-share"} {
		pod := routed(map[string]string{api.AnnotationQoS: q}, map[string]int64{api.ResourceNumber: 8})
		if d := p.Validate(Review{Operation: Create, Pod: pod}); !d.Allowed {
			t.Errorf("%s refused without limits: %s", q, d.Message)
		}
	}
}
