package scale

import (
	"math"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// results is the run's third step: throughput, latency, the curve of pods bound,
// cards, shares and the profiled pods, from what the burst saw.
func results(b *burst, cfg Config) error {
	if err := figures(b.res, b.tr, b.submitted, b.claims, cfg); err != nil {
		return err
	}
	first := firstSubmit(b.submitted)
	b.res.BoundBySecond = boundBySecond(b.tr.Pods(), b.tr.BoundAt(), b.submitted, first, b.res.Seconds)
	for _, s := range b.samples {
		b.res.Samples = append(b.res.Samples, Sample{Seconds: round(s.at.Sub(first).Seconds(), 1), CPU: round(s.cpu, 2), RSSMiB: round(s.rssMiB, 1)})
	}
	if cp, err := ReadCPUProfiles(cfg.RunDir); err != nil {
		return err
	} else if cp != nil {
		b.res.ProfiledPods = boundWithin(b.tr.BoundAt(), cp.Start, cp.End)
	}
	return nil
}

// jobOf is the job a pod belongs to (the label Volcano's job controller sets).
func jobOf(p *corev1.Pod) string { return p.Labels["volcano.sh/job-name"] }

// firstSubmit is when the first job was created.
func firstSubmit(submitted map[string]time.Time) time.Time {
	first := time.Time{}
	for _, t := range submitted {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first
}

// boundBySecond counts, for every whole second from the first submit to the last bind
// (last seconds after it), the pods of the submitted jobs seen bound by then: the pods
// figures counts, so the last count is PodsBound.
func boundBySecond(pods []*corev1.Pod, boundAt, submitted map[string]time.Time, first time.Time, last float64) []int {
	if first.IsZero() || last <= 0 {
		return nil
	}
	out := make([]int, int(math.Ceil(last))+1)
	for _, p := range pods {
		t, ok := boundAt[p.Namespace+"/"+p.Name]
		if _, known := submitted[jobOf(p)]; !ok || !known {
			continue
		}
		out[min(len(out)-1, max(0, int(math.Ceil(t.Sub(first).Seconds()))))]++
	}
	for i := 1; i < len(out); i++ {
		out[i] += out[i-1]
	}
	return out
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// figures fills in throughput, latency, cards and shares from what the tracker saw.
func figures(res *Result, tr *Tracker, submitted map[string]time.Time, claims []resourcev1.ResourceClaim, cfg Config) error {
	first := firstSubmit(submitted)
	pods := tr.Pods()
	boundAt := tr.BoundAt()
	var lat []float64
	var lastBind time.Time
	for _, p := range pods {
		t, ok := boundAt[p.Namespace+"/"+p.Name]
		sub, known := submitted[jobOf(p)]
		if !ok || !known {
			continue
		}
		res.PodsBound++
		if wantsCards(p) {
			res.VGPUPodsBound++
		}
		lat = append(lat, t.Sub(sub).Seconds())
		if t.After(lastBind) {
			lastBind = t
		}
	}
	sort.Float64s(lat)
	res.LatencyP50, res.LatencyP99 = Percentile(lat, 0.5), Percentile(lat, 0.99)
	if res.PodsBound > 0 {
		res.Seconds = lastBind.Sub(first).Seconds()
		res.PodsPerSecond = float64(res.PodsBound) / res.Seconds
	}
	if cfg.Mode == Floor {
		return nil
	}
	queues := map[string]string{}
	for _, j := range cfg.Jobs {
		queues[j.Name] = j.Queue
	}
	load, held, missing, err := Cards(pods, &api.Decoders{}, func(p *corev1.Pod) string { return queues[jobOf(p)] })
	if err != nil {
		return err
	}
	res.MissingAssignments = missing
	if cfg.dra() {
		holders := map[string]string{}
		for _, p := range pods {
			if _, ok := boundAt[p.Namespace+"/"+p.Name]; ok && p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				holders[p.Name] = queues[jobOf(p)]
			}
		}
		if res.ClaimPodsBound, err = ClaimCards(claims, holders, load, held); err != nil {
			return err
		}
		for i := 0; i < cfg.Nodes; i++ {
			if InShare(i, cfg.DRAShare) {
				res.DRANodes++
			}
		}
	}
	res.CardsInUse = len(load)
	// The bound is of what the bound pods asked for, the same for every scheduler
	// (what a scheduler records may round a request up).
	specs := map[string]JobSpec{}
	for _, j := range cfg.Jobs {
		specs[j.Name] = j
	}
	var asked fairshare.Amount
	for _, p := range pods {
		if _, ok := boundAt[p.Namespace+"/"+p.Name]; ok && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			c, m := specs[jobOf(p)].CardShare()
			asked = asked.Add(fairshare.Amount{MemoryMiB: m, Cores: c})
		}
	}
	res.LowerBound = LowerBound(asked.Cores, asked.MemoryMiB)
	res.AskedCores, res.AskedMiB = asked.Cores, asked.MemoryMiB
	for _, a := range held {
		res.HeldCores += a.Cores
		res.HeldMiB += a.MemoryMiB
	}
	res.Overcommitted = Overcommitted(load)
	cards := float64(cfg.Nodes * CardsPerNode)
	res.Queues = Shares(fairshare.Amount{MemoryMiB: cards * CardMiB, Cores: cards * 100}, Demand(cfg.Jobs), held)
	return nil
}
