package metrics

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/hookenv"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
	"github.com/tessera-gpu/tessera/deviceplugin/usage"
)

const mib = 1 << 20

// queueKey is the label (and annotation) Volcano's job controller puts on a job's pods.
const queueKey = "volcano.sh/queue-name"

// descs are the scrape-time series. Card series: node, uuid, index, model. Per container
// and card: node, namespace, pod, container, uuid, index. Per container: node, namespace,
// pod, container.
type descs struct {
	memory, shares, healthy, assignedMem, assignedSM       *prometheus.Desc
	limitMem, limitSM, usedMem, usedSM, capped, hookLoaded *prometheus.Desc
	processes, regionReadable, queue, mig                  *prometheus.Desc
}

func newDescs(node string) descs {
	card := []string{"uuid", "index", "model"}
	container := []string{"namespace", "pod", "container", "uuid", "index"}
	pod := []string{"namespace", "pod", "container"}
	c := prometheus.Labels{"node": node}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_"+name, help, labels, c)
	}
	return descs{
		memory:      d("card_memory_bytes", "Device memory of the card.", card),
		shares:      d("card_shares", "Containers the card may serve at once (kubelet slots).", card),
		healthy:     d("card_healthy", "1 when the card is healthy, 0 when not.", card),
		assignedMem: d("card_assigned_memory_bytes", "Memory limits of the containers set up on the card.", card),
		assignedSM:  d("card_assigned_cores_ratio", "Sum of the SM limits of the containers set up on the card, as a share of the card (0-1 when not over-committed).", card),
		limitMem:    d("container_gpu_memory_limit_bytes", "A container's memory limit on one of its cards.", container),
		limitSM:     d("container_gpu_sm_limit_ratio", "A container's SM limit on one of its cards, as a share of the card (1 = uncapped).", container),
		usedMem:     d("container_gpu_memory_used_bytes", "Device memory the container's live processes hold on the card, read from vgpu-core's shared region.", container),
		usedSM:      d("container_gpu_sm_utilization_ratio", "Share of the card's SMs the container was charged over vgpu-core's last one-second period (SM-limited cards only).", container),
		capped:      d("container_gpu_sm_capped", "1 while vgpu-core meters the container's launches on the card, 0 when not.", container),
		hookLoaded:  d("container_hook_loaded", "1 when vgpu-core initialised the started container's shared region (the hook library loaded), 0 when not.", pod),
		processes:   d("container_gpu_processes", "Live processes registered in the container's shared region.", pod),
		queue: d("container_queue_info", "1 for every vGPU container, labelled with its Volcano queue (the pod's "+queueKey+" label; empty when it has none): join on namespace, pod, container to sum use by queue.",
			[]string{"namespace", "pod", "container", "queue"}),
		mig: d("container_mig_device_info", "1 for every whole MIG instance a container was given, labelled with its parent card (uuid, index, as on the container's other series) and the MIG device (mig, profile): join on namespace, pod, container, uuid.",
			[]string{"namespace", "pod", "container", "uuid", "index", "mig", "profile"}),
		regionReadable: d("container_region_readable", "1 when the agent can read the container's shared region, 0 when it is of another layout version or corrupt; absent for a container without the region volume (its region is in its /dev/shm).", pod),
	}
}

func (d descs) all() []*prometheus.Desc {
	return []*prometheus.Desc{d.memory, d.shares, d.healthy, d.assignedMem, d.assignedSM, d.limitMem, d.limitSM,
		d.usedMem, d.usedSM, d.capped, d.hookLoaded, d.processes, d.regionReadable, d.queue, d.mig}
}

var _ prometheus.Collector = (*collector)(nil)

type collector struct {
	src      Sources
	d        descs
	hostPIDs bool
	// errs counts regions refused or not read, by reason (tessera_agent_region_read_errors_total).
	errs   *prometheus.CounterVec
	budget time.Duration
	// reader is a token: the goroutine reading a scrape's regions holds it. A read stuck in
	// the kernel (a hung filesystem) then holds up one goroutine, however many scrapes come;
	// scrapes meanwhile skip the regions.
	reader chan struct{}
	// read reads one container's region (tests replace it).
	read func(s *usage.Sampler, path string) (usage.ContainerUsage, error)
}

func newCollector(src Sources, errs *prometheus.CounterVec) *collector {
	c := &collector{src: src, d: newDescs(src.Node), hostPIDs: usage.SeesHostPIDs(src.ProcRoot), errs: errs,
		budget: src.RegionReadBudget, reader: make(chan struct{}, 1), read: readRegion}
	if c.budget <= 0 {
		c.budget = DefaultRegionReadBudget
	}
	c.reader <- struct{}{}
	if !c.hostPIDs {
		klog.InfoS("Metrics: the agent does not see the host's processes (hostPID off); containers' GPU memory includes processes that exited without freeing until the container reclaims it",
			"procRoot", src.ProcRoot)
	}
	return c
}

