package admission

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tessera-gpu/tessera/api"
)

// The conversion of a vGPU pod into a pod with ResourceClaims of the DRA driver
// (docs/dra.md, "Running existing jobs on DRA nodes"). Each vGPU container's
// volcano.sh/vgpu-* request becomes one claim, made from a ResourceClaimTemplate whose
// name says its shape (cards, memory, cores), so all pods of one shape in a namespace
// share one template. ConvertToClaims is a pure function of the pod and the
// configuration; draconvert.go is the webhook's adapter that creates the templates.

// DefaultDRAMinMemoryMiB is the node agent's default MinMemoryMiB: the smallest memory
// share its DRA driver publishes as valid. The allocator rounds a smaller request up to
// it, which would change the container's limit, so the conversion refuses one.
const DefaultDRAMinMemoryMiB = 256

// Names the conversion gives what it makes.
const (
	// ClaimTemplatePrefix starts the name of every template the conversion makes.
	ClaimTemplatePrefix = "tessera-vgpu-"
	// podClaimPrefix starts the pod's claim entries, one per vGPU container, followed
	// by the container's index.
	podClaimPrefix = "tessera-vgpu-"
	// claimRequestName is the one device request in each template.
	claimRequestName = "gpu"
	// ManagedByLabel marks the templates the webhook made.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is ManagedByLabel's value on them.
	ManagedByValue = "tessera-admission"
)

// DRAConversion is the draConversion section of the configuration.
type DRAConversion struct {
	// Enabled turns the conversion on. Off (the default), no pod is ever converted and
	// a pod asking for it by annotation is refused.
	Enabled bool `json:"enabled,omitempty"`
	// PodOptIn lets a pod pick its card API with its own api.AnnotationCardAPI where its
	// namespace names none. A namespace's annotation always wins.
	PodOptIn bool `json:"podOptIn,omitempty"`
	// DeviceClassName is the claims' DeviceClass (the chart's is api.DRADriver).
	DeviceClassName string `json:"deviceClassName,omitempty"`
	// CardMemoryMiB is the memory of every card on the DRA nodes, when they are all one
	// size: a memory percentage is then converted into MiB of a card of that size, and
	// the claim selects such cards only. 0: percentages other than 100 are refused.
	CardMemoryMiB int64 `json:"cardMemoryMiB,omitempty"`
	// MinMemoryMiB is the node agent's MinMemoryMiB; smaller memory requests are refused.
	MinMemoryMiB int64 `json:"minMemoryMiB,omitempty"`
}

func (d *DRAConversion) validate(at string) []error {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("%w: %s.%s: %v: want %s", api.ErrInvalid, at, field, v, want))
	}
	if len(validation.IsDNS1123Subdomain(d.DeviceClassName)) > 0 {
		bad("deviceClassName", fmt.Sprintf("%q", d.DeviceClassName), "a DeviceClass name such as "+api.DRADriver)
	}
	if d.CardMemoryMiB < 0 || d.CardMemoryMiB > 1<<30 {
		bad("cardMemoryMiB", d.CardMemoryMiB, "the MiB of every DRA card (0 or unset: memory percentages are refused)")
	}
	if d.MinMemoryMiB < 1 || d.MinMemoryMiB > 1<<30 {
		bad("minMemoryMiB", d.MinMemoryMiB, "the node agent's MinMemoryMiB, at least 1 (default 256)")
	}
	if d.CardMemoryMiB > 0 && d.CardMemoryMiB < d.MinMemoryMiB {
		bad("cardMemoryMiB", d.CardMemoryMiB, fmt.Sprintf("at least minMemoryMiB (%d)", d.MinMemoryMiB))
	}
	return errs
}

// errNotConverted is wrapped by every reason a pod the configuration sends to DRA
// cannot be converted.
var errNotConverted = errors.New("cannot run this vGPU pod on DRA nodes")

