package cli

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tessera-gpu/tessera/api"
)

// DRADriver is the DRA driver of Tessera's node agent on nodes with cardAPI dra: the
// driver of its ResourceSlices, of the allocation results meant for it, and the name of
// the DeviceClass the chart installs (docs/dra.md).
const DRADriver = "vgpu.tessera.io"

// The capacities a claim consumes of a card (docs/dra.md, "What the agent publishes").
const (
	capacityMemory resourcev1.QualifiedName = "memory"
	capacityCores  resourcev1.QualifiedName = "cores"
)

// ClaimShare is one card a ResourceClaim was allocated by Kubernetes' DRA allocator:
// the device, and how much of it the claim consumes.
type ClaimShare struct {
	// Request is the claim's request the card was allocated for.
	Request string `json:"request"`
	// Node is the allocation's pool: the agent names its pool after its node.
	Node   string `json:"node"`
	Device string `json:"device"`
	// Index is the card's index, read from the device name (card-<index>).
	Index int `json:"index"`
	// UUID and Model are the card's, from the node's inventory (absent when the node
	// or the card is not in it).
	UUID  string `json:"uuid,omitempty"`
	Model string `json:"model,omitempty"`
	// Whole: the result consumes no capacity, so the claim holds the whole card.
	Whole bool `json:"whole,omitempty"`
	// MemoryMiB and Cores are what the claim consumes; a whole card's memory is the
	// card's, 0 when the card is not in the node's inventory.
	MemoryMiB int64 `json:"memoryMiB"`
	Cores     int   `json:"cores"`
}

// ClaimView is one ResourceClaim that holds Tessera cards, or asks for them.
type ClaimView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Allocated: the allocator has placed the claim.
	Allocated bool `json:"allocated"`
	// Node is the pool of its first Tessera allocation result: the node the agent named
	// its pool after.
	Node   string       `json:"node,omitempty"`
	Shares []ClaimShare `json:"shares,omitempty"`
	// Pods are the pods the claim is reserved for (status.reservedFor), in its namespace.
	Pods []string `json:"pods,omitempty"`
	// Problems are allocation results the node agent would refuse, in its terms.
	Problems []string `json:"problems,omitempty"`
}

// readClaim reads what claim holds of Tessera's driver. ok is false for a claim that
// neither asks for Tessera's DeviceClass nor was allocated a Tessera device. The results
// are read as the node agent reads them (deviceplugin/dra): a result without consumed
// capacity is the whole card; memory must be a whole, positive number of MiB and cores a
// whole percent from 0 to 100; anything else is a problem naming the field and the value.
func readClaim(claim *resourcev1.ResourceClaim) (ClaimView, bool) {
	v := ClaimView{Namespace: claim.Namespace, Name: claim.Name}
	asks := false
	for _, r := range claim.Spec.Devices.Requests {
		if r.Exactly != nil && r.Exactly.DeviceClassName == DRADriver {
			asks = true
		}
		for _, sub := range r.FirstAvailable {
			if sub.DeviceClassName == DRADriver {
				asks = true
			}
		}
	}
	if a := claim.Status.Allocation; a != nil {
		for i, r := range a.Devices.Results {
			if r.Driver != DRADriver {
				continue
			}
			asks, v.Allocated = true, true
			if v.Node == "" {
				v.Node = r.Pool
			}
			field := fmt.Sprintf("status.allocation.devices.results[%d]", i)
			s := ClaimShare{Request: r.Request, Node: r.Pool, Device: r.Device, Index: deviceIndex(r.Device)}
			if len(r.ConsumedCapacity) == 0 {
				s.Whole, s.Cores = true, 100
			} else if err := consumed(&s, r.ConsumedCapacity, field+".consumedCapacity"); err != nil {
				v.Problems = append(v.Problems, err.Error())
				continue
			}
			if s.Index < 0 {
				v.Problems = append(v.Problems, fmt.Sprintf("%s.device: %q is not a device Tessera's agent publishes (card-<index>)", field, r.Device))
				continue
			}
			v.Shares = append(v.Shares, s)
		}
	}
	if !asks {
		return v, false
	}
	for _, ref := range claim.Status.ReservedFor {
		if ref.Resource == "pods" && ref.APIGroup == "" {
			v.Pods = append(v.Pods, ref.Name)
		}
	}
	sort.Strings(v.Pods)
	return v, true
}

