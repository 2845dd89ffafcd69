package metrics

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
	"github.com/tessera-gpu/tessera/deviceplugin/usage"
)

// hostileNode has one started container per pod UID in uids, each with the region the
// agent created; the caller then alters them.
func hostileNode(t *testing.T, uids ...string) (*cards.Registry, *records.Store, livePods) {
	t.Helper()
	reg := cards.NewRegistry([]api.Card{{UUID: "GPU-a", Index: 0, Model: "L4", MemoryMiB: 23034, Shares: 8, Healthy: true}}, nil)
	store := &records.Store{Root: t.TempDir()}
	live := livePods{}
	started := time.Unix(1700000000, 0)
	for _, uid := range uids {
		r := records.Record{Namespace: "ns", Pod: uid, UID: uid, Container: "c", SlotIDs: []string{"GPU-a::0"},
			Cards: []api.CardAssignment{{UUID: "GPU-a", MemoryMiB: 1000, Cores: 30}}, QoS: api.QoSFixedShare, RegionVolume: true}
		if err := store.Prepare(&r, "version=1\n"); err != nil {
			t.Fatal(err)
		}
		if err := store.MarkStarted(&r, started); err != nil {
			t.Fatal(err)
		}
		live[types.UID(uid)] = true
	}
	return reg, store, live
}

// kubeletPods stands in for the kubelet's pods directory in these tests.
func kubeletPods(store *records.Store) string { return filepath.Join(store.Root, "kubelet-pods") }

// regionOf is where the kubelet's side of the pod's region volume holds container c's
// region (the directory is made; the file is the test's to write).
func regionOf(t *testing.T, store *records.Store, uid string) string {
	t.Helper()
	dir := filepath.Join(kubeletPods(store), uid, "volumes", "kubernetes.io~empty-dir", api.RegionVolumeName)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, api.RegionFile("c"))
}

func writeRegion(t *testing.T, path string, usedBytes uint64) {
	t.Helper()
	r := &usage.Region{Version: usage.LayoutVersion, Procs: []usage.Proc{{Slot: 0, PID: 7, StartTime: 1, Used: [usage.MaxCards]uint64{0: usedBytes}}}}
	b, err := usage.Encode(r)
	if err != nil {
		t.Skip(err)
	}
	if err := os.WriteFile(path, b, 0o666); err != nil {
		t.Fatal(err)
	}
}

// gatherPromptly scrapes reg and fails when the scrape takes longer than limit.
func gatherPromptly(t *testing.T, reg *prometheus.Registry, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := reg.Gather()
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(limit):
		t.Fatalf("a scrape still running after %v", limit)
	}
	return time.Since(start)
}

func waitGoroutines(t *testing.T, atMost int) {
	t.Helper()
	for i := 0; i < 200 && runtime.NumGoroutine() > atMost; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > atMost {
		t.Fatalf("%d goroutines, want at most %d", n, atMost)
	}
}

