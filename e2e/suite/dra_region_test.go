package suite

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/dra"
	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
)

// A claim pod's region on its region volume, end to end: with Tessera's admission webhook
// in front of a namespace, a VolcanoJob whose pod asks for a card only through a claim
// template of class vgpu.tessera.io (no vGPU resources) comes back from the webhook with
// the region volume mounted in its container; the DRA node's agent, seeing every pod of
// the claim mount it, names the claim's region on that volume in the limits file
// (TESSERA_SHARED_REGION), and its usage metrics report the claim as a container of the
// pod ("claim-<claim UID>") with the claim's memory limit.
func TestDRAClaimPodGetsTheRegionVolume(t *testing.T) {
	ctx := context.Background()
	defer startDRA(t)()
	namespace := ns(t, "dra-region")
	o, err := cl.Client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if o.Labels == nil {
		o.Labels = map[string]string{}
	}
	o.Labels[cluster.AdmissionLabel] = "on"
	if _, err := cl.Client.CoreV1().Namespaces().Update(ctx, o, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a, err := cl.StartAdmission(ctx, admissionConfig)
	if err != nil {
		t.Fatalf("start tessera-admission: %v", err)
	}
	defer func() {
		a.Stop()
		cleanup(t, namespace)
	}()
	claimTemplate(t, namespace, "share-4g-30", "4096Mi", "30")

	start := time.Now()
	submit(t, draJob(namespace, "region", "share-4g-30", "gpu-dra1", 1))
	p := waitDRAPods(t, namespace, "region", 1)[0]
	t.Logf("a claim pod behind the webhook Running %s after submission", time.Since(start).Round(100*time.Millisecond))
	if err := api.CheckRegionVolume(&p, "main"); err != nil {
		t.Errorf("%s: the webhook gave the claim pod no region volume: %v (volumes %+v)", p.Name, err, p.Spec.Volumes)
	}
	checkDRAContainer(t, p, draCards(t, "gpu-dra1"), 4096, 30)
	if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("%s: claim statuses %+v", p.Name, p.Status.ResourceClaimStatuses)
	}
	claim, err := cl.Client.ResourceV1().ResourceClaims(namespace).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := draRecord(p.Spec.NodeName, p, "main")
	if err != nil {
		t.Fatal(err)
	}
	want := dra.RegionPath(string(claim.UID), dra.RegionVolume)
	if got := r.LimitsFile[api.EnvSharedRegion]; got != want {
		t.Errorf("%s: the limits file names the region %q, want %q on the region volume", p.Name, got, want)
	}

	container := `container="claim-` + string(claim.UID) + `"`
	var series map[string]float64
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		series, err = agentSeries(ctx, p.Spec.NodeName, "tessera_container_gpu_memory_limit_bytes", `pod="`+p.Name+`"`, container)
		return err == nil && len(series) == 1, nil
	}); err != nil {
		t.Errorf("%s's agent reports no memory limit for %s of %s: %v %v", p.Spec.NodeName, container, p.Name, series, err)
	}
	for s, v := range series {
		if v != 4096<<20 {
			t.Errorf("%s = %v, want 4096 MiB", s, v)
		}
	}
}