// consumed reads a result's consumed memory and cores into s.
func consumed(s *ClaimShare, cc map[resourcev1.QualifiedName]resource.Quantity, field string) error {
	names := make([]string, 0, len(cc))
	for name := range cc {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		if q := resourcev1.QualifiedName(name); q != capacityMemory && q != capacityCores {
			return fmt.Errorf("%s: %q is not a capacity of %s (want %s and %s)", field, name, DRADriver, capacityMemory, capacityCores)
		}
	}
	mem, ok := cc[capacityMemory]
	if !ok {
		return fmt.Errorf("%s: %s missing", field, capacityMemory)
	}
	b, whole := wholeValue(mem)
	if mem.Sign() <= 0 || !whole || b%(1<<20) != 0 {
		return fmt.Errorf("%s[%s]: %q is not a positive whole number of MiB", field, capacityMemory, mem.String())
	}
	cores, ok := cc[capacityCores]
	if !ok {
		return fmt.Errorf("%s: %s missing", field, capacityCores)
	}
	c, whole := wholeValue(cores)
	if cores.Sign() < 0 || !whole || c > 100 {
		return fmt.Errorf("%s[%s]: %q is not a whole percent from 0 to 100", field, capacityCores, cores.String())
	}
	s.MemoryMiB, s.Cores = b>>20, int(c)
	return nil
}

// wholeValue is q as an integer, and whether q is exactly that integer.
func wholeValue(q resource.Quantity) (int64, bool) {
	n := q.Value() // rounds up, saturates on huge values
	return n, resource.NewQuantity(n, resource.DecimalSI).Cmp(q) == 0
}

// deviceIndex is the card index of a device named card-<index>, -1 for any other name.
func deviceIndex(name string) int {
	s, ok := strings.CutPrefix(name, "card-")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return -1
	}
	return n
}

// loadClaims lists every namespace's ResourceClaims and keeps Tessera's. unread is a
// reason in words for the views ("" when every namespace was read): an account without
// the right or a cluster without the API (DRA off, Kubernetes before 1.34) is no error of
// the command, since a cluster of device-plugin nodes needs neither. An account that may
// list claims only in namespace (as Scope.Namespace allows for pods) gets that
// namespace's, and readIn names it.
func loadClaims(ctx context.Context, client kubernetes.Interface, scope Scope) (claims []ClaimView, unread, readIn string) {
	list, err := client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) && !scope.AllNamespaces && scope.Namespace != "" {
		unread, readIn = "your account may not list ResourceClaims (resource.k8s.io) in every namespace; only namespace "+scope.Namespace+"'s are read", scope.Namespace
		list, err = client.ResourceV1().ResourceClaims(scope.Namespace).List(ctx, metav1.ListOptions{})
	}
	switch {
	case err == nil:
	case apierrors.IsForbidden(err):
		return nil, "your account may not list ResourceClaims (resource.k8s.io)", ""
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil, "the cluster serves no resource.k8s.io/v1 ResourceClaims (DRA off, or Kubernetes before 1.34)", ""
	default:
		return nil, fmt.Sprintf("list ResourceClaims: %v", err), ""
	}
	var out []ClaimView
	for i := range list.Items {
		if v, ok := readClaim(&list.Items[i]); ok {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out, unread, readIn
}

// podClaimsUnknown says why the pod's claims could not be read, "" when they were or it
// has none.
func (s *Snapshot) podClaimsUnknown(pod *corev1.Pod) string {
	if len(pod.Spec.ResourceClaims) == 0 || s.ClaimsUnread == "" || s.claimsIn == pod.Namespace {
		return ""
	}
	return s.ClaimsUnread
}

// servesDRA reports whether the node's agent says it serves its cards as DRA devices.
func servesDRA(n *corev1.Node) bool { return n.Annotations[api.AnnotationCardAPI] == api.CardAPIDRA }

// claimNames are the ResourceClaims a pod uses, by the pod's name for each: the claim it
// names, or the one made from its template (pod.status.resourceClaimStatuses; "" until
// the controller made it).
func claimNames(pod *corev1.Pod) []podClaimRef {
	made := map[string]string{}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			made[s.Name] = *s.ResourceClaimName
		}
	}
	var out []podClaimRef
	for _, c := range pod.Spec.ResourceClaims {
		ref := podClaimRef{Name: c.Name}
		switch {
		case c.ResourceClaimName != nil:
			ref.Claim = *c.ResourceClaimName
		case c.ResourceClaimTemplateName != nil:
			ref.Template, ref.Claim = *c.ResourceClaimTemplateName, made[c.Name]
		}
		for _, ctr := range pod.Spec.Containers {
			for _, rc := range ctr.Resources.Claims {
				if rc.Name == c.Name {
					ref.Containers = append(ref.Containers, ctr.Name)
					break
				}
			}
		}
		out = append(out, ref)
	}
	return out
}

type podClaimRef struct {
	Name, Claim, Template string
	Containers            []string
}
