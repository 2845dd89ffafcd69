package api

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ResourceNames are the extended resources that mark a vGPU request. Clusters that
// renamed them configure the plugin and the node agent alike.
type ResourceNames struct {
	Number           corev1.ResourceName
	Memory           corev1.ResourceName
	MemoryPercentage corev1.ResourceName
	Cores            corev1.ResourceName
}

// DefaultResourceNames are Volcano's names.
func DefaultResourceNames() ResourceNames {
	return ResourceNames{Number: ResourceNumber, Memory: ResourceMemory,
		MemoryPercentage: ResourceMemoryPercentage, Cores: ResourceCores}
}

// ContainerRequest is what one container asks of each of its cards.
type ContainerRequest struct {
	Name  string
	Cards int
	// MemoryMiB per card; zero when MemoryPercent is used instead.
	MemoryMiB int64
	// MemoryPercent of each card's memory, 1..100; zero when MemoryMiB is used.
	MemoryPercent int
	// Cores is the percentage of each card's SMs, 0..100; 100 asks for whole cards.
	Cores int
	// MIGProfile, when set, asks for Cards whole MIG instances of this profile (the
	// pod's AnnotationMIGProfile); MemoryPercent and Cores are then 100: the
	// container gets each instance's memory and all its SMs.
	MIGProfile string
}

// Exclusive reports whether the container wants whole cards to itself.
func (r ContainerRequest) Exclusive() bool { return r.Cores == 100 }

// HasVGPURequest reports whether any container (init containers included) asks for
// a vGPU resource. Tessera acts on these pods only.
func (n ResourceNames) HasVGPURequest(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			for _, name := range []corev1.ResourceName{n.Number, n.Memory, n.MemoryPercentage, n.Cores} {
				if _, ok := cs[i].Resources.Limits[name]; ok {
					return true
				}
				if _, ok := cs[i].Resources.Requests[name]; ok {
					return true
				}
			}
		}
	}
	return false
}

