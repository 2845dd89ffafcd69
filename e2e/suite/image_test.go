package suite

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// imagesDir is where `make images` wrote the archives (make e2e passes its IMAGES_DIR).
func imagesDir() string { return os.Getenv("TESSERA_E2E_IMAGES") }

// schedulerArchive finds this machine's vc-scheduler archive in images.json.
func schedulerArchive(t *testing.T) (archive, revision string) {
	t.Helper()
	dir := imagesDir()
	b, err := os.ReadFile(filepath.Join(dir, "images.json"))
	if err != nil {
		t.Skipf("no image archives (%v): make images writes them, make test builds them before CI's make e2e", err)
	}
	var sum struct {
		Revision string
		Images   []struct {
			Name      string
			Platforms []struct{ Platform, Archive string }
		}
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatalf("images.json: %v", err)
	}
	for _, img := range sum.Images {
		for _, p := range img.Platforms {
			if img.Name == "vc-scheduler" && p.Platform == "linux/"+runtime.GOARCH {
				return filepath.Join(dir, p.Archive), sum.Revision
			}
		}
	}
	t.Fatalf("images.json in %s has no vc-scheduler for linux/%s", dir, runtime.GOARCH)
	return "", ""
}

// The scheduler runs from its image's root file system, as a node's container runtime
// would run it: chroot into the unpacked layers as the image's user (65532), nothing from
// the build machine. It takes over from the built scheduler and places a two-pod vGPU gang
// with exact handoffs; then the built one comes back.
func TestSchedulerRunsFromItsImage(t *testing.T) {
	archive, revision := schedulerArchive(t)
	img, err := cluster.UnpackImage(archive, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if img.User != "65532:65532" {
		t.Errorf("image user %q, want the non-root 65532:65532", img.User)
	}
	if got := img.Labels["org.opencontainers.image.revision"]; got != revision {
		t.Errorf("image revision label %q, images.json says %q", got, revision)
	}
	n := ns(t, "from-image")
	defer cleanup(t, n)
	ctx := context.Background()
	if err := cl.RunSchedulerFromImage(ctx, img); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cl.RunSchedulerFromImage(ctx, nil); err != nil {
			t.Errorf("back to the built scheduler: %v", err)
		}
	}()
	pid := cl.SchedulerPID()
	root, err := os.Readlink(filepathProc(pid, "root"))
	if err != nil || root != img.Root {
		t.Errorf("scheduler (pid %d) runs in root %q (%v), want the image's %s", pid, root, err, img.Root)
	}
	status, _ := os.ReadFile(filepathProc(pid, "status"))
	if !strings.Contains(string(status), "\nUid:\t65532\t65532\t65532\t65532\n") {
		t.Errorf("scheduler (pid %d) does not run as 65532:\n%s", pid, status)
	}
	exe, _ := os.Readlink(filepathProc(pid, "exe"))
	t.Logf("scheduler pid %d: root %s, exe %s, image revision %s", pid, root, exe, revision)

	job := workload.Job(n, "gang", "default", 2, workload.Task{Name: "t", Replicas: 2,
		Containers: []workload.Container{{Name: "main", Cards: 1, MemPct: 25, Cores: 30}}})
	submit(t, job)
	pods, err := workload.WaitPods(ctx, cl.Client, n, job.Name, 2*time.Minute, workload.AllPhase(2, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	checkHandoff(t, pods)
	noOvercommit(t)
}

func filepathProc(pid int, what string) string {
	return filepath.Join("/proc", strconv.Itoa(pid), what)
}
