package workload

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
)

// CheckHandoff compares what the kubelet handed to a running pod's containers (the CRI
// record and the device manager's slots) with the pod's assignment: node, visible
// cards, memory and SM limits in the environment and in the limits file, the kubelet's
// slot IDs, the cards as the runtime got them (NVIDIA_VISIBLE_DEVICES or CDI devices),
// the hook library mount and preload, and the agent's annotation. A container without
// cards must get none of it. It returns every mismatch.
func CheckHandoff(p corev1.Pod, h *Handed) []string {
	var bad []string
	fail := func(f string, a ...any) {
		bad = append(bad, fmt.Sprintf("%s/%s: ", p.Namespace, p.Name)+fmt.Sprintf(f, a...))
	}
	raw := p.Annotations[api.AnnotationAssignment]
	if raw == "" {
		fail("no %s annotation", api.AnnotationAssignment)
		return bad
	}
	a, err := api.DecodeAssignment(raw)
	if err != nil {
		fail("%v", err)
		return bad
	}
	if a.Node != p.Spec.NodeName {
		fail("assignment names node %q, pod is on %q", a.Node, p.Spec.NodeName)
	}
	if s := p.Annotations[api.AnnotationHandoff]; s != api.HandoffDone {
		fail("%s is %q, want done", api.AnnotationHandoff, s)
	}
	assigned := map[string]bool{}
	for _, ca := range a.Containers {
		assigned[ca.Name] = true
		r, ok := h.Records[string(p.UID)+"/"+ca.Name]
		if !ok {
			fail("container %s: no CRI record", ca.Name)
			continue
		}
		if r.Node != p.Spec.NodeName {
			fail("container %s: created on %s", ca.Name, r.Node)
		}
		// want is by the device the container sees: the card, or the MIG device of a whole
		// instance; the kubelet's slots are the parent cards'.
		want, parents := map[string]string{}, map[string]bool{}
		var uuids []string
		for _, c := range ca.Cards {
			seen := c.UUID
			if c.IsMIG() {
				seen = c.MIG
			}
			want[seen] = fmt.Sprintf("%d/%d", c.MemoryMiB, smLimit(c.Cores))
			uuids = append(uuids, seen)
			parents[c.UUID] = true
		}
		for _, msg := range checkCards(r, uuids) {
			fail("container %s: %s", ca.Name, msg)
		}
		sources := map[string]map[string]string{"env": r.Env, "limits file": r.LimitsFile}
		// A pod spec may set the variables itself (its values come after the device
		// plugin's, and win); vgpu-core then reads the limits file only, and says so.
		if own := podLimitEnv(p, ca.Name); len(own) > 0 {
			delete(sources, "env")
			for k, v := range own {
				if r.Env[k] != v {
					fail("container %s: its pod spec sets %s=%q, the runtime got %q", ca.Name, k, v, r.Env[k])
				}
			}
		}
		for src, env := range sources {
			got, err := perCard(env)
			if err != nil {
				fail("container %s %s: %v", ca.Name, src, err)
			} else if !equal(got, want) {
				fail("container %s %s: got %v, assignment %v", ca.Name, src, got, want)
			}
		}
		slots := h.Slots[string(p.UID)+"/"+ca.Name]
		slotCards := map[string]bool{}
		for _, id := range slots {
			uuid, _, _ := strings.Cut(id, "::")
			slotCards[uuid] = true
		}
		if len(slotCards) != len(parents) || len(slots) != len(want) {
			fail("container %s: kubelet checkpoint slots %v for cards %v", ca.Name, slots, keys(want))
		}
		for u := range parents {
			if !slotCards[u] {
				fail("container %s: kubelet checkpoint slots %v miss card %s", ca.Name, slots, u)
			}
		}
		// Nothing a live container uses may leave the host (the agent's garbage collection).
		if lf := hostPathIn(r.Env[api.EnvLimitsFile], r.Mounts); lf == "" {
			fail("container %s: no mount holds %s=%s", ca.Name, api.EnvLimitsFile, r.Env[api.EnvLimitsFile])
		} else if _, err := os.Stat(lf); err != nil {
			fail("container %s: its limits file is gone from the host: %v", ca.Name, err)
		}
		for _, msg := range checkHook(r, h.HookLibrary) {
			fail("container %s: %s", ca.Name, msg)
		}
		if got, want := r.Annotations[api.Prefix+"container"], p.Namespace+"/"+p.Name+"/"+ca.Name; got != want {
			fail("container %s: annotation %scontainer is %q, want %q", ca.Name, api.Prefix, got, want)
		}
	}
	for _, c := range p.Spec.Containers {
		if r, ok := h.Records[string(p.UID)+"/"+c.Name]; ok && !assigned[c.Name] && (r.Env[api.EnvVisibleUUIDs] != "" || len(r.CDIDevices) > 0) {
			fail("container %s has no cards but got %s=%s, CDI devices %v", c.Name, api.EnvVisibleUUIDs, r.Env[api.EnvVisibleUUIDs], r.CDIDevices)
		}
	}
	return bad
}