// ContainerRequests extracts the vGPU requests of a pod's app containers, in spec
// order, skipping containers without any. A container must name its card count
// (the kubelet hands cards only to containers that request it); no memory means the
// whole card's memory.
// Init containers with vGPU requests are rejected: their cards would have to be
// freed before the app containers start, which the contract does not model.
// A pod with AnnotationMIGProfile asks for whole MIG instances: its containers name
// only the count (ResourceNumber); memory and cores are refused, since an instance is
// given whole.
func (n ResourceNames) ContainerRequests(pod *corev1.Pod) ([]ContainerRequest, error) {
	for _, c := range pod.Spec.InitContainers {
		if n.containerHas(&c) {
			return nil, fmt.Errorf("%w: init container %q requests vGPU resources; only app containers may", ErrInvalid, c.Name)
		}
	}
	profile, mig := pod.Annotations[AnnotationMIGProfile]
	if mig {
		if err := parseMIGProfile(profile); err != nil {
			return nil, err
		}
	}
	var out []ContainerRequest
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if !n.containerHas(c) {
			continue
		}
		r, err := n.containerRequest(c)
		if err != nil {
			return nil, err
		}
		if mig {
			if r, err = n.migRequest(c, r, profile); err != nil {
				return nil, err
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func (n ResourceNames) containerHas(c *corev1.Container) bool {
	for _, name := range []corev1.ResourceName{n.Number, n.Memory, n.MemoryPercentage, n.Cores} {
		if _, ok := quantity(c, name); ok {
			return true
		}
	}
	return false
}

// quantity prefers the limit: extended resources cannot be overcommitted, so a
// request, when given, must equal the limit anyway.
func quantity(c *corev1.Container, name corev1.ResourceName) (int64, bool) {
	if q, ok := c.Resources.Limits[name]; ok {
		return q.Value(), true
	}
	if q, ok := c.Resources.Requests[name]; ok {
		return q.Value(), true
	}
	return 0, false
}

func (n ResourceNames) containerRequest(c *corev1.Container) (ContainerRequest, error) {
	r := ContainerRequest{Name: c.Name, Cards: 1}
	field := func(name corev1.ResourceName) string { return fmt.Sprintf("container %q %s", c.Name, name) }
	v, ok := quantity(c, n.Number)
	if !ok {
		// The kubelet calls a device plugin only for the resources a container
		// requests: without the card count it would hand this container no card and
		// no limits, and the container would see whatever the runtime gives it.
		for _, name := range []corev1.ResourceName{n.Memory, n.MemoryPercentage, n.Cores} {
			if q, has := quantity(c, name); has {
				return r, fmt.Errorf("%w: %s is %d without %s: the kubelet hands cards only to containers that request %s; add %s: 1",
					ErrInvalid, field(name), q, n.Number, n.Number, n.Number)
			}
		}
	}
	if ok {
		if v < 1 || v > 64 {
			return r, fmt.Errorf("%w: %s: %d cards, want 1..64", ErrInvalid, field(n.Number), v)
		}
		r.Cards = int(v)
	}
	mem, hasMem := quantity(c, n.Memory)
	pct, hasPct := quantity(c, n.MemoryPercentage)
	switch {
	case hasMem && hasPct:
		return r, fmt.Errorf("%w: container %q sets both %s and %s; set one", ErrInvalid, c.Name, n.Memory, n.MemoryPercentage)
	case hasMem:
		if mem < 1 || mem > 1<<30 {
			return r, fmt.Errorf("%w: %s: %d MiB, want a positive amount", ErrInvalid, field(n.Memory), mem)
		}
		r.MemoryMiB = mem
	case hasPct:
		if pct < 1 || pct > 100 {
			return r, fmt.Errorf("%w: %s: %d%%, want 1..100", ErrInvalid, field(n.MemoryPercentage), pct)
		}
		r.MemoryPercent = int(pct)
	default:
		r.MemoryPercent = 100
	}
	if v, ok := quantity(c, n.Cores); ok {
		if v < 0 || v > 100 {
			return r, fmt.Errorf("%w: %s: %d%%, want 0..100", ErrInvalid, field(n.Cores), v)
		}
		r.Cores = int(v)
	}
	return r, nil
}

// migRequest turns a container's request into one for whole MIG instances of
// profile: the count stays, and memory or cores written beside it are refused rather
// than ignored (an instance's memory and SMs are fixed by its profile).
func (n ResourceNames) migRequest(c *corev1.Container, r ContainerRequest, profile string) (ContainerRequest, error) {
	for _, name := range []corev1.ResourceName{n.Memory, n.MemoryPercentage, n.Cores} {
		if q, has := quantity(c, name); has {
			return r, fmt.Errorf("%w: container %q sets %s to %d, but annotation %s asks for whole MIG instances of %s: remove %s",
				ErrInvalid, c.Name, name, q, AnnotationMIGProfile, profile, name)
		}
	}
	r.MemoryMiB, r.MemoryPercent, r.Cores, r.MIGProfile = 0, 100, 100, profile
	return r, nil
}

// parseMIGProfile checks the value of AnnotationMIGProfile: a profile name as
// nvidia-smi writes it, exactly as the node's AnnotationMIGInstances lists it.
func parseMIGProfile(v string) error {
	if len(v) > maxMIGProfileBytes {
		return fmt.Errorf("%w: annotation %s: %q is %d bytes, not a MIG profile name like 3g.40gb", ErrInvalid, AnnotationMIGProfile, clip(v), len(v))
	}
	if err := ValidateMIGProfileName(v); err != nil {
		return fmt.Errorf("%w: annotation %s: %v", ErrInvalid, AnnotationMIGProfile, err)
	}
	return nil
}

// maxMIGProfileBytes bounds a profile name: "<compute>g.<GB>gb" with four digits each
// and a 12-byte media-engine suffix is 25 bytes.
const maxMIGProfileBytes = 32

// PodOptions are the user's per-pod choices, read from annotations.
type PodOptions struct {
	// TypeInclude and TypeExclude are model substrings, matched ignoring case;
	// ParsePodOptions lowers them once, so a card check folds only the model.
	TypeInclude, TypeExclude []string
	// UUIDInclude and UUIDExclude are card UUIDs, matched exactly.
	UUIDInclude, UUIDExclude []string
	// NodePolicy and CardPolicy are empty when the pod does not override the defaults.
	NodePolicy, CardPolicy Policy
	NUMABind               bool
	QoS                    QoSClass
	// Weights are the pod's weights of the terms that rank nodes and cards; the zero
	// value (no annotation) leaves the plugin's.
	Weights ScoreWeights
	// MIGProfile, when set, asks for whole MIG instances of this profile
	// (AnnotationMIGProfile) on cards in MIG mode, instead of shares of cards.
	MIGProfile string
}

// The most a card filter annotation (tessera.io/gpu-{type,uuid}-{include,exclude} and
// their nvidia.com fallbacks) may list. Tenants write these, and every entry is tried
// against every card of every node the pod is tried on, every session: unbounded, the
// API server's 256 KiB annotation limit held 87,381 entries, milliseconds a card check
// and minutes of scheduler CPU a session at 1,000 nodes.
//   - 64 entries: a UUID list of 64 pins or avoids eight 8-GPU nodes' cards (a wider
//     choice is a node selector's job), and no cluster mixes 64 card models.
//   - 4 KiB: a card UUID is 40 bytes (GPU- and 36), a MIG device's at most 50
//     (MIG-GPU-<uuid>/<gi>/<ci>), so 64 of the longest fit with ", " between them;
//     a model name is at most 96 bytes (NVML's buffer), and a substring of it less.
//
// At the limits a card check costs a few microseconds (BenchmarkCardFilter in
// placement), and a refused value costs one pass over its bytes at parse time.
const (
	MaxFilterEntries = 64
	MaxFilterBytes   = 4 << 10
)

// ParsePodOptions reads the user annotations. A malformed value is an error naming the
// annotation: Tessera never ignores what a user asked for.
func ParsePodOptions(ann map[string]string) (PodOptions, error) {
	var o PodOptions
	filters := [...]struct {
		dst          *[]string
		key, volcano string
		fold         bool
	}{
		{&o.TypeInclude, AnnotationGPUTypeInclude, NvidiaUseGPUType, true},
		{&o.TypeExclude, AnnotationGPUTypeExclude, NvidiaNoUseGPUType, true},
		{&o.UUIDInclude, AnnotationGPUUUIDInclude, NvidiaUseGPUUUID, false},
		{&o.UUIDExclude, AnnotationGPUUUIDExclude, NvidiaNoUseGPUUUID, false},
	}
	for _, f := range filters {
		key, v, ok := firstOf(ann, f.key, f.volcano)
		if !ok {
			continue
		}
		list, err := parseFilter(key, v, f.fold)
		if err != nil {
			return o, err
		}
		// An empty nvidia.com list has always read as no filter; an empty Tessera one
		// is refused: whoever wrote it meant some cards.
		if list == nil && key == f.key {
			return o, fmt.Errorf("%w: annotation %s: %q lists nothing", ErrInvalid, key, clip(v))
		}
		*f.dst = list
	}
	var err error
	if v, ok := ann[AnnotationNodePolicy]; ok {
		if o.NodePolicy, err = ParsePolicy(v); err != nil {
			return o, fmt.Errorf("annotation %s: %w", AnnotationNodePolicy, err)
		}
	}
	if v, ok := ann[AnnotationCardPolicy]; ok {
		if o.CardPolicy, err = ParseCardPolicy(v); err != nil {
			return o, fmt.Errorf("annotation %s: %w", AnnotationCardPolicy, err)
		}
	}
	if v, ok := ann[AnnotationScoreWeights]; ok {
		if o.Weights, err = ParseScoreWeights(v); err != nil {
			return o, err
		}
	}
	if v, ok := ann[AnnotationNUMABind]; ok {
		switch v {
		case "true":
			o.NUMABind = true
		case "false":
		default:
			return o, fmt.Errorf("%w: annotation %s: %q, want true or false", ErrInvalid, AnnotationNUMABind, clip(v))
		}
	}
	if o.QoS, err = ParseQoSClass(ann[AnnotationQoS]); err != nil {
		return o, fmt.Errorf("annotation %s: %w", AnnotationQoS, err)
	}
	if v, ok := ann[AnnotationMIGProfile]; ok {
		if err := parseMIGProfile(v); err != nil {
			return o, err
		}
		o.MIGProfile = v
	}
	return o, nil
}

// firstOf returns the first of keys that ann holds, and its value.
func firstOf(ann map[string]string, keys ...string) (string, string, bool) {
	for _, k := range keys {
		if v, ok := ann[k]; ok {
			return k, v, true
		}
	}
	return "", "", false
}

// parseFilter splits a card filter annotation's comma list, dropping blank entries
// (nil when none is left), and lowers each entry when fold is set. A value over
// MaxFilterBytes or MaxFilterEntries is refused before anything is copied; the error
// gives its size, not the value.
func parseFilter(key, v string, fold bool) ([]string, error) {
	if len(v) > MaxFilterBytes {
		return nil, filterTooLong(key, v)
	}
	n := countEntries(v)
	if n > MaxFilterEntries {
		return nil, filterTooLong(key, v)
	}
	if n == 0 {
		return nil, nil
	}
	out := make([]string, 0, n)
	for rest, more := v, true; more; {
		var f string
		f, rest, more = strings.Cut(rest, ",")
		if f = strings.TrimSpace(f); f != "" {
			if fold {
				f = strings.ToLower(f)
			}
			out = append(out, f)
		}
	}
	return out, nil
}

// filterTooLong refuses a filter list by its size. Over MaxFilterBytes it counts
// the commas alone, which is a vectorised scan: a refused pod is read again every
// session.
func filterTooLong(key, v string) error {
	n, what := 0, "in"
	if len(v) > MaxFilterBytes {
		n, what = strings.Count(v, ",")+1, "comma-separated in"
	} else {
		n = countEntries(v)
	}
	entries := "entries"
	if n == 1 {
		entries = "entry"
	}
	return fmt.Errorf("%w: annotation %s: %d %s %s %d bytes, want at most %d entries and %d bytes",
		ErrInvalid, key, n, entries, what, len(v), MaxFilterEntries, MaxFilterBytes)
}

// countEntries counts the non-blank entries of a comma list without copying any.
func countEntries(v string) int {
	n := 0
	for rest, more := v, true; more; {
		var f string
		f, rest, more = strings.Cut(rest, ",")
		if strings.TrimSpace(f) != "" {
			n++
		}
	}
	return n
}