// WantsDRA decides whether a vGPU pod of namespace goes to DRA nodes: its namespace's
// api.AnnotationCardAPI (nsValue, "" when absent) wins; where the namespace names
// none, the pod's own annotation counts if PodOptIn is on. A pod's annotation that is
// malformed, or that asks for what its namespace or the configuration does not allow,
// is refused rather than ignored.
func (d *DRAConversion) WantsDRA(namespace, nsValue string, pod *corev1.Pod) (bool, error) {
	podValue, podSet := pod.Annotations[api.AnnotationCardAPI]
	if podSet && podValue != api.CardAPIDRA && podValue != api.CardAPIDevicePlugin {
		return false, fmt.Errorf("%w: annotation %s: %q, want %s or %s", api.ErrInvalid, api.AnnotationCardAPI, podValue,
			api.CardAPIDRA, api.CardAPIDevicePlugin)
	}
	if !d.Enabled {
		if podValue == api.CardAPIDRA {
			return false, fmt.Errorf("annotation %s: %q: the admission webhook's draConversion is off, so vGPU pods run on device-plugin nodes only",
				api.AnnotationCardAPI, podValue)
		}
		return false, nil
	}
	switch nsValue {
	case "":
	case api.CardAPIDRA, api.CardAPIDevicePlugin:
		if podSet && podValue != nsValue {
			return false, fmt.Errorf("annotation %s: %q: namespace %s runs its vGPU pods on %s nodes (its own %s annotation)",
				api.AnnotationCardAPI, podValue, namespace, nsValue, api.AnnotationCardAPI)
		}
		return nsValue == api.CardAPIDRA, nil
	default:
		return false, fmt.Errorf("%w: namespace %s: annotation %s: %q, want %s or %s", api.ErrInvalid, namespace, api.AnnotationCardAPI,
			nsValue, api.CardAPIDRA, api.CardAPIDevicePlugin)
	}
	if podValue == api.CardAPIDRA && !d.PodOptIn {
		return false, fmt.Errorf("annotation %s: %q: namespace %s is not opted in to DRA nodes and draConversion.podOptIn is off: ask an administrator to annotate the namespace",
			api.AnnotationCardAPI, podValue, namespace)
	}
	return podValue == api.CardAPIDRA, nil
}

// ClaimConversion is a converted pod: the templates its claims are made from (one per
// shape, sorted by name, in the pod's namespace) and the pod as it is to be created.
type ClaimConversion struct {
	Templates []resourcev1.ResourceClaimTemplate
	Pod       *corev1.Pod
}

// unconvertible are the annotations whose meaning a claim of the driver cannot carry:
// card filters and policies are Tessera's own placement, which does not apply to
// claims, and MIG instances are not devices of the driver.
var unconvertible = []string{
	api.AnnotationGPUTypeInclude, api.AnnotationGPUTypeExclude, api.AnnotationGPUUUIDInclude, api.AnnotationGPUUUIDExclude,
	api.NvidiaUseGPUType, api.NvidiaNoUseGPUType, api.NvidiaUseGPUUUID, api.NvidiaNoUseGPUUUID,
	api.AnnotationNodePolicy, api.AnnotationCardPolicy, api.AnnotationNUMABind, api.AnnotationScoreWeights,
	api.AnnotationMIGProfile,
}

