package dra

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/hookenv"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

// withRegionVolume gives the pod the region volume as the admission webhook adds it,
// mounted in the containers named.
func withRegionVolume(p *corev1.Pod, containers ...string) *corev1.Pod {
	p.Spec.Volumes = append(p.Spec.Volumes, api.RegionVolume(len(containers)))
	for i := range p.Spec.Containers {
		for _, c := range containers {
			if p.Spec.Containers[i].Name == c {
				p.Spec.Containers[i].VolumeMounts = append(p.Spec.Containers[i].VolumeMounts, api.RegionVolumeMount())
			}
		}
	}
	return p
}

func reservedFor(claim *resourceapi.ResourceClaim, pods ...*corev1.Pod) *resourceapi.ResourceClaim {
	for _, p := range pods {
		claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return claim
}

func getter(pods ...*corev1.Pod) PodGetter {
	return func(ns, name string) (*corev1.Pod, bool) {
		for _, p := range pods {
			if p.Namespace == ns && p.Name == name {
				return p, true
			}
		}
		return nil, false
	}
}

func TestChooseRegion(t *testing.T) {
	claim := func() *resourceapi.ResourceClaim { c := claimWith(); c.Name = "gpu-a"; return c }
	onVolume := withRegionVolume(claimPod("uid-1", "p1", "gpu-a"), "main")
	bare := claimPod("uid-2", "p2", "gpu-a")
	// A second container that does not reference the claim need not mount the volume.
	sidecar := withRegionVolume(claimPod("uid-3", "p3", "gpu-a"), "main")
	sidecar.Spec.Containers = append(sidecar.Spec.Containers, corev1.Container{Name: "log"})
	// Another container referencing the claim without the mount spoils it.
	second := withRegionVolume(claimPod("uid-4", "p4", "gpu-a"), "main")
	second.Spec.Containers = append(second.Spec.Containers, corev1.Container{Name: "side",
		Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu-0"}}}})
	// The claim made from a template, as the pod's status names it.
	templ := withRegionVolume(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "p5", UID: "uid-5"},
		Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("t")}},
			Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}},
		Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("gpu-a")}}}}, "main")
	stale := withRegionVolume(claimPod("uid-other", "p1", "gpu-a"), "main")
	notPod := claim()
	notPod.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{APIGroup: "example.com", Resource: "things", Name: "x", UID: "u"}}

	tests := []struct {
		name   string
		claim  *resourceapi.ResourceClaim
		pods   PodGetter
		want   string
		reason string
	}{
		{"every pod mounts the volume in the containers that use the claim", reservedFor(claim(), onVolume, sidecar, templ),
			getter(onVolume, sidecar, templ), RegionVolume, ""},
		{"a pod without the volume", reservedFor(claim(), onVolume, bare), getter(onVolume, bare), RegionShm, `pod team-a/p2: the pod has no volume "tessera-region"`},
		{"a second container of the claim without the mount", reservedFor(claim(), second), getter(second), RegionShm,
			`container "side" does not mount volume "tessera-region"`},
		{"a pod the node does not know yet", reservedFor(claim(), onVolume), getter(), RegionShm, "pod team-a/p1 (uid uid-1) is not known"},
		{"a pod of that name with another UID", reservedFor(claim(), onVolume), getter(stale), RegionShm, "is not known"},
		{"no reservation", claim(), getter(onVolume), RegionShm, "reserved for no pod"},
		{"a consumer that is not a pod", notPod, getter(onVolume), RegionShm, `reserved for things "x"`},
		{"no pod lookup", reservedFor(claim(), onVolume), nil, RegionShm, "does not look up pods"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := ChooseRegion(tt.claim, tt.pods)
			if got != tt.want || !strings.Contains(why, tt.reason) || (tt.reason == "") != (why == "") {
				t.Errorf("ChooseRegion = %q, %q; want %q with a reason containing %q", got, why, tt.want, tt.reason)
			}
		})
	}
}

func regionLine(t *testing.T, stateDir, uid string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "pods", uid, claimContainer, records.LimitsFileName))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, api.EnvSharedRegion+"=") {
			return strings.TrimPrefix(l, api.EnvSharedRegion+"=")
		}
	}
	t.Fatalf("the limits file names no region:\n%s", b)
	return ""
}

