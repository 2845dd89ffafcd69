package scale

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/dra"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// A DRA share of the run (-dra-share): that share of the GPU nodes publish their cards as
// the node agent's DRA driver does (a ResourceSlice, no device plugin), and the same share
// of the card-asking jobs ask through ResourceClaimTemplates. Only the Tessera run takes
// it: the floor submits every job without cards, deviceshare every job through the device
// plugin on nodes that all run it, as without the flag.

// ClaimName is the name of the pod's claim and of the request in it.
const ClaimName = "gpu"

// CheckDRAShare refuses a share outside [0, 1], naming the flag and the value.
func CheckDRAShare(share float64) error {
	if !(share >= 0 && share <= 1) {
		return fmt.Errorf("-dra-share %v: want a fraction in [0, 1]", share)
	}
	return nil
}

// InShare says whether item i of a sequence is in share of it, spread evenly: item i is
// when ⌊(i+1)·share⌋ > ⌊i·share⌋, so any prefix of n items holds ⌊n·share⌋ of them.
func InShare(i int, share float64) bool {
	return int(float64(i+1)*share) > int(float64(i)*share)
}

// MarkDRA marks share of the jobs that ask for cards as asking through claims (spread
// evenly over them); CPU-only jobs are left alone.
func MarkDRA(jobs []JobSpec, share float64) {
	n := 0
	for i := range jobs {
		if jobs[i].CPUOnly {
			continue
		}
		jobs[i].DRA = InShare(n, share)
		n++
	}
}

// DRANode is node i as it stands when its agent runs with cardAPI dra: Tessera's
// inventory with the card-api annotation, and neither the device plugin's card slots nor
// the HAMi registration.
func DRANode(i int) (*corev1.Node, error) {
	n, err := Node(i)
	if err != nil {
		return nil, err
	}
	delete(n.Annotations, api.VolcanoNodeRegister)
	n.Annotations[api.AnnotationCardAPI] = api.CardAPIDRA
	delete(n.Status.Capacity, api.ResourceNumber)
	delete(n.Status.Allocatable, api.ResourceNumber)
	return n, nil
}

// NodeSlice is the ResourceSlice node i's agent publishes, from the agent's own model
// (deviceplugin/dra): one pool named after the node, one device per card.
func NodeSlice(i int) (*resourcev1.ResourceSlice, error) {
	name := NodeName(i)
	pool, ok := dra.Resources(NodeInventory(i), nil, dra.Options{Pool: name}).Pools[name]
	if !ok || len(pool.Slices) != 1 {
		return nil, fmt.Errorf("node %s: the agent's model gave %d slices, want one", name, len(pool.Slices))
	}
	return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + api.DRADriver},
		Spec: resourcev1.ResourceSliceSpec{Driver: api.DRADriver, NodeName: ptr(name),
			Pool:    resourcev1.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1},
			Devices: pool.Slices[0].Devices}}, nil
}

// DeviceClass is the DeviceClass the chart installs for the driver.
func DeviceClass() *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: api.DRADriver},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", api.DRADriver)}}}}}
}

// ClaimTemplate is the job's request as a ResourceClaimTemplate named after the job: Cards
// devices of the driver's class, each consuming the job's memory (MiB, a percentage taken
// of CardMiB) and cores; a whole card (100% of both) names no capacity, the driver's
// default. Several cards are distinct cards (distinctAttribute uuid); a type filter is a
// CEL selector on the card's product name.
func (j JobSpec) ClaimTemplate() (*resourcev1.ResourceClaimTemplate, error) {
	if j.CPUOnly || j.Cards < 1 {
		return nil, fmt.Errorf("job %s asks for no card (cards %d): it has no claim template", j.Name, j.Cards)
	}
	req := &resourcev1.ExactDeviceRequest{DeviceClassName: api.DRADriver,
		AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(j.Cards)}
	mem := int64(j.MemMiB)
	if mem == 0 {
		mem = int64(j.MemPct) * CardMiB / 100
	}
	if mem != CardMiB || j.Cores != 100 {
		req.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{
			api.DRACapacityMemory: dra.MiB(mem), api.DRACapacityCores: *resource.NewQuantity(int64(j.Cores), resource.DecimalSI)}}
	}
	if j.TypeFilter != "" {
		req.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf(
			"device.attributes[%q].%s.contains(%q)", api.DRADriver, dra.AttrProductName, j.TypeFilter)}}}
	}
	spec := resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
		Requests: []resourcev1.DeviceRequest{{Name: ClaimName, Exactly: req}}}}
	if j.Cards > 1 {
		uuid := resourcev1.FullyQualifiedName(api.DRADriver + "/" + string(dra.AttrUUID))
		spec.Devices.Constraints = []resourcev1.DeviceConstraint{{Requests: []string{ClaimName}, DistinctAttribute: &uuid}}
	}
	return &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: j.Name},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: spec}}, nil
}

// ClaimCards adds what the allocated claims of the driver hold to load (by card UUID)
// and to perQueue, as the node agent reads a result (api.DRAConsumedShare; none consumed
// is the whole card). Only claims whose owning pod (its first owner reference) is in
// holders count: the bound pods not finished, with their queues. A result the agent
// would refuse is an error naming the claim.
func ClaimCards(claims []resourcev1.ResourceClaim, holders map[string]string, load map[string]*CardLoad,
	perQueue map[string]fairshare.Amount) (pods int, err error) {
	for _, c := range claims {
		if c.Status.Allocation == nil || len(c.OwnerReferences) == 0 {
			continue
		}
		q, ok := holders[c.OwnerReferences[0].Name]
		if !ok {
			continue
		}
		pods++
		for i, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != api.DRADriver {
				continue
			}
			field := fmt.Sprintf("claim %s/%s: status.allocation.devices.results[%d]", c.Namespace, c.Name, i)
			node, ok := nodeIndex(r.Pool)
			idx, err := strconv.Atoi(strings.TrimPrefix(r.Device, "card-"))
			if !ok || err != nil || !strings.HasPrefix(r.Device, "card-") || idx < 0 || idx >= CardsPerNode {
				return 0, fmt.Errorf("%s: pool %q device %q is no card of the run's nodes", field, r.Pool, r.Device)
			}
			card := NodeInventory(node).Cards[idx]
			mem, cores := card.MemoryMiB, api.DRAMaxCores
			if len(r.ConsumedCapacity) > 0 {
				if mem, cores, err = api.DRAConsumedShare(r.ConsumedCapacity, card, field+".consumedCapacity"); err != nil {
					return 0, err
				}
			}
			l := load[card.UUID]
			if l == nil {
				l = &CardLoad{}
				load[card.UUID] = l
			}
			l.MemoryMiB += mem
			l.Cores += cores
			l.Holders++
			l.Exclusive = l.Exclusive || cores >= 100
			perQueue[q] = perQueue[q].Add(fairshare.Amount{MemoryMiB: float64(mem), Cores: float64(cores)})
		}
	}
	return pods, nil
}

// nodeIndex reads i from NodeName(i).
func nodeIndex(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, NodePrefix)
	if !ok || len(s) < 4 {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0 && NodeName(i) == name
}