// ConvertToClaims rewrites a vGPU pod's requests (with the resource names n) into
// claims of d.DeviceClassName: each vGPU container loses its vGPU resources and
// references a claim of its own, made from the template of its shape. The pod's other
// fields are kept. A pod that cannot be converted exactly is refused with the reason:
// it already names claims, it asks for something claims cannot express (MIG
// instances, card filters or policies, a QoS class other than fixed-share, a memory
// percentage without a known card size, less memory than the driver's smallest share),
// or its request is malformed (the scheduler's own reader's error).
func ConvertToClaims(pod *corev1.Pod, n api.ResourceNames, d DRAConversion) (*ClaimConversion, error) {
	for _, k := range unconvertible {
		if v, ok := pod.Annotations[k]; ok {
			return nil, fmt.Errorf("%w: annotation %s: %q: claims on DRA nodes are placed by the Kubernetes allocator, which does not read it; remove it",
				errNotConverted, k, clipValue(v))
		}
	}
	if v, ok := pod.Annotations[api.AnnotationQoS]; ok && v != string(api.QoSFixedShare) {
		return nil, fmt.Errorf("%w: annotation %s: %q: claims get %s only", errNotConverted, api.AnnotationQoS, clipValue(v), api.QoSFixedShare)
	}
	if len(pod.Spec.ResourceClaims) > 0 {
		return nil, fmt.Errorf("%w: spec.resourceClaims[0]: %q: a pod that names claims itself is not converted; ask for the card in a claim of its own",
			errNotConverted, pod.Spec.ResourceClaims[0].Name)
	}
	reqs, err := n.ContainerRequests(pod)
	if err != nil {
		return nil, err
	}
	out := &ClaimConversion{Pod: pod.DeepCopy()}
	byName := map[string]resourcev1.ResourceClaimTemplate{}
	for _, r := range reqs {
		i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == r.Name })
		c := &out.Pod.Spec.Containers[i]
		if len(c.Resources.Claims) > 0 {
			return nil, fmt.Errorf("%w: spec.containers[%d].resources.claims[0]: %q: a container that names claims itself is not converted",
				errNotConverted, i, c.Resources.Claims[0].Name)
		}
		t, err := claimTemplate(pod.Namespace, i, r, d)
		if err != nil {
			return nil, err
		}
		byName[t.Name] = t
		claim := podClaimPrefix + strconv.Itoa(i)
		out.Pod.Spec.ResourceClaims = append(out.Pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: claim, ResourceClaimTemplateName: &t.Name})
		for _, name := range []corev1.ResourceName{n.Number, n.Memory, n.MemoryPercentage, n.Cores} {
			delete(c.Resources.Limits, name)
			delete(c.Resources.Requests, name)
		}
		c.Resources.Claims = []corev1.ResourceClaim{{Name: claim}}
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out.Templates = append(out.Templates, byName[name])
	}
	return out, nil
}

// claimTemplate is the template of one container's request, in namespace. The shape:
// Cards devices, distinct cards when more than one; memory in MiB (from a percentage of
// CardMemoryMiB, with a selector keeping the claim on cards of that size), or none for
// all of the card; cores as asked. A container asking for 100 cores wants its cards to
// itself (the device-plugin path gives it idle cards only), so it asks for whole cards:
// it then gets each card's memory, not the MiB it asked.
func claimTemplate(namespace string, container int, r api.ContainerRequest, d DRAConversion) (resourcev1.ResourceClaimTemplate, error) {
	field := func(name string) string { return fmt.Sprintf("spec.containers[%d] (%q) %s", container, r.Name, name) }
	req := resourcev1.ExactDeviceRequest{DeviceClassName: d.DeviceClassName, AllocationMode: resourcev1.DeviceAllocationModeExactCount,
		Count: int64(r.Cards)}
	caps := map[resourcev1.QualifiedName]resource.Quantity{}
	memory := "whole"
	switch {
	case r.Exclusive(), r.MemoryMiB == 0 && r.MemoryPercent == 100:
	case r.MemoryMiB > 0:
		if r.MemoryMiB < d.MinMemoryMiB {
			return resourcev1.ResourceClaimTemplate{}, fmt.Errorf("%w: %s: %d MiB: the DRA driver's smallest share is %d MiB (draConversion.minMemoryMiB), and a smaller claim would be given that much",
				errNotConverted, field("memory"), r.MemoryMiB, d.MinMemoryMiB)
		}
		caps[api.DRACapacityMemory] = *resource.NewQuantity(r.MemoryMiB<<20, resource.BinarySI)
		memory = strconv.FormatInt(r.MemoryMiB, 10) + "mi"
	default:
		if d.CardMemoryMiB == 0 {
			return resourcev1.ResourceClaimTemplate{}, fmt.Errorf("%w: %s: %d%%: a percentage needs the card's size, which the DRA nodes' cards need not share; ask in MiB, or set draConversion.cardMemoryMiB where every DRA card has the same memory",
				errNotConverted, field("memory-percentage"), r.MemoryPercent)
		}
		mib := max(1, d.CardMemoryMiB*int64(r.MemoryPercent)/100)
		if mib < d.MinMemoryMiB {
			return resourcev1.ResourceClaimTemplate{}, fmt.Errorf("%w: %s: %d%% of %d MiB is %d MiB: the DRA driver's smallest share is %d MiB (draConversion.minMemoryMiB)",
				errNotConverted, field("memory-percentage"), r.MemoryPercent, d.CardMemoryMiB, mib, d.MinMemoryMiB)
		}
		caps[api.DRACapacityMemory] = *resource.NewQuantity(mib<<20, resource.BinarySI)
		req.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: cardSizeExpression(d.CardMemoryMiB)}}}
		memory = fmt.Sprintf("%dpct-of-%dmi", r.MemoryPercent, d.CardMemoryMiB)
	}
	cores := r.Cores
	if r.Exclusive() {
		cores = api.DRAMaxCores
	}
	caps[api.DRACapacityCores] = *resource.NewQuantity(int64(cores), resource.DecimalSI)
	req.Capacity = &resourcev1.CapacityRequirements{Requests: caps}
	spec := resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: claimRequestName, Exactly: &req}}}}
	if r.Cards > 1 {
		distinct := resourcev1.FullyQualifiedName(api.DRADriver + "/uuid")
		spec.Devices.Constraints = []resourcev1.DeviceConstraint{{Requests: []string{claimRequestName}, DistinctAttribute: &distinct}}
	}
	name := fmt.Sprintf("%s%dx-%s-%dc", ClaimTemplatePrefix, r.Cards, memory, cores)
	return resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{ManagedByLabel: ManagedByValue}},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: spec},
	}, nil
}