// What a claim's containers are told about their region, through the preparer: a claim
// whose pod has the region volume keeps its regions there, named after the claim; one
// whose pod has none keeps them in the pod's /dev/shm, also named after the claim, so
// two claims of one pod never share a region; after a restart the choice stands whatever
// the pods look like then; an entry of an earlier agent keeps the one path it had.
func TestPrepareNamesARegionPerClaimInEachPod(t *testing.T) {
	dir := t.TempDir()
	const volUID, shmUID, shm2UID = "3f0c1e9a-0000-4000-8000-0000000000c1", "3f0c1e9a-0000-4000-8000-0000000000c2",
		"3f0c1e9a-0000-4000-8000-0000000000c3"
	onVolume := withRegionVolume(claimPod("0d000000-0000-4000-8000-00000000000d", "vol", "c-vol"), "main")
	twoClaims := claimPod("0e000000-0000-4000-8000-00000000000e", "two", "c-shm", "c-shm2")
	cfg := PrepareConfig{StateDir: filepath.Join(dir, "dra"), CDISpecDir: filepath.Join(dir, "cdi"), CardKind: "nvidia.com/gpu",
		Pool: "node-a", Container: hookenv.Container{HookLibrary: "/usr/lib/libvgpu.so", PreloadHostFile: filepath.Join(dir, "preload")},
		Pods: getter(onVolume, twoClaims)}
	p, err := NewPreparer(cfg, staticCards(testCards), nil)
	if err != nil {
		t.Fatal(err)
	}
	claim := func(uid, name, device string, pod *corev1.Pod) *resourceapi.ResourceClaim {
		c := reservedFor(claimWith(result(device, consumedOf("2Gi", "10"))), pod)
		c.Name, c.UID = name, types.UID(uid)
		return c
	}
	claims := []*resourceapi.ResourceClaim{claim(volUID, "c-vol", "card-0", onVolume), claim(shmUID, "c-shm", "card-0", twoClaims),
		claim(shm2UID, "c-shm2", "card-1", twoClaims)}
	prepareAll := func(p *Preparer) {
		t.Helper()
		res, err := p.PrepareResourceClaims(context.Background(), claims)
		if err != nil {
			t.Fatal(err)
		}
		for uid, r := range res {
			if r.Err != nil {
				t.Fatalf("prepare %s: %v", uid, r.Err)
			}
		}
	}
	prepareAll(p)
	want := map[string]string{
		volUID:  "/var/run/tessera-region/tessera-claim-" + volUID + ".region",
		shmUID:  "/dev/shm/tessera-claim-" + shmUID + ".region",
		shm2UID: "/dev/shm/tessera-claim-" + shm2UID + ".region",
	}
	for uid, path := range want {
		if got := regionLine(t, cfg.StateDir, uid); got != path {
			t.Errorf("claim %s: region %s, want %s", uid, got, path)
		}
		if got := RegionPath(uid, p.Prepared()[uid].Region); got != path {
			t.Errorf("claim %s: the checkpoint's region is %s, want %s", uid, got, path)
		}
	}
	if f := RegionFileName(volUID); f != filepath.Base(want[volUID]) {
		t.Errorf("RegionFileName = %s, want %s", f, filepath.Base(want[volUID]))
	}
	// The CDI spec's environment repeats the file's region.
	spec, err := os.ReadFile(filepath.Join(cfg.CDISpecDir, ClaimSpecFile(volUID)))
	if err != nil || !strings.Contains(string(spec), api.EnvSharedRegion+"="+want[volUID]) {
		t.Errorf("the claim's CDI spec does not name its region %s (%v):\n%s", want[volUID], err, spec)
	}

	// The usage metrics' records of each pod's claims name the region each limits file
	// names: the agent would read the one on the volume where the pod keeps it.
	recs := ClaimRecords(p.Prepared(), []*corev1.Pod{onVolume, twoClaims})
	if r := recs[string(onVolume.UID)]; len(r) != 1 || !r[0].RegionVolume || r[0].Pod != "vol" ||
		api.RegionPathIn(r[0].RegionVolume, r[0].Container) != want[volUID] || r[0].Cards[0].MemoryMiB != 2048 {
		t.Errorf("records of the pod on the volume: %+v, want one on the volume naming %s", r, want[volUID])
	}
	if r := recs[string(twoClaims.UID)]; len(r) != 2 || r[0].RegionVolume || r[1].RegionVolume ||
		api.RegionPathIn(false, r[0].Container) != want[shmUID] || api.RegionPathIn(false, r[1].Container) != want[shm2UID] {
		t.Errorf("records of the pod of two claims: %+v, want one per claim in /dev/shm", r)
	}

	// A restarted agent that no longer finds the pods prepares the claims again as they were.
	cfg.Pods = getter()
	again, err := NewPreparer(cfg, staticCards(testCards), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(cfg.StateDir, "pods")); err != nil {
		t.Fatal(err)
	}
	prepareAll(again)
	for uid, path := range want {
		if got := regionLine(t, cfg.StateDir, uid); got != path {
			t.Errorf("after a restart, claim %s: region %s, want %s as first chosen", uid, got, path)
		}
	}

	// A claim an earlier agent prepared (no region in its entry) keeps the one path per pod.
	ck, err := readCheckpoint(filepath.Join(cfg.StateDir, CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	legacy := ck.Claims[shmUID]
	legacy.Region = RegionLegacy
	ck.Claims[shmUID] = legacy
	if err := writeCheckpoint(filepath.Join(cfg.StateDir, CheckpointFile), ck); err != nil {
		t.Fatal(err)
	}
	old, err := NewPreparer(cfg, staticCards(testCards), nil)
	if err != nil {
		t.Fatal(err)
	}
	prepareAll(old)
	if got := regionLine(t, cfg.StateDir, shmUID); got != "/dev/shm/tessera-claim.region" {
		t.Errorf("a legacy entry's region is %s, want /dev/shm/tessera-claim.region", got)
	}
}

func TestCheckpointRegion(t *testing.T) {
	c := sampleCheckpoint()
	e := c.Claims[testUID]
	for _, r := range []string{RegionLegacy, RegionShm, RegionVolume} {
		e.Region = r
		c.Claims[testUID] = e
		b, err := EncodeCheckpoint(c)
		if err != nil {
			t.Fatalf("region %q: %v", r, err)
		}
		got, err := DecodeCheckpoint(b)
		if err != nil || got.Claims[testUID].Region != r {
			t.Errorf("region %q decodes as %+v (%v)", r, got, err)
		}
	}
	b := []byte(`{"version":"v1","claims":{"` + testUID + `":{"namespace":"n","name":"c","devices":[],"region":"/tmp"}}}`)
	if _, err := DecodeCheckpoint(b); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), `region: "/tmp"`) {
		t.Errorf("an unknown region decodes with %v, want ErrCheckpoint naming region \"/tmp\"", err)
	}
}
