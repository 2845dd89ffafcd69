package admission

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// Queue annotations, as Volcano writes and reads them.
const (
	// PodQueueAnnotation is the queue of a pod outside a VolcanoJob: Volcano's
	// PodGroup controller copies it into the PodGroup it makes for the pod. On a
	// Namespace it is the namespace's default queue (Volcano's PodGroup webhook reads
	// it there too).
	PodQueueAnnotation = schedulingv1beta1.QueueNameAnnotationKey
	// JobQueueAnnotation is the queue Volcano's job controller writes on a VolcanoJob's pods.
	JobQueueAnnotation = batchv1alpha1.QueueNameKey
	// GroupAnnotation names the PodGroup a pod belongs to; its queue is the PodGroup's.
	GroupAnnotation = schedulingv1beta1.KubeGroupNameAnnotationKey
)

// defaultScheduler is the name the API server defaults spec.schedulerName to.
const defaultScheduler = corev1.DefaultSchedulerName

// Operation is the admission operation under review.
type Operation string

// The operations the webhook is registered for.
const (
	Create Operation = "CREATE"
	Update Operation = "UPDATE"
)

// Review is what one decision looks at.
type Review struct {
	Operation Operation
	Pod       *corev1.Pod
	// OldPod is the pod before an Update.
	OldPod *corev1.Pod
	// NamespaceQueue is the pod's namespace's PodQueueAnnotation, "" when it has none.
	NamespaceQueue string
	// VGPUClaims are the pod's claim entries (spec.resourceClaims[].name) that stand for
	// claims of the vGPU DeviceClass (Policy.VGPUClaimEntries); read on Create only.
	VGPUClaims map[string]bool
	// ClaimWarnings say which claim entries' class could not be read (VGPUClaimEntries);
	// the answer carries them to the pod's author.
	ClaimWarnings []string
}

// Decision is the answer to a Review.
type Decision struct {
	Allowed bool
	// Message says why a pod is refused.
	Message string
	// Patch is the JSON patch (RFC 6902) of a mutation, empty when nothing changes.
	Patch []PatchOp
}

// PatchOp is one JSON patch operation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

func allow() Decision { return Decision{Allowed: true} }

func deny(msg string) Decision { return Decision{Message: msg} }

// Policy decides with one configuration.
type Policy struct {
	cfg  Config
	args pluginargs.Args
}

// NewPolicy decides with cfg, which must have passed Validate. A pod's request is read
// with the scheduler plugin's default arguments and cfg's resource names: the request
// errors do not depend on the other arguments.
func NewPolicy(cfg Config) *Policy {
	args := pluginargs.Defaults()
	args.Resources = cfg.ResourceNames()
	return &Policy{cfg: cfg, args: args}
}

// IsVGPU is the scheduler's test of a vGPU task: any container, init containers
// included, names a vGPU resource. No other pod is ever changed or refused.
func (p *Policy) IsVGPU(pod *corev1.Pod) bool { return p.args.Resources.HasVGPURequest(pod) }

// Mutate routes a vGPU pod being created to Volcano's scheduler and, unless it belongs
// to a PodGroup already (a VolcanoJob's pods do), to a queue: the pod's own
// PodQueueAnnotation, else its namespace's, else the configured default. It also gives
// the pod its region volume, mounted in each vGPU container (region.go), and, with
// QueueGate on, the scheduling gate QueueShareGate (gate.go). A pod that asks for cards
// only through claims of the vGPU DeviceClass (r.VGPUClaims) gets the region volume,
// mounted in each container that uses such a claim, and nothing else: the scheduler that
// allocates claims is the pod's own choice.
func (p *Policy) Mutate(r Review) Decision {
	pod := r.Pod
	if r.Operation != Create {
		return allow()
	}
	if !p.IsVGPU(pod) {
		d := allow()
		if len(r.VGPUClaims) > 0 {
			d.Patch = p.RegionPatchWithClaims(pod, r.VGPUClaims)
		}
		return d
	}
	d := allow()
	if s := pod.Spec.SchedulerName; s == "" || s == defaultScheduler {
		d.Patch = append(d.Patch, PatchOp{Op: "add", Path: "/spec/schedulerName", Value: p.cfg.SchedulerName})
	}
	if _, grouped := pod.Annotations[GroupAnnotation]; !grouped && queueAnnotation(pod) == "" {
		q := r.NamespaceQueue
		if q == "" {
			q = p.cfg.DefaultQueue
		}
		// An empty map is absent from the object the API server sends (omitempty).
		if len(pod.Annotations) == 0 {
			d.Patch = append(d.Patch, PatchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{PodQueueAnnotation: q}})
		} else {
			d.Patch = append(d.Patch, PatchOp{Op: "add", Path: "/metadata/annotations/" + escapePointer(PodQueueAnnotation), Value: q})
		}
	}
	d.Patch = append(d.Patch, p.RegionPatchWithClaims(pod, r.VGPUClaims)...)
	if p.cfg.QueueGate {
		d.Patch = append(d.Patch, gatePatch(pod)...)
	}
	return d
}

