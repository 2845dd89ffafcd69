// Package cli implements the tessera command's cluster views: nodes, pod, explain
// and report. It reads the cluster (nodes, pods, Volcano's queues, the ResourceClaims of
// Tessera's DRA driver) once into a Snapshot and computes every view from
// it with the same placement maths and the same reading rules as the vgpu scheduler plugin, so
// that what the CLI shows is what the scheduler sees.
package cli

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// QueueKey is the annotation (and label) Volcano's job controller puts on every pod
// of a VolcanoJob, naming the job's queue.
const QueueKey = "volcano.sh/queue-name"

// Snapshot is the cluster as the CLI read it: nodes, the pods bound to them, and
// the vgpu plugin's arguments that shape the view.
type Snapshot struct {
	Args  pluginargs.Args
	Now   time.Time
	Nodes []corev1.Node
	// Pods are the non-terminated pods of every namespace the account may list.
	Pods []corev1.Pod
	// Queues are Volcano's queues (none where Volcano's CRDs are not installed).
	Queues []QueueSpec
	// Claims are the ResourceClaims that ask for or hold Tessera's DRA devices.
	Claims []ClaimView
	// ClaimsUnread says why the ResourceClaims could not be read ("" when they were):
	// DRA nodes' usage is then unknown.
	ClaimsUnread string
	// claimsIn is the one namespace whose claims were read where the account may not
	// list every namespace's ("" otherwise).
	claimsIn string
	// Unread says what the account may not read and what the views lack for it.
	Unread []string
}

// Scope is what a command must read.
type Scope struct {
	// Namespace is read when the account may not list every namespace's pods.
	Namespace string
	// AllNamespaces: every namespace's pods or an error, never a fallback (-A).
	AllNamespaces bool
	// NeedNodes: no view without the Nodes (an account that may not list them gets
	// an error); otherwise they are read where allowed.
	NeedNodes bool
}

// Load reads nodes and pods through client. args are the scheduler's vgpu
// arguments (pluginargs.Defaults unless the user points at the scheduler's conf).
// An account that may read only its own namespace still gets what it may read (its
// pods, their assignments); Snapshot.Unread says what is missing.
func Load(ctx context.Context, client kubernetes.Interface, args pluginargs.Args, now time.Time, scope Scope) (*Snapshot, error) {
	s := &Snapshot{Args: args, Now: now}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		s.Nodes = nodes.Items
	case apierrors.IsForbidden(err) && !scope.NeedNodes:
		s.Unread = append(s.Unread, "your account may not list Nodes, so cards, their models and other tenants' use are not shown")
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("this command reads the cluster's Nodes (cluster-scoped), which your account may not list "+
			"(the Helm chart's <release>-tessera-viewer ClusterRole grants what it reads; \"tessera pod NAME\" needs only your namespace's pods): %w", err)
	default:
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	live := metav1.ListOptions{FieldSelector: "status.phase!=Succeeded,status.phase!=Failed"}
	pods, err := client.CoreV1().Pods("").List(ctx, live)
	if apierrors.IsForbidden(err) && !scope.AllNamespaces && scope.Namespace != "" {
		s.Unread = append(s.Unread, fmt.Sprintf("your account may not list pods in every namespace; only namespace %s is read, "+
			"so cards may look freer than they are (use -A to fail instead)", scope.Namespace))
		pods, err = client.CoreV1().Pods(scope.Namespace).List(ctx, live)
	}
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	queues, err := loadQueues(ctx, client, args.Resources.Memory, args.Resources.Cores)
	if apierrors.IsForbidden(err) {
		s.Unread = append(s.Unread, "your account may not list Volcano queues, so queue shares are not shown")
	} else if err != nil {
		return nil, err
	}
	s.Queues = queues
	for _, p := range pods.Items {
		// Fake clientsets ignore field selectors; filter again.
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			s.Pods = append(s.Pods, p)
		}
	}
	s.Claims, s.ClaimsUnread, s.claimsIn = loadClaims(ctx, client, scope)
	if s.ClaimsUnread != "" && s.usesDRA() {
		s.Unread = append(s.Unread, s.ClaimsUnread+", so the claimed memory and cores of DRA nodes' cards and pods' claims are unknown")
	}
	s.resolveClaims()
	sort.Slice(s.Nodes, func(i, j int) bool { return s.Nodes[i].Name < s.Nodes[j].Name })
	sort.Slice(s.Pods, func(i, j int) bool {
		if s.Pods[i].Namespace != s.Pods[j].Namespace {
			return s.Pods[i].Namespace < s.Pods[j].Namespace
		}
		return s.Pods[i].Name < s.Pods[j].Name
	})
	return s, nil
}

// usesDRA: a node serves DRA devices or a pod references a ResourceClaim, so the
// views need the claims.
func (s *Snapshot) usesDRA() bool {
	for i := range s.Nodes {
		if servesDRA(&s.Nodes[i]) {
			return true
		}
	}
	for i := range s.Pods {
		if len(s.Pods[i].Spec.ResourceClaims) > 0 {
			return true
		}
	}
	return false
}