// cardSizeExpression selects the cards of exactly mib MiB.
func cardSizeExpression(mib int64) string {
	return fmt.Sprintf(`device.capacity[%q].memory.compareTo(quantity("%dMi")) == 0`, api.DRADriver, mib)
}

// SameTemplate reports whether an existing template asks for what the conversion's does:
// a template of the conversion's name that someone else made with another spec (a
// tenant may create templates in their namespace) must not stand in for it.
func SameTemplate(got, want *resourcev1.ResourceClaimTemplate) bool {
	return apiequality.Semantic.DeepEqual(got.Spec.Spec, want.Spec.Spec)
}

// ClaimPatch is the JSON patch that turns pod into c.Pod: the vGPU resources removed
// from the converted containers' limits and requests, each container's claim added,
// and the pod's claim list added. Applying it to pod yields c.Pod's spec.
func ClaimPatch(pod *corev1.Pod, c *ClaimConversion, n api.ResourceNames) []PatchOp {
	var ops []PatchOp
	for i := range pod.Spec.Containers {
		old, cur := &pod.Spec.Containers[i], &c.Pod.Spec.Containers[i]
		if len(cur.Resources.Claims) == 0 || len(old.Resources.Claims) > 0 {
			continue
		}
		at := "/spec/containers/" + strconv.Itoa(i) + "/resources"
		for _, list := range []struct {
			field string
			rl    corev1.ResourceList
		}{{"limits", old.Resources.Limits}, {"requests", old.Resources.Requests}} {
			for _, name := range []corev1.ResourceName{n.Number, n.Memory, n.MemoryPercentage, n.Cores} {
				if _, ok := list.rl[name]; ok {
					ops = append(ops, PatchOp{Op: "remove", Path: at + "/" + list.field + "/" + escapePointer(string(name))})
				}
			}
		}
		ops = append(ops, PatchOp{Op: "add", Path: at + "/claims", Value: cur.Resources.Claims})
	}
	if len(c.Pod.Spec.ResourceClaims) > 0 {
		ops = append(ops, PatchOp{Op: "add", Path: "/spec/resourceClaims", Value: c.Pod.Spec.ResourceClaims})
	}
	return ops
}

// clipValue keeps a hostile annotation value short in a message.
func clipValue(v string) string {
	if len(v) > 64 {
		return v[:64] + "..."
	}
	return v
}