// Validate refuses a vGPU pod whose request or annotations the scheduler would refuse
// (with the scheduler's message), one that names a scheduler that does not place vGPU
// cards, one that misuses the region volume's name or path (region.go), and one
// outside the limits of its namespace, its queue or the cluster. An
// Update is checked only while the pod is unbound and only when it changes what the
// scheduler or a limit reads: the rest of a pod's life (its handoff annotations,
// deletion) never waits on the webhook. A pod being created that asks for cards only
// through claims of the vGPU DeviceClass is held to the region volume's rules alone.
func (p *Policy) Validate(r Review) Decision {
	pod := r.Pod
	if !p.IsVGPU(pod) {
		if r.Operation == Create && len(r.VGPUClaims) > 0 {
			if s := p.ClaimRegionRefusal(pod, r.VGPUClaims); s != "" {
				return deny(s)
			}
		}
		return allow()
	}
	if r.Operation == Update {
		if r.OldPod == nil || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || sameReads(r.OldPod, pod) {
			return allow()
		}
	} else if r.Operation != Create {
		return allow()
	}
	if s := pod.Spec.SchedulerName; !slices.Contains(p.cfg.acceptedSchedulers(), s) {
		return deny(fmt.Sprintf("spec.schedulerName: %q: vGPU pods must be placed by %s, Tessera's scheduler, or they are bound without cards",
			s, strings.Join(p.cfg.acceptedSchedulers(), " or ")))
	}
	req, err := p.args.Request(pod)
	if err != nil {
		return deny(SchedulerReason(pod, err))
	}
	queue := p.queueOf(pod, r.NamespaceQueue)
	var why []string
	if r.Operation == Create { // a pod's volumes cannot change after its creation
		if s := p.ClaimRegionRefusal(pod, r.VGPUClaims); s != "" {
			why = append(why, s)
		}
	}
	for i := range p.cfg.Limits {
		l := &p.cfg.Limits[i]
		if l.appliesTo(pod.Namespace, queue) {
			why = append(why, l.check(pod, req.Options.QoS, req.Containers, p.args.Resources)...)
		}
	}
	if len(why) > 0 {
		return deny(strings.Join(why, "; "))
	}
	return allow()
}

// SchedulerReason is what the vgpu plugin says of a pending pod whose request it cannot
// read: its job check names the task, which is the pod ("vgpu: task NAME: ..."), and
// that is the reason on the pod's PodScheduled condition. The validating webhook sees
// the pod's name even when it comes from generateName: the API server generates it
// before validation; without one, the plugin's per-node predicate reason is used.
func SchedulerReason(pod *corev1.Pod, err error) string {
	if pod.Name == "" {
		return "vgpu: " + err.Error()
	}
	return "vgpu: task " + pod.Name + ": " + err.Error()
}

// queueOf is the queue a pod will be scheduled in, as far as the pod and its namespace
// tell: "" for a pod in a PodGroup that names no queue on the pod.
func (p *Policy) queueOf(pod *corev1.Pod, nsQueue string) string {
	if q := queueAnnotation(pod); q != "" {
		return q
	}
	if _, grouped := pod.Annotations[GroupAnnotation]; grouped {
		return ""
	}
	if nsQueue != "" {
		return nsQueue
	}
	return p.cfg.DefaultQueue
}

func queueAnnotation(pod *corev1.Pod) string {
	if q := pod.Annotations[JobQueueAnnotation]; q != "" {
		return q
	}
	return pod.Annotations[PodQueueAnnotation]
}

// readKeys are the annotations the scheduler or a limit reads.
var readKeys = []string{
	api.AnnotationGPUTypeInclude, api.AnnotationGPUTypeExclude, api.AnnotationGPUUUIDInclude, api.AnnotationGPUUUIDExclude,
	api.NvidiaUseGPUType, api.NvidiaNoUseGPUType, api.NvidiaUseGPUUUID, api.NvidiaNoUseGPUUUID,
	api.AnnotationNodePolicy, api.AnnotationCardPolicy, api.AnnotationNUMABind, api.AnnotationQoS, api.AnnotationScoreWeights,
	JobQueueAnnotation, PodQueueAnnotation, GroupAnnotation,
}