// Inventory source values.
const (
	SourceTessera = "tessera"
	SourceHAMi    = "hami"
)

// nodeInventory reads a node's cards by the scheduler's own rules (api.ReadNodeInventory)
// and says which annotation they came from. nil, "", nil: the node has no vGPU cards.
func nodeInventory(node *corev1.Node, now time.Time, heartbeatTimeout time.Duration) (*api.NodeInventory, string, error) {
	source := ""
	switch {
	case node.Annotations[api.AnnotationInventory] != "":
		source = SourceTessera
	case node.Annotations[api.VolcanoNodeRegister] != "":
		source = SourceHAMi
	}
	inv, err := api.ReadNodeInventory(node, now, heartbeatTimeout)
	return inv, source, err
}

// podAssignment reads the cards a placed pod holds by the plugin's own rules and
// resource names.
func (s *Snapshot) podAssignment(pod *corev1.Pod) ([]api.ContainerAssignment, api.QoSClass, bool, error) {
	return (*api.Decoders)(nil).PodCards(pod, s.Args.Resources)
}

// Queue is the Volcano queue of a pod, "" when it names none.
func Queue(pod *corev1.Pod) string {
	if q := pod.Annotations[QueueKey]; q != "" {
		return q
	}
	return pod.Labels[QueueKey]
}

// nodeState is one node's cards with the pods that hold them.
type nodeState struct {
	node   *corev1.Node
	source string
	// err explains an inventory the scheduler cannot use (malformed, stale).
	err error
	// engine is nil for nodes without a usable inventory.
	engine  *placement.Node
	tenants map[string][]Tenant // card UUID -> pods on it
	// problems are the pods on the node whose cards cannot be accounted.
	problems []string
}

// Tenant is one container's share of a card.
type Tenant struct {
	Namespace string       `json:"namespace"`
	Pod       string       `json:"pod"`
	Container string       `json:"container"`
	Queue     string       `json:"queue,omitempty"`
	QoS       api.QoSClass `json:"qos"`
	MemoryMiB int64        `json:"memoryMiB"`
	Cores     int          `json:"cores"`
	// MIG is the MIG device the container holds whole, "" for a share of the card.
	MIG string `json:"mig,omitempty"`
	// Claim is the ResourceClaim the pod holds the share through (DRA nodes; Container
	// is then empty: the claim's limits hold for every container that references it).
	// Added within cli.tessera.io/v1.
	Claim string `json:"claim,omitempty"`
}

// nodeStates builds every node's card usage from the pods bound to it, exactly as
// the plugin's session does (less its in-flight store, which lives in the scheduler).
func (s *Snapshot) nodeStates() []*nodeState {
	byNode := map[string][]*corev1.Pod{}
	for i := range s.Pods {
		p := &s.Pods[i]
		if p.Spec.NodeName != "" {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
	}
	out := make([]*nodeState, 0, len(s.Nodes))
	for i := range s.Nodes {
		n := &s.Nodes[i]
		st := &nodeState{node: n, tenants: map[string][]Tenant{}}
		out = append(out, st)
		inv, source, err := nodeInventory(n, s.Now, s.Args.HeartbeatTimeout)
		st.source, st.err = source, err
		if err != nil || inv == nil {
			continue
		}
		st.engine = placement.NewNode(n.Name, inv, s.Args.MemoryOversubscription)
		for _, p := range byNode[n.Name] {
			if !s.Args.Resources.HasVGPURequest(p) {
				continue
			}
			cs, qos, ok, err := s.podAssignment(p)
			switch {
			case err != nil:
				st.problems = append(st.problems, fmt.Sprintf("%s/%s: %v", p.Namespace, p.Name, err))
				continue
			case !ok:
				st.problems = append(st.problems, fmt.Sprintf("%s/%s: bound without an assignment; its cards are not accounted", p.Namespace, p.Name))
				continue
			}
			for _, e := range st.engine.Account(cs, placement.Tenancy{QoS: qos, IdleOnly: api.HoldsIdleOnly(p.Annotations)}) {
				st.problems = append(st.problems, fmt.Sprintf("%s/%s: %v", p.Namespace, p.Name, e))
			}
			if qos == "" {
				qos = api.DefaultQoS
			}
			for _, c := range cs {
				for _, a := range c.Cards {
					st.tenants[a.UUID] = append(st.tenants[a.UUID], Tenant{Namespace: p.Namespace, Pod: p.Name,
						Container: c.Name, Queue: Queue(p), QoS: qos, MemoryMiB: a.MemoryMiB, Cores: a.Cores, MIG: a.MIG})
				}
			}
		}
	}
	return out
}

// FindPod returns the pod namespace/name from the snapshot, or nil.
func (s *Snapshot) FindPod(namespace, name string) *corev1.Pod {
	for i := range s.Pods {
		if s.Pods[i].Namespace == namespace && s.Pods[i].Name == name {
			return &s.Pods[i]
		}
	}
	return nil
}