// Containers made their regions a FIFO, a link to a host file, a directory, and a file
// grown far past a region: each scrape answers at once, refuses those four (counted by a
// fixed reason, readable 0) and reads the good one; no goroutine is left behind.
func TestAScrapeSurvivesHostileRegions(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("regions exist on Linux nodes only")
	}
	reg, store, live := hostileNode(t, "fifo", "good", "grown", "link", "dir")
	writeRegion(t, regionOf(t, store, "good"), 5<<20)
	for uid, alter := range map[string]func(string) error{
		"fifo":  func(p string) error { return syscall.Mkfifo(p, 0o666) },
		"link":  func(p string) error { return os.Symlink("/etc/hostname", p) },
		"dir":   func(p string) error { return os.Mkdir(p, 0o755) },
		"grown": nil,
	} {
		p := regionOf(t, store, uid)
		if alter == nil {
			writeRegion(t, p, 0)
			if err := os.Truncate(p, 1<<40); err != nil {
				t.Skip(err)
			}
			continue
		}
		if err := alter(p); err != nil {
			t.Fatal(err)
		}
	}
	promReg := prometheus.NewPedanticRegistry()
	m := New(promReg, Sources{Node: "n1", Cards: reg, Store: store, KubeletPodsDir: kubeletPods(store), Pods: live, ProcRoot: t.TempDir()})
	before := runtime.NumGoroutine()
	for i := 0; i < 5; i++ {
		gatherPromptly(t, promReg, time.Second)
	}
	waitGoroutines(t, before)
	// The counter is gathered beside the collector that counts, so a scrape shows it with
	// or without that scrape's refusals; read it between scrapes.
	for reason, want := range map[string]float64{ReasonNotRegularFile: 15, ReasonSize: 5, ReasonLayout: 0, ReasonTimeout: 0, ReasonError: 0} {
		if got := testutil.ToFloat64(m.regionErrors.WithLabelValues(reason)); got != want {
			t.Errorf("tessera_agent_region_read_errors_total{reason=%q} = %v after five scrapes, want %v", reason, got, want)
		}
	}
	want := `
# HELP tessera_container_region_readable 1 when the agent can read the container's shared region, 0 when it is of another layout version or corrupt; absent for a container without the region volume (its region is in its /dev/shm).
# TYPE tessera_container_region_readable gauge
tessera_container_region_readable{container="c",namespace="ns",node="n1",pod="dir"} 0
tessera_container_region_readable{container="c",namespace="ns",node="n1",pod="fifo"} 0
tessera_container_region_readable{container="c",namespace="ns",node="n1",pod="good"} 1
tessera_container_region_readable{container="c",namespace="ns",node="n1",pod="grown"} 0
tessera_container_region_readable{container="c",namespace="ns",node="n1",pod="link"} 0
# HELP tessera_container_gpu_memory_used_bytes Device memory the container's live processes hold on the card, read from vgpu-core's shared region.
# TYPE tessera_container_gpu_memory_used_bytes gauge
tessera_container_gpu_memory_used_bytes{container="c",index="0",namespace="ns",node="n1",pod="good",uuid="GPU-a"} 5.24288e+06
`
	if err := testutil.GatherAndCompare(promReg, strings.NewReader(want),
		"tessera_container_region_readable", "tessera_container_gpu_memory_used_bytes"); err != nil {
		t.Error(err)
	}
}

// A region read that does not return (a hung filesystem; a region file itself cannot
// block a read) costs a scrape its budget, not more: the containers not read by then are
// skipped and counted as timeouts, the stuck read holds up one goroutine however many
// scrapes follow (they skip the regions), and scrapes read again once it returns.
func TestAScrapeSkipsRegionsItHasNoTimeForAndHoldsUpOneGoroutineAtMost(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("regions exist on Linux nodes only")
	}
	reg, store, live := hostileNode(t, "u-a", "u-b")
	writeRegion(t, regionOf(t, store, "u-a"), 1<<20)
	writeRegion(t, regionOf(t, store, "u-b"), 2<<20)
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "region_read_errors_total"}, []string{"reason"})
	c := newCollector(Sources{Node: "n1", Cards: reg, Store: store, KubeletPodsDir: kubeletPods(store), Pods: live, ProcRoot: t.TempDir(),
		RegionReadBudget: 200 * time.Millisecond}, errs)
	release := make(chan struct{})
	c.read = func(s *usage.Sampler, path string) (usage.ContainerUsage, error) {
		if strings.Contains(path, "/u-a/") {
			<-release
		}
		return readRegion(s, path)
	}
	promReg := prometheus.NewPedanticRegistry()
	promReg.MustRegister(c, errs)
	before := runtime.NumGoroutine()

	if d := gatherPromptly(t, promReg, time.Second); d < 200*time.Millisecond {
		t.Errorf("the scrape returned after %v, before its budget, with a read outstanding", d)
	}
	if got := testutil.ToFloat64(errs.WithLabelValues(ReasonTimeout)); got != 2 {
		t.Errorf("%v containers counted as not read in time, want 2 (u-a blocks, u-b comes after it)", got)
	}
	for i := 0; i < 5; i++ {
		if d := gatherPromptly(t, promReg, time.Second); d > 100*time.Millisecond {
			t.Errorf("a scrape while the earlier read is stuck took %v; it should skip the regions at once", d)
		}
	}
	waitGoroutines(t, before+1) // the one stuck reader, however many scrapes
	if got := testutil.ToFloat64(errs.WithLabelValues(ReasonTimeout)); got != 12 {
		t.Errorf("%v timeouts after six scrapes of two containers, want 12", got)
	}

	close(release)
	waitGoroutines(t, before)
	want := `
# HELP tessera_container_gpu_memory_used_bytes Device memory the container's live processes hold on the card, read from vgpu-core's shared region.
# TYPE tessera_container_gpu_memory_used_bytes gauge
tessera_container_gpu_memory_used_bytes{container="c",index="0",namespace="ns",node="n1",pod="u-a",uuid="GPU-a"} 1.048576e+06
tessera_container_gpu_memory_used_bytes{container="c",index="0",namespace="ns",node="n1",pod="u-b",uuid="GPU-a"} 2.097152e+06
`
	if err := testutil.GatherAndCompare(promReg, strings.NewReader(want), "tessera_container_gpu_memory_used_bytes"); err != nil {
		t.Errorf("once the read returned: %v", err)
	}
}

