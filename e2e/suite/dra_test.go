package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// The DRA nodes: the agent serves its cards as devices of the DRA driver vgpu.tessera.io
// instead of vGPU slots, beside the device-plugin nodes of the suite.
var draNodes = []cluster.Node{
	{Name: "gpu-dra1", Machine: "a30x4", CardAPI: cluster.CardAPIDRA},
	{Name: "gpu-dra2", Machine: "a30x4", CardAPI: cluster.CardAPIDRA},
}

// Claims on DRA nodes, end to end on the real control plane with the DRA alpha gates on
// (API server, controller-manager, kubelets, vc-scheduler; main_test.go): the chart's
// DeviceClass and RBAC for DRA (rendered with cardAPI dra and a scheduler conf whose
// predicates allocate claims), two nodes whose agents publish their cards in
// ResourceSlices. Volcano's scheduler allocates the claims with Kubernetes' allocator; the
// kubelets prepare them through the agents' DRA drivers; the in-memory runtime applies the
// agents' CDI specs as a CDI runtime does. Checked: two claims of 4096 MiB and 30 cores
// share one card and each container gets exactly its card and those limits; a claim for a
// whole card gets a card, all of it, with 100 cores; prepared claims survive a kubelet restart and an
// agent restart (the checkpoint), and a claim prepared after the agent's restart works; a
// pod deleted while it starts leaves no prepared claim behind; deleting the pods
// unprepares every claim (no spec, no checkpoint entry).
func TestDRAClaimsShareCardsWithExactLimits(t *testing.T) {
	ctx := context.Background()
	defer startDRA(t)()
	namespace := ns(t, "dra")
	defer cleanup(t, namespace)
	claimTemplate(t, namespace, "share-4g-30", "4096Mi", "30")
	claimTemplate(t, namespace, "share-2g-10", "2048Mi", "10")
	claimTemplate(t, namespace, "whole-card", "", "")
	cards := draCards(t, "gpu-dra1")

	start := time.Now()
	submit(t, draJob(namespace, "shares", "share-4g-30", "gpu-dra1", 2))
	shares := waitDRAPods(t, namespace, "shares", 2)
	t.Logf("two pods with a claim of 4096 MiB and 30 cores each Running %s after submission", time.Since(start).Round(100*time.Millisecond))
	var shared string
	for _, p := range shares {
		got := checkDRAContainer(t, p, cards, 4096, 30)
		if shared == "" {
			shared = got
		} else if got != shared {
			t.Errorf("the two shares are on %s and %s: Kubernetes' allocator puts a claim that fits on the first card with room", shared, got)
		}
	}
	// The whole card goes on the other node: Kubernetes 1.34.2's allocator checks a
	// candidate card against what is left of the slice's first card (docs/dra.md, "Known
	// defect"), so on gpu-dra1, whose card-0 holds the shares, it would find no card.
	submit(t, draJob(namespace, "whole", "whole-card", "gpu-dra2", 1))
	whole := waitDRAPods(t, namespace, "whole", 1)
	checkDRAContainer(t, whole[0], draCards(t, "gpu-dra2"), 0, 100)

	// The kubelet restarts; then the agent: the claims stay prepared (the kubelet does not
	// prepare them again, the agent's checkpoint keeps them) and the pods run on.
	prepared := draCheckpointClaims(t, "gpu-dra1")
	if len(prepared) != 2 {
		t.Errorf("gpu-dra1's agent checkpoint holds %d claims %v, want the 2 prepared", len(prepared), prepared)
	}
	cl.KillKubelet("gpu-dra1")
	if err := cl.StartKubelet(ctx, "gpu-dra1"); err != nil {
		t.Fatal(err)
	}
	cl.KillAgent("gpu-dra1")
	if err := cl.StartAgent(ctx, "gpu-dra1"); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitNodeReady(ctx, "gpu-dra1", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if after := draCheckpointClaims(t, "gpu-dra1"); strings.Join(after, ",") != strings.Join(prepared, ",") {
		t.Errorf("after a kubelet and an agent restart the checkpoint holds %v, before %v", after, prepared)
	}
	for _, p := range shares {
		cur, err := cl.Client.CoreV1().Pods(namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || cur.UID != p.UID || cur.Status.Phase != corev1.PodRunning {
			t.Errorf("%s after the restarts: %v %v", p.Name, err, cur.Status.Phase)
		}
	}
	submit(t, draJob(namespace, "after", "share-4g-30", "gpu-dra1", 1))
	after := waitDRAPods(t, namespace, "after", 1)
	checkDRAContainer(t, after[0], cards, 4096, 30)
	t.Logf("kubelet and agent of gpu-dra1 restarted: %d claims still prepared, a new claim prepared after", len(prepared))

	// A pod deleted while it starts: nothing stays prepared for it. (Its claim is smaller:
	// card-0 has 10 of its cores left after three shares of 30.)
	churn := draJob(namespace, "churn", "share-2g-10", "gpu-dra1", 1)
	before := draCheckpointClaims(t, "gpu-dra1")
	submit(t, churn)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ps, err := cl.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "volcano.sh/job-name=churn"})
		return err == nil && len(ps.Items) == 1 && ps.Items[0].Spec.NodeName != "", nil
	}); err != nil {
		t.Fatalf("the churn pod was never bound: %v", err)
	}
	if err := cl.Volcano.BatchV1alpha1().Jobs(namespace).Delete(ctx, "churn", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	_ = cl.Client.CoreV1().Pods(namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{LabelSelector: "volcano.sh/job-name=churn"})
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return strings.Join(draCheckpointClaims(t, "gpu-dra1"), ",") == strings.Join(before, ","), nil
	}); err != nil {
		t.Errorf("gpu-dra1 keeps a claim prepared after its pod was deleted while it started: %v, before %v",
			draCheckpointClaims(t, "gpu-dra1"), before)
	}

	// Deleting the pods unprepares every claim.
	for _, j := range []string{"shares", "whole", "after"} {
		if err := cl.Volcano.BatchV1alpha1().Jobs(namespace).Delete(ctx, j, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range []string{"gpu-dra1", "gpu-dra2"} {
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			specs, _ := filepath.Glob(filepath.Join(cl.CDIDir(node), "vgpu.tessera.io-claim_*"))
			return len(draCheckpointClaims(t, node)) == 0 && len(specs) == 0, nil
		}); err != nil {
			t.Errorf("%s after its pods were deleted: claims %v still prepared", node, draCheckpointClaims(t, node))
		}
	}
}

