package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tessera-gpu/tessera/api"
)

// draNode is a node whose agent serves its cards as DRA devices.
func draNode(t *testing.T, name string, cards ...api.Card) *corev1.Node {
	n := tesseraNode(t, name, now.Add(-5*time.Second), cards...)
	n.Annotations[api.AnnotationCardAPI] = api.CardAPIDRA
	return n
}

// claim is a ResourceClaim asking for one card of Tessera's DeviceClass; each share is
// one allocation result on node (nil capacity: no consumed capacity, the whole card).
func claim(ns, name, node string, pods []string, shares ...map[string]string) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: DRADriver, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}}
	if len(shares) == 0 {
		return c
	}
	c.Status.Allocation = &resourcev1.AllocationResult{}
	for _, sh := range shares {
		r := resourcev1.DeviceRequestAllocationResult{Request: "gpu", Driver: DRADriver, Pool: node, Device: sh["device"]}
		if sh["memory"] != "" {
			r.ConsumedCapacity = map[resourcev1.QualifiedName]resource.Quantity{
				"memory": resource.MustParse(sh["memory"]), "cores": resource.MustParse(sh["cores"])}
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
	}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID("uid-" + p)})
	}
	return c
}

// claimPod is a pod whose container "main" uses the claim made from template for it.
func claimPod(ns, name, node, template, madeClaim string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{QueueKey: "research"}},
		Spec: corev1.PodSpec{NodeName: node, ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &template}},
			Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if node == "" {
		p.Status.Phase = corev1.PodPending
	}
	if madeClaim != "" {
		p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: &madeClaim}}
	}
	return p
}

// draCluster is a device-plugin node and a DRA node of two A30s: card 0 holds two claims
// (4096 MiB / 30 cores for pod share-0, 2048 MiB / 10 cores reserved for no pod), card 1 a
// whole-card claim; a pending pod's claim is not allocated; a claim of another driver
// is left out.
func draCluster(t *testing.T) []runtime.Object {
	a30 := func(uuid string, i int) api.Card { return card(uuid, i, "NVIDIA A30", 24576) }
	other := claim("team-a", "nic", "gpu-dra", []string{"share-0"}, map[string]string{"device": "nic-0"})
	other.Spec.Devices.Requests[0].Exactly.DeviceClassName = "nic.example.com"
	other.Status.Allocation.Devices.Results[0].Driver = "nic.example.com"
	return []runtime.Object{
		tesseraNode(t, "gpu-a", now.Add(-10*time.Second), card("GPU-a0", 0, "NVIDIA A100-SXM4-40GB", 40960)),
		draNode(t, "gpu-dra", a30("GPU-d0", 0), a30("GPU-d1", 1)),
		placed(t, vgpuPod("team-a", "train-0", "research", 1, 30000, 50), "gpu-a", api.QoSFixedShare, api.HandoffDone,
			api.CardAssignment{UUID: "GPU-a0", MemoryMiB: 30000, Cores: 50}),
		claim("team-a", "share-0-gpu-x1", "gpu-dra", []string{"share-0"}, map[string]string{"device": "card-0", "memory": "4096Mi", "cores": "30"}),
		claim("team-a", "spare", "gpu-dra", nil, map[string]string{"device": "card-0", "memory": "2Gi", "cores": "10"}),
		claim("team-b", "whole-0-gpu-y2", "gpu-dra", []string{"whole-0"}, map[string]string{"device": "card-1"}),
		claim("team-a", "wait-0-gpu-z3", "", nil),
		other,
		claimPod("team-a", "share-0", "gpu-dra", "share-4g-30", "share-0-gpu-x1"),
		claimPod("team-b", "whole-0", "gpu-dra", "whole-card", "whole-0-gpu-y2"),
		claimPod("team-a", "wait-0", "", "share-4g-30", "wait-0-gpu-z3"),
	}
}