func readRegion(s *usage.Sampler, path string) (usage.ContainerUsage, error) {
	u, _, err := s.Container(path)
	return u, err
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.d.all() {
		ch <- d
	}
}

// Collect reads everything once per scrape: the records, then each live container's
// region through one usage.Sampler (one scan of the host's processes at most).
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	inv := c.src.Cards.Inventory()
	index := make(map[string]string, len(inv.Cards))
	profile := map[string]string{} // MIG device UUID -> profile
	migSM := map[string]float64{}  // MIG device UUID -> its share of the card's SMs, when known
	for _, card := range inv.Cards {
		index[card.UUID] = strconv.Itoa(card.Index)
		for _, m := range card.MIGInstances {
			profile[m.UUID] = m.Profile
			if m.SMCount > 0 && card.SMCount > 0 {
				migSM[m.UUID] = float64(m.SMCount) / float64(card.SMCount)
			}
		}
	}
	assignedMem, assignedSM := map[string]float64{}, map[string]float64{}
	recs, err := c.src.Store.Records()
	if err != nil {
		klog.ErrorS(err, "Metrics: cannot read container records")
	}
	var live []*records.Record
	for uid, rs := range recs {
		if c.src.Pods.Exists(types.UID(uid)) {
			live = append(live, rs...)
		} // else gone; its directory waits for garbage collection
	}
	sort.Slice(live, func(i, j int) bool {
		if live[i].UID != live[j].UID {
			return live[i].UID < live[j].UID
		}
		return live[i].Container < live[j].Container
	})
	usages := c.readRegions(live)
	for k, r := range live {
		gauge(ch, c.d.queue, 1, r.Namespace, r.Pod, r.Container, c.queueOf(r))
		u := c.containerUsage(ch, r, usages[k])
		for i, card := range r.Cards {
			assignedMem[card.UUID] += float64(card.MemoryMiB) * mib
			if card.IsMIG() {
				// An instance holds its own SMs whole: the card's share is theirs, not 100%.
				assignedSM[card.UUID] += migSM[card.MIG]
			} else {
				assignedSM[card.UUID] += float64(hookenv.SMLimit(card.Cores)) / 100
			}
			labels := []string{r.Namespace, r.Pod, r.Container, card.UUID, index[card.UUID]}
			gauge(ch, c.d.limitMem, float64(card.MemoryMiB)*mib, labels...)
			gauge(ch, c.d.limitSM, float64(hookenv.SMLimit(card.Cores))/100, labels...)
			if card.IsMIG() {
				gauge(ch, c.d.mig, 1, r.Namespace, r.Pod, r.Container, card.UUID, index[card.UUID], card.MIG, profile[card.MIG])
			}
			if u == nil || i >= usage.MaxCards {
				continue
			}
			cu := u.Cards[i] // the region's cards are the container's CUDA ordinals: the record's order
			gauge(ch, c.d.usedMem, float64(cu.UsedBytes), labels...)
			gauge(ch, c.d.capped, boolValue(cu.Capped), labels...)
			if cu.Measured {
				gauge(ch, c.d.usedSM, cu.SMRatio, labels...)
			}
		}
	}
	for _, card := range inv.Cards {
		l := []string{card.UUID, strconv.Itoa(card.Index), card.Model}
		gauge(ch, c.d.memory, float64(card.MemoryMiB)*mib, l...)
		gauge(ch, c.d.shares, float64(card.Shares), l...)
		gauge(ch, c.d.healthy, boolValue(card.Healthy), l...)
		gauge(ch, c.d.assignedMem, assignedMem[card.UUID], l...)
		gauge(ch, c.d.assignedSM, assignedSM[card.UUID], l...)
	}
}

// regionRead is what reading one container's region gave.
type regionRead struct {
	u   usage.ContainerUsage
	err error
}

// errNotRead is the result of a region the scrape had no time left for.
var errNotRead = errors.New("not read within the scrape's time for regions")

// errNoVolume is the result of a container that keeps its region in its own /dev/shm,
// which the agent cannot read (its pod has no region volume as Tessera makes it).
var errNoVolume = errors.New("the region is in the container's /dev/shm: its pod has no region volume")