// startDRA turns the DRA path on for a scenario, as a user with DRA nodes runs it: the
// chart's RBAC and DeviceClass for cardAPI dra, the scheduler with its predicates
// allocating claims, and the DRA nodes, each reported with its devices. The returned
// function undoes all of it, the nodes first.
func startDRA(t *testing.T) func() {
	t.Helper()
	ctx := context.Background()
	draConf := filepath.Join(t.TempDir(), "volcano-scheduler-dra.conf")
	if err := cluster.WriteDRASchedulerConf(cl.Opts.SchedulerConf, draConf); err != nil {
		t.Fatal(err)
	}
	var undo []func()
	done := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	restore, err := cl.EnableDRA(ctx, draConf)
	if err != nil {
		t.Fatalf("the chart's DRA RBAC and DeviceClass: %v", err)
	}
	undo = append(undo, func() {
		if err := restore(); err != nil {
			t.Errorf("putting the harness's RBAC back: %v", err)
		}
	})
	if err := cl.RestartScheduler(ctx, draConf); err != nil {
		done()
		t.Fatal(err)
	}
	undo = append(undo, func() {
		if err := cl.RestartScheduler(ctx, ""); err != nil {
			t.Errorf("scheduler back to the suite's conf: %v", err)
		}
	})
	for _, n := range draNodes {
		start := time.Now()
		if err := cl.AddNode(ctx, n); err != nil {
			done()
			t.Fatal(err)
		}
		undo = append(undo, func() {
			if err := cl.RemoveNode(ctx, n.Name); err != nil {
				t.Errorf("remove %s: %v", n.Name, err)
			}
		})
		devs, _ := cl.DRADevices(ctx, n.Name)
		t.Logf("%s up with %d devices in its ResourceSlice in %s", n.Name, len(devs), time.Since(start).Round(100*time.Millisecond))
	}
	return done
}