// The DRA node's cards show what its claims consume and who holds them, beside the
// device-plugin node; the API column appears and says each node's card API; the
// versioned JSON carries the claims.
func TestNodesShowWhatDRAClaimsConsume(t *testing.T) {
	golden(t, "nodes-dra.txt", mustRun(t, draCluster(t), "nodes"))
	golden(t, "nodes-dra-wide.txt", mustRun(t, draCluster(t), "nodes", "-o", "wide"))
	golden(t, "nodes-dra.json", mustRun(t, draCluster(t), "nodes", "-o", "json"))
	var list NodeCardsList
	if err := json.Unmarshal([]byte(mustRun(t, draCluster(t), "nodes", "gpu-dra", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d nodes, want gpu-dra", len(list.Items))
	}
	n := list.Items[0]
	if n.CardAPI != api.CardAPIDRA || n.ClaimsUnknown != "" || len(n.Cards) != 2 {
		t.Fatalf("gpu-dra: %+v", n.NodeView)
	}
	c0, c1 := n.Cards[0], n.Cards[1]
	if c0.UsedMemoryMiB != 4096+2048 || c0.UsedCores != 40 || c0.Tenants != 2 || c0.CapacityMiB != 24576 || c0.QoS != string(api.DefaultQoS) ||
		len(c0.Claims) != 2 || len(c0.Pods) != 1 || c0.Pods[0].Pod != "share-0" || c0.Pods[0].Claim != "share-0-gpu-x1" {
		t.Errorf("card 0: %+v", c0)
	}
	if c1.UsedMemoryMiB != 24576 || c1.UsedCores != 100 || c1.QoS != "exclusive" || len(c1.Claims) != 1 || !c1.Claims[0].Whole {
		t.Errorf("card 1 (a whole-card claim): %+v", c1)
	}
	// The vgpu plugin's memory oversubscription is for device-plugin cards: a DRA card's
	// capacity is its memory, as its ResourceSlice publishes it.
	conf := filepath.Join(t.TempDir(), "volcano-scheduler.conf")
	if err := os.WriteFile(conf, []byte("tiers:\n- plugins:\n  - name: vgpu\n    arguments:\n      vgpu.MemoryOversubscription: 2.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	list = NodeCardsList{}
	if err := json.Unmarshal([]byte(mustRun(t, draCluster(t), "nodes", "-o", "json", "--scheduler-conf="+conf)), &list); err != nil {
		t.Fatal(err)
	}
	if a, d := list.Items[0].Cards[0], list.Items[1].Cards[0]; a.CapacityMiB != 2*40960 || d.CapacityMiB != 24576 {
		t.Errorf("with oversubscription 2: device-plugin card capacity %d MiB (want %d), DRA card %d MiB (want 24576)", a.CapacityMiB, 2*40960, d.CapacityMiB)
	}
}

// forbidClaims makes the claims' list answer err.
func forbidClaims(objs []runtime.Object, err error) func(string, *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error) {
	client := fake.NewSimpleClientset(objs...)
	client.PrependReactor("list", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
	return func(string, *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error) {
		return client, "team-a", nil
	}
}

var (
	claimsForbidden = apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, "",
		errors.New(`User "alice" cannot list resource "resourceclaims" at the cluster scope`))
	claimsNotServed = apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, "")
)

func runWith(t *testing.T, client func(string, *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error), command string, args ...string) (string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := Env{Stdout: &out, Stderr: &errOut, Now: func() time.Time { return now }, Client: client}
	if err := Run(context.Background(), env, command, args); err != nil {
		t.Fatalf("tessera %s %v: %v\nstderr: %s", command, args, err, errOut.String())
	}
	return out.String(), errOut.String()
}

// Claims the account may not list, or a cluster without the DRA API: a DRA node's usage
// is unknown (never zero) with a warning; a cluster of device-plugin nodes prints as
// before, without a warning.
func TestUnreadableClaimsAreUnknownOnDRANodesAndNothingElsewhere(t *testing.T) {
	for name, err := range map[string]error{"forbidden": claimsForbidden, "not served": claimsNotServed} {
		out, errOut := runWith(t, forbidClaims(draCluster(t), err), "nodes")
		if name == "forbidden" {
			golden(t, "nodes-dra-unknown.txt", out)
		}
		if !strings.Contains(out, "unknown/24576") || !strings.Contains(errOut, "warning: partial view: ") ||
			!strings.Contains(errOut, "claimed memory and cores of DRA nodes' cards") {
			t.Errorf("%s: DRA cards not unknown, or no warning:\n%s\nstderr: %s", name, out, errOut)
		}
		js, _ := runWith(t, forbidClaims(draCluster(t), err), "nodes", "gpu-dra", "-o", "json")
		var list NodeCardsList
		if err := json.Unmarshal([]byte(js), &list); err != nil || len(list.Items) != 1 || list.Items[0].ClaimsUnknown == "" {
			t.Errorf("%s: JSON does not say the claims are unknown: %v\n%s", name, err, js)
		}
		pod, _ := runWith(t, forbidClaims(draCluster(t), err), "pod", "share-0")
		if !strings.Contains(pod, "Claims:     unknown: ") {
			t.Errorf("%s: pod view does not say its claims are unknown:\n%s", name, pod)
		}
		dp, errOut := runWith(t, forbidClaims(cluster(t), err), "nodes")
		golden(t, "nodes.txt", dp)
		if errOut != "" {
			t.Errorf("%s: a device-plugin cluster warns: %s", name, errOut)
		}
	}
}

// A pod with a Tessera claim shows the claim's card and share; a pending one says its
// claim waits for the allocator; explain says who places such pods.
func TestPodAndExplainShowAPodsClaims(t *testing.T) {
	objs := draCluster(t)
	golden(t, "pod-dra.txt", mustRun(t, objs, "pod", "share-0"))
	golden(t, "pod-dra.json", mustRun(t, objs, "pod", "whole-0", "-n", "team-b", "-o", "json"))
	golden(t, "explain-dra.txt", mustRun(t, objs, "explain", "wait-0"))
	var v PodView
	if err := json.Unmarshal([]byte(mustRun(t, objs, "pod", "share-0", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Claims) != 1 || v.Claims[0].Claim != "share-0-gpu-x1" || !v.Claims[0].Allocated || len(v.Claims[0].Shares) != 1 ||
		v.Claims[0].Shares[0].UUID != "GPU-d0" || v.Claims[0].Shares[0].MemoryMiB != 4096 || v.Claims[0].Shares[0].Cores != 30 {
		t.Errorf("pod share-0's claims: %+v", v.Claims)
	}
	if !strings.Contains(v.Next, "DRA allocator gave its claims these cards") {
		t.Errorf("next step %q", v.Next)
	}
	e := explain(t, objs, "wait-0")
	if e.Status != ExplainDRA || !strings.Contains(e.Reason, "Kubernetes' DRA allocator in Volcano's predicates") ||
		len(e.Claims) != 1 || e.Claims[0].Allocated || len(e.Nodes) != 0 {
		t.Errorf("explain wait-0: %+v", e)
	}
	if e := explain(t, objs, "share-0"); e.Status != ExplainDRA || len(e.Claims) != 1 || !e.Claims[0].Allocated {
		t.Errorf("explain share-0 shows no allocation: %+v", e)
	}
	// A pod without claims keeps its verdict.
	if e := explain(t, objs, "train-0"); e.Status != ExplainPlaced || len(e.Claims) != 0 {
		t.Errorf("explain train-0: %+v", e)
	}
}

// What the agent would refuse is a problem under the node, and the claim's usage is
// not booked; a claim that names no card of the node too.
func TestMalformedAllocationsAreProblemsNotUsage(t *testing.T) {
	a30 := card("GPU-d0", 0, "NVIDIA A30", 24576)
	objs := []runtime.Object{draNode(t, "gpu-dra", a30),
		claim("team-a", "half-mib", "gpu-dra", nil, map[string]string{"device": "card-0", "memory": "1.5Mi", "cores": "10"}),
		claim("team-a", "too-many-cores", "gpu-dra", nil, map[string]string{"device": "card-0", "memory": "1Gi", "cores": "101"}),
		claim("team-a", "ghost", "gpu-dra", nil, map[string]string{"device": "card-7", "memory": "1Gi", "cores": "10"}),
	}
	var list NodeCardsList
	if err := json.Unmarshal([]byte(mustRun(t, objs, "nodes", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	n := list.Items[0]
	if n.Cards[0].UsedMemoryMiB != 0 || n.Cards[0].UsedCores != 0 || len(n.Problems) != 3 {
		t.Fatalf("node %+v", n.NodeView)
	}
	for i, want := range []string{
		`claim team-a/ghost: device card-7 is no card of the node's inventory`,
		`claim team-a/half-mib: status.allocation.devices.results[0].consumedCapacity[memory]: "1536Ki" is not a positive whole number of MiB`,
		`claim team-a/too-many-cores: status.allocation.devices.results[0].consumedCapacity[cores]: "101" is not a whole percent from 0 to 100`,
	} {
		if !strings.HasPrefix(n.Problems[i], want) {
			t.Errorf("problem %d: %q, want %q", i, n.Problems[i], want)
		}
	}
}

// An account that may list claims only in its namespace sees its pods' claims; the DRA
// nodes' usage, which other namespaces' claims make up too, stays unknown.
func TestANamespaceReaderSeesItsPodsClaimsAndUnknownNodes(t *testing.T) {
	client := fake.NewSimpleClientset(draCluster(t)...)
	client.PrependReactor("list", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "team-a" {
			return false, nil, nil
		}
		return true, nil, claimsForbidden
	})
	env := func(_ string, o *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error) {
		if o.Context.Namespace != "" {
			return client, o.Context.Namespace, nil
		}
		return client, "team-a", nil
	}
	out, errOut := runWith(t, env, "pod", "share-0", "-o", "json")
	var v PodView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if v.ClaimsUnknown != "" || len(v.Claims) != 1 || !v.Claims[0].Allocated || v.Claims[0].Shares[0].MemoryMiB != 4096 {
		t.Errorf("pod share-0 as a namespace reader: claims %+v, unknown %q", v.Claims, v.ClaimsUnknown)
	}
	if !strings.Contains(errOut, "only namespace team-a's are read") {
		t.Errorf("stderr lacks the partial view of claims:\n%s", errOut)
	}
	nodes, _ := runWith(t, env, "nodes", "gpu-dra")
	if !strings.Contains(nodes, "unknown/24576") {
		t.Errorf("a DRA node's usage is shown from one namespace's claims:\n%s", nodes)
	}
	if pod, _ := runWith(t, env, "pod", "whole-0", "-n", "team-b"); !strings.Contains(pod, "Claims:     unknown: ") {
		t.Errorf("a pod of another namespace does not say its claims are unknown:\n%s", pod)
	}
}