// sameReads reports whether an update leaves every annotation Tessera reads as it was
// (the containers' resources and the scheduler name cannot change on a pod).
func sameReads(old, pod *corev1.Pod) bool {
	for _, k := range readKeys {
		a, inOld := old.Annotations[k]
		b, inNew := pod.Annotations[k]
		if a != b || inOld != inNew {
			return false
		}
	}
	return true
}

// escapePointer escapes a JSON pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func (l *Limit) appliesTo(namespace, queue string) bool {
	switch {
	case l.Namespace != "":
		return l.Namespace == namespace
	case l.Queue != "":
		return l.Queue == queue
	}
	return true
}

// check lists how the pod breaks the rule, each reason naming the rule, the field and
// the value asked.
func (l *Limit) check(pod *corev1.Pod, qos api.QoSClass, cs []api.ContainerRequest, n api.ResourceNames) []string {
	var why []string
	scope := l.scope()
	if len(l.AllowedQoS) > 0 && !slices.Contains(l.AllowedQoS, qos) {
		asked := string(qos)
		if _, set := pod.Annotations[api.AnnotationQoS]; !set {
			asked += " (the default: no " + api.AnnotationQoS + " annotation)"
		}
		why = append(why, fmt.Sprintf("%s allows %s %s; this pod asks %s", scope, api.AnnotationQoS, joinQoS(l.AllowedQoS), asked))
	}
	for _, c := range cs {
		ctr := container(pod, c.Name)
		if l.MaxCards > 0 && c.Cards > l.MaxCards {
			why = append(why, fmt.Sprintf("%s allows at most %d cards per container (%s); container %q asks %d",
				scope, l.MaxCards, n.Number, c.Name, c.Cards))
		}
		if l.MaxCores > 0 && (c.Cores == 0 || c.Cores > l.MaxCores) {
			asked := fmt.Sprintf("%d%%", c.Cores)
			if c.Cores == 0 {
				asked = fmt.Sprintf("%s %d or none, which runs uncapped (100%% of the card's SMs)", n.Cores, c.Cores)
			}
			why = append(why, fmt.Sprintf("%s allows at most %d%% of a card's cores (%s); container %q asks %s",
				scope, l.MaxCores, n.Cores, c.Name, asked))
		}
		why = append(why, l.checkMemory(scope, c, ctr, n)...)
	}
	return why
}

func (l *Limit) checkMemory(scope string, c api.ContainerRequest, ctr *corev1.Container, n api.ResourceNames) []string {
	if l.MaxMemoryPercent == 0 && l.MaxMemoryMiB == 0 {
		return nil
	}
	wholeCard := c.MemoryMiB == 0 && !has(ctr, n.MemoryPercentage)
	switch {
	case c.MemoryMiB > 0 && l.MaxMemoryMiB > 0:
		if c.MemoryMiB > l.MaxMemoryMiB {
			return []string{fmt.Sprintf("%s allows at most %d MiB of card memory (%s); container %q asks %d MiB",
				scope, l.MaxMemoryMiB, n.Memory, c.Name, c.MemoryMiB)}
		}
	case c.MemoryMiB > 0:
		return []string{fmt.Sprintf("%s limits card memory in percent (at most %d%%); container %q asks %d MiB (%s), which cannot be checked without the card: ask with %s",
			scope, l.MaxMemoryPercent, c.Name, c.MemoryMiB, n.Memory, n.MemoryPercentage)}
	case l.MaxMemoryPercent > 0:
		if c.MemoryPercent > l.MaxMemoryPercent {
			asked := fmt.Sprintf("%d%%", c.MemoryPercent)
			if wholeCard {
				asked = "the whole card (no " + string(n.Memory) + " or " + string(n.MemoryPercentage) + ")"
			}
			return []string{fmt.Sprintf("%s allows at most %d%% of a card's memory (%s); container %q asks %s",
				scope, l.MaxMemoryPercent, n.MemoryPercentage, c.Name, asked)}
		}
	default:
		asked := fmt.Sprintf("%d%% (%s)", c.MemoryPercent, n.MemoryPercentage)
		if wholeCard {
			asked = "the whole card (no " + string(n.Memory) + ")"
		}
		return []string{fmt.Sprintf("%s allows at most %d MiB of card memory (%s); container %q asks %s: ask with %s",
			scope, l.MaxMemoryMiB, n.Memory, c.Name, asked, n.Memory)}
	}
	return nil
}

func container(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return &corev1.Container{}
}

func has(c *corev1.Container, name corev1.ResourceName) bool {
	_, lim := c.Resources.Limits[name]
	_, req := c.Resources.Requests[name]
	return lim || req
}

func joinQoS(qs []api.QoSClass) string {
	s := make([]string, len(qs))
	for i, q := range qs {
		s[i] = string(q)
	}
	return strings.Join(s, ", ")
}