// A container whose pod has no region volume (the admission webhook was off when it was
// created) keeps its region in its /dev/shm: the agent reads nothing of the host for it,
// counts no error (it is by design), and reports nothing of its region or hook library,
// which it cannot see (no readable gauge at 0: that would raise TesseraRegionUnreadable).
func TestAContainerWithoutTheRegionVolumeIsReportedWithoutRegionOrError(t *testing.T) {
	reg, store, live := hostileNode(t, "shm")
	r, err := store.ReadRecord("shm", "c")
	if err != nil {
		t.Fatal(err)
	}
	r.RegionVolume = false
	if err := store.Prepare(r, "version=1\n"); err != nil {
		t.Fatal(err)
	}
	// A file where the volume would be must not be read: the pod spec did not pass.
	writeRegion(t, regionOf(t, store, "shm"), 5<<20)
	promReg := prometheus.NewPedanticRegistry()
	New(promReg, Sources{Node: "n1", Cards: reg, Store: store, KubeletPodsDir: kubeletPods(store), Pods: live, ProcRoot: t.TempDir()})
	mfs, err := promReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			found[mf.GetName()] += v
			if mf.GetName() == "tessera_container_region_readable" {
				found["readable series"]++
			}
		}
	}
	if found["readable series"] != 0 {
		t.Errorf("region_readable: %v series; want none", found["readable series"])
	}
	if found["tessera_container_gpu_memory_limit_bytes"] == 0 {
		t.Error("the container's limits are missing: the scrape skipped it altogether")
	}
	for _, name := range []string{"tessera_container_hook_loaded", "tessera_container_gpu_processes", "tessera_container_gpu_memory_used_bytes", "tessera_agent_region_read_errors_total"} {
		if found[name] != 0 {
			t.Errorf("%s = %v, want nothing reported", name, found[name])
		}
	}
}

// Scrapes in a row each read the regions: the reader gives its token back before the
// scrape sees the last result, so the next scrape never finds an earlier read still
// holding it (before, a scrape right after another could skip every region).
func TestScrapesInARowEachReadTheRegions(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("regions exist on Linux nodes only")
	}
	reg, store, live := hostileNode(t, "u-a", "u-b")
	writeRegion(t, regionOf(t, store, "u-a"), 1<<20)
	writeRegion(t, regionOf(t, store, "u-b"), 2<<20)
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "region_read_errors_total"}, []string{"reason"})
	c := newCollector(Sources{Node: "n1", Cards: reg, Store: store, KubeletPodsDir: kubeletPods(store), Pods: live, ProcRoot: t.TempDir()}, errs)
	byUID, err := store.Records()
	if err != nil {
		t.Fatal(err)
	}
	var recs []*records.Record
	for _, rs := range byUID {
		recs = append(recs, rs...)
	}
	for i := 0; i < 500; i++ {
		for k, r := range c.readRegions(recs) {
			if r.err != nil {
				t.Fatalf("scrape %d: %s not read: %v", i+1, recs[k].Pod, r.err)
			}
		}
	}
}