// claimTemplate creates a ResourceClaimTemplate for one card of Tessera's DeviceClass:
// memory and cores consumed, or, both empty, the whole card.
func claimTemplate(t *testing.T, namespace, name, memory, cores string) {
	t.Helper()
	req := resourcev1.DeviceRequest{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: cluster.DRADriver,
		AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}
	if memory != "" || cores != "" {
		req.Exactly.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{
			"memory": resource.MustParse(memory), "cores": resource.MustParse(cores)}}
	}
	if _, err := cl.Client.ResourceV1().ResourceClaimTemplates(namespace).Create(context.Background(), &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{req}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// draJob is a VolcanoJob of n pods on node, each with a claim from template for its one
// container.
func draJob(namespace, name, template, node string, n int32) *batchv1alpha1.Job {
	j := workload.Job(namespace, name, "default", n, workload.Task{Name: "t", Replicas: n,
		Containers: []workload.Container{{Name: "main", CPUOnly: true}}})
	spec := &j.Spec.Tasks[0].Template.Spec
	spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &template}}
	spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	return j
}

func waitDRAPods(t *testing.T, namespace, job string, n int) []corev1.Pod {
	t.Helper()
	ps, err := workload.WaitPods(context.Background(), cl.Client, namespace, job, 2*time.Minute, workload.AllPhase(n, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// draCards maps the node's DRA device names to their cards' UUIDs and memory (MiB).
func draCards(t *testing.T, node string) map[string][2]string {
	t.Helper()
	devs, err := cl.DRADevices(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]string{}
	for _, d := range devs {
		uuid := d.Attributes["uuid"].StringValue
		mem := d.Capacity["memory"].Value
		if uuid == nil {
			t.Fatalf("%s: device %s has no uuid attribute", node, d.Name)
		}
		out[d.Name] = [2]string{*uuid, strconv.FormatInt(mem.Value()>>20, 10)}
	}
	return out
}

// checkDRAContainer checks the pod's claim allocation and what its container was given:
// exactly the allocated card (the toolkit's CDI name and the claim's), the limits file
// mounted read-only with the claim's memory (memMiB; 0: the whole card) and cores. It
// returns the device the claim was allocated.
func checkDRAContainer(t *testing.T, p corev1.Pod, cards map[string][2]string, memMiB int64, cores int) string {
	t.Helper()
	ctx := context.Background()
	if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Errorf("%s: claim statuses %+v", p.Name, p.Status.ResourceClaimStatuses)
		return ""
	}
	claim, err := cl.Client.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Errorf("%s: %v", p.Name, err)
		return ""
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Errorf("%s: claim %s allocation %+v", p.Name, claim.Name, claim.Status.Allocation)
		return ""
	}
	res := claim.Status.Allocation.Devices.Results[0]
	card, ok := cards[res.Device]
	if res.Driver != cluster.DRADriver || res.Pool != p.Spec.NodeName || !ok {
		t.Errorf("%s: claim %s allocated %s/%s/%s, want a card of %s", p.Name, claim.Name, res.Driver, res.Pool, res.Device, p.Spec.NodeName)
		return res.Device
	}
	if memMiB == 0 {
		memMiB, _ = strconv.ParseInt(card[1], 10, 64)
	}
	r, err := draRecord(p.Spec.NodeName, p, "main")
	if err != nil {
		t.Errorf("%s: %v", p.Name, err)
		return res.Device
	}
	want := []string{"nvidia.com/gpu=" + card[0], "vgpu.tessera.io/claim=" + string(claim.UID) + "-" + res.Device}
	if strings.Join(r.CDIDevices, " ") != strings.Join(want, " ") {
		t.Errorf("%s: CDI devices %v, want exactly %v", p.Name, r.CDIDevices, want)
	}
	l := r.LimitsFile
	if l[api.EnvVisibleUUIDs] != card[0] || l[api.EnvMemoryLimitMiB] != strconv.FormatInt(memMiB, 10) || l[api.EnvSMLimit] != strconv.Itoa(cores) {
		t.Errorf("%s (claim %s on %s): limits file %v, want %s with %d MiB and %d cores", p.Name, claim.Name, res.Device, l, card[0], memMiB, cores)
	}
	ro := false
	for _, m := range r.Mounts {
		if m.ContainerPath == "/var/run/tessera/limits.env" {
			ro = m.ReadOnly
		}
	}
	if !ro {
		t.Errorf("%s: the limits file is not mounted read-only: %+v", p.Name, r.Mounts)
	}
	t.Logf("%s: claim %s on %s (%s): %s MiB, %s cores, devices %v", p.Name, claim.Name, res.Device, card[0],
		l[api.EnvMemoryLimitMiB], l[api.EnvSMLimit], r.CDIDevices)
	return res.Device
}

// draRecord is the in-memory runtime's record of the pod's container.
func draRecord(node string, p corev1.Pod, container string) (*workload.CRIRecord, error) {
	f := filepath.Join(cl.RecordDir(node), fmt.Sprintf("%s_%s_%s_%s.json", p.Namespace, p.Name, p.UID, container))
	b, err := os.ReadFile(f)
	if err != nil {
		return nil, fmt.Errorf("no runtime record of %s: %w", container, err)
	}
	var r workload.CRIRecord
	return &r, json.Unmarshal(b, &r)
}

// draCheckpointClaims lists the claim UIDs the node's agent has prepared, from its
// checkpoint.
func draCheckpointClaims(t *testing.T, node string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cl.StateDir(node), "dra", "checkpoint.json"))
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	var cp struct {
		Claims map[string]json.RawMessage `json:"claims"`
	}
	if err := json.Unmarshal(b, &cp); err != nil {
		t.Fatalf("%s's DRA checkpoint: %v", node, err)
	}
	var out []string
	for uid := range cp.Claims {
		out = append(out, uid)
	}
	sort.Strings(out)
	return out
}