// regionPath is where the agent reads a container's region: on the host side of its pod's
// region volume, as the kubelet lays out an emptyDir; "" when the container has none.
func (c *collector) regionPath(r *records.Record) string {
	if !r.RegionVolume || c.src.KubeletPodsDir == "" {
		return ""
	}
	return filepath.Join(c.src.KubeletPodsDir, r.UID, "volumes", "kubernetes.io~empty-dir", api.RegionVolumeName,
		api.RegionFile(r.Container))
}

// readRegions reads the regions of recs, in order, in one goroutine (one usage.Sampler:
// one scan of the host's processes at most), and waits for it at most the scrape's
// budget: regions not read by then are errNotRead. The files are opened so that none can
// block (usage.ReadFile), so only a stuck filesystem or a slow host makes the budget
// matter; the goroutine stops at the first region after the budget, and while it is stuck
// later scrapes read no region at all.
func (c *collector) readRegions(recs []*records.Record) []regionRead {
	out := make([]regionRead, len(recs))
	for i := range out {
		out[i].err = errNotRead
	}
	if len(recs) == 0 {
		return out
	}
	select {
	case <-c.reader:
	default:
		klog.V(2).InfoS("Metrics: an earlier scrape's region read has not returned; this scrape reads no region")
		return out
	}
	paths := make([]string, len(recs))
	for i, r := range recs {
		paths[i] = c.regionPath(r)
	}
	type indexed struct {
		i   int
		res regionRead
	}
	results := make(chan indexed, len(paths)) // never blocks the reader
	var expired atomic.Bool
	go func() {
		// The token goes back before the last result: a scrape that got every result
		// finds it there, so scrapes in a row each read the regions.
		released := false
		release := func() {
			if !released {
				released = true
				c.reader <- struct{}{}
			}
		}
		defer release()
		s := usage.NewSampler(c.src.ProcRoot, c.hostPIDs)
		for i, p := range paths {
			if expired.Load() {
				return
			}
			res := regionRead{err: errNoVolume}
			if p != "" {
				u, err := c.read(s, p)
				res = regionRead{u, err}
			}
			if i == len(paths)-1 {
				release()
			}
			results <- indexed{i, res}
		}
	}()
	timer := time.NewTimer(c.budget)
	defer timer.Stop()
	for n := 0; n < len(paths); n++ {
		select {
		case r := <-results:
			out[r.i] = r.res
		case <-timer.C:
			expired.Store(true)
			return out
		}
	}
	return out
}

// containerUsage reports what reading a container's region gave: its usage, nil when
// there is none to report. A started container whose region no process initialised has
// not loaded the hook library (or never touched CUDA). A region refused or not read is
// counted by reason; the reasons are fixed words, never anything from the region.
func (c *collector) containerUsage(ch chan<- prometheus.Metric, r *records.Record, res regionRead) *usage.ContainerUsage {
	labels := []string{r.Namespace, r.Pod, r.Container}
	err := res.err
	hook := func(v float64) {
		if r.Started != nil {
			gauge(ch, c.d.hookLoaded, v, labels...)
		}
	}
	refused := func(reason string) {
		c.errs.WithLabelValues(reason).Inc()
		klog.V(2).InfoS("Metrics: cannot read a container's shared region", "pod", klog.KRef(r.Namespace, r.Pod),
			"container", r.Container, "reason", reason, "err", err)
	}
	switch {
	case err == nil:
		hook(1)
		gauge(ch, c.d.regionReadable, 1, labels...)
		gauge(ch, c.d.processes, float64(res.u.LiveProcs), labels...)
		return &res.u
	case errors.Is(err, errNoVolume):
		// By design, not an error: nothing to count, nothing known of its hook, and no
		// readable gauge (0 there means a region the agent should read and cannot).
	case errors.Is(err, errNotRead):
		refused(ReasonTimeout)
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, usage.ErrNotRegion):
		hook(0)
	case errors.Is(err, usage.ErrLayout):
		// Another layout version: the hook library is there, of another release.
		refused(ReasonLayout)
		hook(1)
		gauge(ch, c.d.regionReadable, 0, labels...)
	case errors.Is(err, usage.ErrNotRegularFile):
		refused(ReasonNotRegularFile)
		gauge(ch, c.d.regionReadable, 0, labels...)
	case errors.Is(err, usage.ErrSize):
		refused(ReasonSize)
		gauge(ch, c.d.regionReadable, 0, labels...)
	default:
		refused(ReasonError)
		gauge(ch, c.d.regionReadable, 0, labels...)
	}
	return nil
}

func (c *collector) queueOf(r *records.Record) string {
	pod, ok := c.src.Pods.Get(r.Namespace, r.Pod)
	if !ok {
		return ""
	}
	if q := pod.Labels[queueKey]; q != "" {
		return q
	}
	return pod.Annotations[queueKey]
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
