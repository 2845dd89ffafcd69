package vgpu

import (
	"fmt"
	"math"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/pluginargs"
	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
	"github.com/tessera-gpu/tessera/plugins/vgpu/dracost"
)

// Node order for pods whose cards come through ResourceClaims. On a DRA node, Volcano's
// predicates plugin and the Kubernetes allocator decide whether a pod's claims fit and
// which card each one gets: the plugin cannot choose the card. It can choose among the
// nodes. It scores each DRA node as it would score a device-plugin node for the same
// request: the pod's binpack or spread policy, its filters and weights, over what the
// claims already hold of the node's cards. Volcano's choice of node then follows the
// pod's policy. A DRA pod placed in this session is booked on the session's copy of its
// node where Tessera would put it, so the next pod's score sees it; the allocator's own
// card choice is read back by the next session.

// draOrder scores DRA nodes for pending DRA pods; one per session.
type draOrder struct {
	args   pluginargs.Args
	ledger *book.Ledger
	// claims are the session's claims by namespace/name; never written after newDRAOrder.
	claims map[string]*resourceapi.ResourceClaim
	// claimKeys names the claims a pod references (namespace/name).
	claimKeys func(*corev1.Pod) []string

	// mu guards what follows: Volcano scores nodes on parallel workers.
	mu sync.Mutex
	// nodes are the session's copies of DRA nodes, with this session's placements.
	nodes map[string]*placement.Node
	// reqs is each task's request; nil: it has nothing to place on a DRA node.
	reqs map[vapi.TaskID]*placement.Request
	// booked is what each task placed this session holds of its node's copy.
	booked map[vapi.TaskID]draBooking
}

type draBooking struct {
	node    string
	fit     []api.ContainerAssignment
	tenancy placement.Tenancy
}

func newDRAOrder(args pluginargs.Args, ledger *book.Ledger, claims map[string]*resourceapi.ResourceClaim,
	claimKeys func(*corev1.Pod) []string) *draOrder {
	return &draOrder{args: args, ledger: ledger, claims: claims, claimKeys: claimKeys, nodes: map[string]*placement.Node{},
		reqs: map[vapi.TaskID]*placement.Request{}, booked: map[vapi.TaskID]draBooking{}}
}

// score is the DRA node's score for the task, 0..100 plus the topology term; false when
// the task places no claim there or Tessera's book says its claims do not fit (the
// predicates plugin decides that; this only orders).
func (o *draOrder) score(task *vapi.TaskInfo, node string) (float64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	req := o.requestLocked(task)
	if req == nil {
		return 0, false
	}
	n := o.nodeLocked(node)
	if n == nil {
		return 0, false
	}
	s, ferr := placement.ScorePod(n, req)
	if ferr != nil {
		return 0, false
	}
	return s, true
}

// onAllocate books a DRA task Volcano placed on a DRA node in the session's copy.
func (o *draOrder) onAllocate(e *framework.Event) {
	task := e.Task
	if task == nil || task.NodeName == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	req := o.requestLocked(task)
	n := o.nodeLocked(task.NodeName)
	if req == nil || n == nil {
		return
	}
	fit, ferr := placement.FitPod(n, req)
	if ferr != nil {
		return // the allocator found room Tessera's book does not show; the next session reads it
	}
	if err := n.Reserve(fit.Containers, req.Tenancy()); err != nil {
		return
	}
	o.booked[task.UID] = draBooking{node: task.NodeName, fit: fit.Containers, tenancy: req.Tenancy()}
}

// onDeallocate takes back what onAllocate booked, when Volcano discards the placement.
func (o *draOrder) onDeallocate(e *framework.Event) {
	if e.Task == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	b, ok := o.booked[e.Task.UID]
	if !ok {
		return
	}
	delete(o.booked, e.Task.UID)
	if n := o.nodes[b.node]; n != nil {
		for _, err := range n.Release(b.fit, b.tenancy) {
			klog.ErrorS(err, "Releasing a DRA pod's session booking", "task", klog.KRef(e.Task.Namespace, e.Task.Name))
		}
	}
}

func (o *draOrder) nodeLocked(name string) *placement.Node {
	if n, ok := o.nodes[name]; ok {
		return n
	}
	n := o.ledger.DRANode(name) // a copy, or nil for a node that is not a DRA node
	o.nodes[name] = n
	return n
}

func (o *draOrder) requestLocked(task *vapi.TaskInfo) *placement.Request {
	if req, ok := o.reqs[task.UID]; ok {
		return req
	}
	var req *placement.Request
	if task.Pod != nil && len(task.Pod.Spec.ResourceClaims) > 0 {
		var err error
		req, err = draRequest(task.Pod, o.claimKeys(task.Pod), o.claims, o.args)
		if err != nil {
			klog.V(4).InfoS("DRA pod's claims are not scored by Tessera", "task", klog.KRef(task.Namespace, task.Name), "err", err)
			req = nil
		}
	}
	o.reqs[task.UID] = req
	return req
}

// draRequest is what a pod's claims (keys, namespace/name) not yet allocated ask of Tessera's cards, as a
// placement request with the pod's own options and policies: one container request
// per claim request, its count of cards each with the memory and cores it names (a
// request that names no memory asks for all of each card's). Nil when the pod has no
// such claim (or none the session sees yet).
func draRequest(pod *corev1.Pod, keys []string, claims map[string]*resourceapi.ResourceClaim, args pluginargs.Args) (*placement.Request, error) {
	var cs []api.ContainerRequest
	for _, key := range keys {
		c := claims[key]
		if c == nil || c.Status.Allocation != nil {
			continue
		}
		reqs, ok, err := dracost.CardRequests(c)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		for _, r := range reqs {
			if r.Count > math.MaxInt32 {
				return nil, fmt.Errorf("%s.count: %d cards", r.Field, r.Count)
			}
			cr := api.ContainerRequest{Name: r.Field, Cards: int(r.Count), MemoryMiB: r.MemoryMiB, Cores: int(r.Cores)}
			if cr.MemoryMiB == 0 {
				cr.MemoryPercent = 100
			}
			cs = append(cs, cr)
		}
	}
	if len(cs) == 0 {
		return nil, nil
	}
	return args.RequestFor(cs, pod.Annotations)
}