// An XID on a DRA node's card, with the DRADeviceTaints gate on: the agent's health
// monitor marks the card unhealthy and its device in the ResourceSlice gets the
// NoSchedule taint tessera.io/unhealthy; a claim made then is allocated another card of
// the node, and once the card heals (the agents' --health-recover-after) the taint is
// gone from the slice.
func TestDRATaintKeepsNewClaimsOffAnUnhealthyCard(t *testing.T) {
	defer startDRA(t)()
	ctx := context.Background()
	namespace := ns(t, "dra-taint")
	defer cleanup(t, namespace)
	claimTemplate(t, namespace, "share-4g-30", "4096Mi", "30")
	cards := draCards(t, "gpu-dra2")
	start := time.Now()
	if err := cl.InjectXID("gpu-dra2", 0, 79); err != nil {
		t.Fatal(err)
	}
	tainted := func(want bool) error {
		return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			devs, err := cl.DRADevices(ctx, "gpu-dra2")
			if err != nil {
				return false, nil
			}
			for _, d := range devs {
				if d.Name != "card-0" {
					continue
				}
				has := false
				for _, tn := range d.Taints {
					has = has || tn.Key == "tessera.io/unhealthy" && tn.Effect == resourcev1.DeviceTaintEffectNoSchedule
				}
				return has == want, nil
			}
			return false, nil
		})
	}
	if err := tainted(true); err != nil {
		t.Fatalf("gpu-dra2's card-0 never got the tessera.io/unhealthy taint in its ResourceSlice after XID 79: %v", err)
	}
	t.Logf("XID 79 on gpu-dra2's card-0: tainted in the ResourceSlice %s later", time.Since(start).Round(100*time.Millisecond))
	submit(t, draJob(namespace, "late", "share-4g-30", "gpu-dra2", 1))
	late := waitDRAPods(t, namespace, "late", 1)
	if got := checkDRAContainer(t, late[0], cards, 4096, 30); got == "card-0" {
		t.Errorf("a claim made while card-0 is tainted unhealthy was allocated card-0")
	}
	if err := tainted(false); err != nil {
		t.Errorf("gpu-dra2's card-0 kept its taint after it healed: %v", err)
	} else {
		t.Logf("card-0 healed and untainted %s after the XID", time.Since(start).Round(100*time.Millisecond))
	}
}