// podLimitEnv is what the pod spec itself sets the container's limit variables to.
func podLimitEnv(p corev1.Pod, container string) map[string]string {
	out := map[string]string{}
	for _, c := range p.Spec.Containers {
		if c.Name != container {
			continue
		}
		for _, e := range c.Env {
			switch e.Name {
			case api.EnvVisibleUUIDs, api.EnvMemoryLimitMiB, api.EnvSMLimit:
				out[e.Name] = e.Value
			}
		}
	}
	return out
}

// hostPathIn maps a path inside a container to the host through its mounts (the most
// specific mount wins); "" when no mount holds it.
func hostPathIn(path string, mounts []Mount) string {
	best, out := -1, ""
	for _, m := range mounts {
		rel, err := filepath.Rel(m.ContainerPath, path)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		if len(m.ContainerPath) > best {
			best, out = len(m.ContainerPath), filepath.Join(m.HostPath, rel)
		}
	}
	return out
}

// smLimit is the agent's SM limit for assigned cores: 0 (memory only) runs uncapped.
func smLimit(cores int) int {
	if cores <= 0 || cores > 100 {
		return 100
	}
	return cores
}

// checkHook checks that the hook library is mounted read-only at its own path and
// preloaded, through LD_PRELOAD or a read-only /etc/ld.so.preload naming it.
func checkHook(r CRIRecord, lib string) []string {
	var bad []string
	var libMounted bool
	preload := r.Env["LD_PRELOAD"] == lib
	for _, m := range r.Mounts {
		switch {
		case m.ContainerPath == lib:
			libMounted = m.HostPath == lib && m.ReadOnly
		case m.ContainerPath == "/etc/ld.so.preload" && m.ReadOnly:
			b, err := os.ReadFile(m.HostPath)
			if err != nil {
				bad = append(bad, fmt.Sprintf("ld.so.preload: %v", err))
			}
			preload = preload || strings.TrimSpace(string(b)) == lib
		}
	}
	if !libMounted {
		bad = append(bad, fmt.Sprintf("hook library %s not mounted read-only at its own path (mounts %v)", lib, r.Mounts))
	}
	if !preload {
		bad = append(bad, fmt.Sprintf("hook library %s not preloaded (LD_PRELOAD %q, mounts %v)", lib, r.Env["LD_PRELOAD"], r.Mounts))
	}
	return bad
}

// CRIOvercommitted sums, per card, the limits the CRI records of the live pods' containers
// carry (what was actually handed over, not what was assigned: the limits file, which is
// what vgpu-core enforces, else the environment) and lists every card whose memory limits
// exceed its memory or whose capped SM limits exceed 100%. An uncapped SM limit (100) is
// left out of the SM sum: a memory-only share gets it too.
func CRIOvercommitted(l map[string]*CardUse, pods []corev1.Pod, h *Handed) []string {
	type sum struct{ mem, sm int64 }
	sums := map[string]*sum{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range p.Spec.Containers {
			r, ok := h.Records[string(p.UID)+"/"+c.Name]
			if !ok {
				continue
			}
			limits := r.Env
			if r.LimitsFile[api.EnvVisibleUUIDs] != "" {
				limits = r.LimitsFile
			}
			if limits[api.EnvVisibleUUIDs] == "" {
				continue
			}
			uuids, mem, sm := split(limits[api.EnvVisibleUUIDs]), split(limits[api.EnvMemoryLimitMiB]), split(limits[api.EnvSMLimit])
			for i, u := range uuids {
				k := p.Spec.NodeName + "/" + u
				if sums[k] == nil {
					sums[k] = &sum{}
				}
				if i < len(mem) {
					m, _ := strconv.ParseInt(mem[i], 10, 64)
					sums[k].mem += m
				}
				if i < len(sm) {
					if s, _ := strconv.ParseInt(sm[i], 10, 64); s < 100 {
						sums[k].sm += s
					}
				}
			}
		}
	}
	var bad []string
	for k, s := range sums {
		u := l[k]
		switch {
		case u == nil:
			bad = append(bad, fmt.Sprintf("%s: handed to containers but not in the node's inventory", k))
		case s.mem > u.Card.MemoryMiB || s.sm > 100:
			bad = append(bad, fmt.Sprintf("%s: containers hold %d/%d MiB and %d%% capped SMs", k, s.mem, u.Card.MemoryMiB, s.sm))
		}
	}
	sort.Strings(bad)
	return bad
}

func perCard(env map[string]string) (map[string]string, error) {
	uuids := split(env[api.EnvVisibleUUIDs])
	mem, sm := split(env[api.EnvMemoryLimitMiB]), split(env[api.EnvSMLimit])
	if len(uuids) == 0 || len(mem) != len(uuids) || len(sm) != len(uuids) {
		return nil, fmt.Errorf("%s=%q %s=%q %s=%q", api.EnvVisibleUUIDs, env[api.EnvVisibleUUIDs],
			api.EnvMemoryLimitMiB, env[api.EnvMemoryLimitMiB], api.EnvSMLimit, env[api.EnvSMLimit])
	}
	out := map[string]string{}
	for i, u := range uuids {
		out[u] = mem[i] + "/" + sm[i]
	}
	return out, nil
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