// A gang of claims is placed whole or not at all: four pods of minAvailable 4, each with
// a claim of 30 cores, pinned to gpu-dra1, whose allocator (Kubernetes 1.34.2) only lets
// shares onto card-0, where three fit: no pod is bound and no claim stays allocated. Three
// pods of minAvailable 3 then all run.
func TestDRAGangOfClaimsIsAllOrNothing(t *testing.T) {
	defer startDRA(t)()
	ctx := context.Background()
	namespace := ns(t, "dra-gang")
	defer cleanup(t, namespace)
	claimTemplate(t, namespace, "share-4g-30", "4096Mi", "30")
	submit(t, draJob(namespace, "four", "share-4g-30", "gpu-dra1", 4))
	// Long enough for the claims to be created and for several sessions to try the gang.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		pods, err := workload.Pods(ctx, cl.Client, namespace, "four")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				t.Fatalf("%s of a gang of 4 that cannot fit whole was bound to %s", p.Name, p.Spec.NodeName)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	claims, err := cl.Client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		if c.Status.Allocation != nil {
			t.Errorf("claim %s of the unplaced gang is allocated: %+v", c.Name, c.Status.Allocation.Devices.Results)
		}
	}
	t.Logf("a gang of 4 shares that only 3 can take: nothing bound, none of its %d claims allocated after 15 s", len(claims.Items))
	if err := cl.Volcano.BatchV1alpha1().Jobs(namespace).Delete(ctx, "four", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cs, err := cl.Client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(cs.Items) == 0, nil
	}); err != nil {
		t.Fatalf("the unplaced gang's claims were not collected with its pods: %v", err)
	}
	start := time.Now()
	submit(t, draJob(namespace, "three", "share-4g-30", "gpu-dra1", 3))
	// Volcano v1.14.1 keeps the allocations its DRA plugin tried for the gang of four in the
	// scheduler's memory after discarding the gang, and their claims being deleted does not
	// release them: the gang of three, which fits, is refused "cannot allocate all claims"
	// until the scheduler restarts (docs/dra.md, "Known defect of Volcano v1.14.1"). This
	// pins that: when a Volcano release fixes it, this check fails and the restart goes.
	pods, err := workload.WaitPods(ctx, cl.Client, namespace, "three", 30*time.Second, workload.AllPhase(3, corev1.PodRunning))
	if err == nil {
		t.Errorf("the gang of three ran %s after submission without a scheduler restart: Volcano no longer keeps a discarded gang's claim allocations; remove the restart below and update docs/dra.md", time.Since(start).Round(100*time.Millisecond))
	} else {
		t.Logf("the gang of three is still refused 30 s later (%s): the discarded gang's claim allocations are held in the scheduler; restarting it", workload.Summary(pods))
		if err := cl.RestartSchedulerAsIs(ctx); err != nil {
			t.Fatal(err)
		}
	}
	three := waitDRAPods(t, namespace, "three", 3)
	for _, p := range three {
		checkDRAContainer(t, p, draCards(t, "gpu-dra1"), 4096, 30)
	}
	t.Logf("a gang of 3 shares runs whole %s after submission", time.Since(start).Round(100*time.Millisecond))
}
