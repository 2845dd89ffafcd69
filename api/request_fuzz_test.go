package api

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// userKeys are the annotations ParsePodOptions reads. In a fuzzed annotation map a
// key that is one character of keyAliases stands for the key at its index, so that
// mutations reach every reader without spelling its key.
var userKeys = []string{
	AnnotationGPUTypeInclude, AnnotationGPUTypeExclude, AnnotationGPUUUIDInclude, AnnotationGPUUUIDExclude,
	NvidiaUseGPUType, NvidiaNoUseGPUType, NvidiaUseGPUUUID, NvidiaNoUseGPUUUID,
	AnnotationNodePolicy, AnnotationCardPolicy, AnnotationNUMABind, AnnotationQoS, AnnotationScoreWeights,
	AnnotationMIGProfile,
}

const keyAliases = "0123456789abcd"

// filterKeys pairs each filter list with the keys it is read from, Tessera's first.
var filterKeys = []struct {
	tessera, volcano string
	fold             bool
	list             func(*PodOptions) []string
}{
	{AnnotationGPUTypeInclude, NvidiaUseGPUType, true, func(o *PodOptions) []string { return o.TypeInclude }},
	{AnnotationGPUTypeExclude, NvidiaNoUseGPUType, true, func(o *PodOptions) []string { return o.TypeExclude }},
	{AnnotationGPUUUIDInclude, NvidiaUseGPUUUID, false, func(o *PodOptions) []string { return o.UUIDInclude }},
	{AnnotationGPUUUIDExclude, NvidiaNoUseGPUUUID, false, func(o *PodOptions) []string { return o.UUIDExclude }},
}

// annotationsOf reads a fuzzed annotation map: one key=value pair a line.
func annotationsOf(s string) map[string]string {
	ann := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		k, v, _ := strings.Cut(line, "=")
		if len(k) == 1 {
			if i := strings.IndexByte(keyAliases, k[0]); i >= 0 {
				k = userKeys[i]
			}
		}
		ann[k] = v
	}
	return ann
}

// splitLowered is the list the filter readers kept before they were bounded, lowered
// as they now are.
func splitLowered(s string, fold bool) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			if fold {
				f = strings.ToLower(f)
			}
			out = append(out, f)
		}
	}
	return out
}

// ParsePodOptions either refuses a map with an ErrInvalid that names an annotation the
// map holds, and never repeats an over-long filter list, or returns options whose
// filter lists are the blank-free, bounded entries of the key that won, types lowered,
// and which written back as annotations read the same again.
func FuzzParsePodOptions(f *testing.F) {
	uuid := "GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f"
	for _, seed := range []string{
		"",
		AnnotationGPUTypeInclude + "=A100,H100",
		AnnotationGPUTypeInclude + "=A100\n" + AnnotationNodePolicy + "=spread",
		AnnotationGPUTypeInclude + "=L40S\n" + AnnotationCardPolicy + "=binpack\n" + AnnotationQoS + "=fixed-share",
		AnnotationGPUTypeExclude + "=A100,A30\n" + AnnotationNUMABind + "=true",
		AnnotationGPUUUIDInclude + "=" + uuid + ",GPU-gpu-b-5",
		AnnotationGPUUUIDExclude + "=GPU-gpu-d-0, GPU-gpu-d-1 ,GPU-gpu-d-2,",
		NvidiaUseGPUType + "=Tesla T4\n" + NvidiaNoUseGPUUUID + "=" + uuid,
		NvidiaUseGPUType + "=,\n" + AnnotationGPUTypeInclude + "=\u212a80",
		AnnotationGPUTypeInclude + "= , ",
		AnnotationNUMABind + "=yes",
		AnnotationQoS + "=gold",
		AnnotationGPUTypeExclude + "=" + strings.Repeat("zz,", MaxFilterEntries+1),
		"0=a100\n3=" + uuid + "\n8=topology\nb=burst-share",
		"other.io/key=x\n" + AnnotationQoS + "=best-effort",
		AnnotationScoreWeights + "=policy=3,topology=1,numa=1",
		AnnotationScoreWeights + "= numa = 2.5 ,,\n" + AnnotationCardPolicy + "=idle-only",
		AnnotationScoreWeights + "=pack=3",
		AnnotationScoreWeights + "=numa=-1",
		AnnotationScoreWeights + "=topology=x",
		AnnotationScoreWeights + "=policy=1e1",
		AnnotationScoreWeights + "=policy=11",
		AnnotationScoreWeights + "=policy=0,topology=0",
		AnnotationScoreWeights + "=policy=1,policy=2",
		AnnotationScoreWeights + "=" + strings.Repeat("numa=1,", 20),
		"c=topology=0.125\n9=idle-only\n8=spread",
		AnnotationNodePolicy + "=idle-only",
		AnnotationMIGProfile + "=3g.40gb",
		AnnotationMIGProfile + "=1g.10gb+me\n" + AnnotationCardPolicy + "=spread",
		AnnotationMIGProfile + "=1g.24gb+me.all\n" + AnnotationGPUUUIDInclude + "=" + uuid,
		AnnotationMIGProfile + "=7g.79gb\n" + AnnotationNUMABind + "=true",
		AnnotationMIGProfile + "=3g",
		AnnotationMIGProfile + "=",
		AnnotationMIGProfile + "=03g.40gb",
		"d=" + strings.Repeat("1", 40) + "g.1gb",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ann := annotationsOf(s)
		o, err := ParsePodOptions(ann)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			named := false
			for _, k := range userKeys {
				if _, ok := ann[k]; ok && strings.Contains(err.Error(), "annotation "+k+":") {
					named = true
				}
			}
			if !named {
				t.Fatalf("error names no annotation the pod has: %v", err)
			}
			if v, ok := ann[AnnotationScoreWeights]; ok && strings.Contains(err.Error(), "annotation "+AnnotationScoreWeights+":") &&
				!strings.Contains(err.Error(), strconv.Quote(clip(v))) {
				t.Fatalf("error does not quote the value as written, %q: %v", clip(v), err)
			}
			for _, fk := range filterKeys {
				for _, k := range []string{fk.tessera, fk.volcano} {
					if v := ann[k]; len(v) > MaxFilterBytes && strings.Contains(err.Error(), v) {
						t.Fatalf("error repeats the %d bytes of %s", len(v), k)
					}
				}
			}
			return
		}
		for _, fk := range filterKeys {
			got := fk.list(&o)
			key := fk.tessera
			v, ok := ann[key]
			if !ok {
				key = fk.volcano
				v, ok = ann[key]
			}
			if !ok {
				if got != nil {
					t.Fatalf("%s: %q with no annotation", fk.tessera, got)
				}
				continue
			}
			if len(v) > MaxFilterBytes || len(got) > MaxFilterEntries {
				t.Fatalf("%s: %d bytes, %d entries accepted", key, len(v), len(got))
			}
			if want := splitLowered(v, fk.fold); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: %q read as %q, want %q", key, v, got, want)
			}
			if got == nil && key == fk.tessera {
				t.Fatalf("%s: %q lists nothing, and was accepted", key, v)
			}
		}
		if err := checkWeights(ann, o.Weights); err != "" {
			t.Fatal(err)
		}
		// Written back with Tessera's keys, the options read the same.
		back := map[string]string{AnnotationQoS: string(o.QoS)}
		for _, fk := range filterKeys {
			if l := fk.list(&o); l != nil {
				back[fk.tessera] = strings.Join(l, ",")
			}
		}
		if o.NodePolicy != "" {
			back[AnnotationNodePolicy] = string(o.NodePolicy)
		}
		if o.CardPolicy != "" {
			back[AnnotationCardPolicy] = string(o.CardPolicy)
		}
		if o.NUMABind {
			back[AnnotationNUMABind] = "true"
		}
		if o.Weights.Any() {
			back[AnnotationScoreWeights] = o.Weights.String()
		}
		if o.MIGProfile != "" {
			if ValidateMIGProfileName(o.MIGProfile) != nil || o.MIGProfile != ann[AnnotationMIGProfile] {
				t.Fatalf("MIG profile %q accepted from %q", o.MIGProfile, ann[AnnotationMIGProfile])
			}
			back[AnnotationMIGProfile] = o.MIGProfile
		} else if _, ok := ann[AnnotationMIGProfile]; ok {
			t.Fatalf("annotation %s %q accepted as no profile", AnnotationMIGProfile, ann[AnnotationMIGProfile])
		}
		for _, fk := range filterKeys {
			// Lowering can lengthen a rune (U+023A is two bytes, U+2C65 three), so a
			// list at the byte limit may not fit once lowered.
			if len(back[fk.tessera]) > MaxFilterBytes {
				return
			}
		}
		again, err := ParsePodOptions(back)
		if err != nil || !reflect.DeepEqual(o, again) {
			t.Fatalf("written back as %q, the options read %+v, %v; want %+v", back, again, err, o)
		}
	})
}

// checkWeights says what is wrong with the weights ParsePodOptions accepted from ann,
// or "": named only where the annotation is, each in 0..MaxScoreWeight, never all 0,
// and no longer written back than the value was.
func checkWeights(ann map[string]string, w ScoreWeights) string {
	v, ok := ann[AnnotationScoreWeights]
	if !ok {
		if w.Any() {
			return fmt.Sprintf("weights %+v without the annotation", w)
		}
		return ""
	}
	if !w.Any() {
		return fmt.Sprintf("%q accepted with no term named", v)
	}
	for t, named := range w.Named {
		if f := w.Weight[t]; f < 0 || f > MaxScoreWeight || !named && f != 0 {
			return fmt.Sprintf("%q read as %+v", v, w)
		}
	}
	if w.Of(TermPolicy, 1) == 0 && w.Of(TermTopology, 1) == 0 && w.Weight[TermNUMA] == 0 {
		return fmt.Sprintf("%q: every weight 0, and accepted", v)
	}
	if len(w.String()) > len(v) {
		return fmt.Sprintf("%q written back longer, as %q", v, w.String())
	}
	return ""
}

// ContainerRequests either refuses a pod with an ErrInvalid naming the container and
// what it asked for, or returns one request for each app container that asks, within
// the contract's bounds and equal to what the container asked.
func FuzzContainerRequests(f *testing.F) {
	f.Add("train", "1", "", "", "", uint8(0))
	f.Add("train", "2", "8192", "", "30", uint8(0))
	f.Add("infer", "1", "", "50", "100", uint8(0b1010))
	f.Add("main", "", "16384", "", "", uint8(0))
	f.Add("main", "65", "", "", "", uint8(0))
	f.Add("init", "1", "1Gi", "", "", uint8(0b10000))
	f.Add("x", "1", "4096", "50", "", uint8(0b100000))
	f.Add("big", "1", "1e18", "", "-1", uint8(0b1111))
	f.Add("frac", "500m", "0.5", "", "12.5", uint8(0b1000000))
	f.Add("\"quoted\"\n", "1k", "", "101", "0", uint8(0))
	f.Add("mig", "2", "", "", "", uint8(0b10000000))
	f.Add("mig", "1", "", "", "100", uint8(0b10000000))
	f.Add("mig", "1", "", "100", "", uint8(0b10100000))
	names := DefaultResourceNames()
	all := []corev1.ResourceName{names.Number, names.Memory, names.MemoryPercentage, names.Cores}
	f.Fuzz(func(t *testing.T, name, number, memory, percent, cores string, how uint8) {
		// Bits 0-3: the resource goes in requests rather than limits. Bit 4: the
		// container is an init container. Bit 5: a container without vGPU resources
		// comes first. Bit 6: requests repeat every limit, doubled. Bit 7: the pod asks
		// for whole MIG instances (AnnotationMIGProfile).
		c := corev1.Container{Name: name, Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}}
		asked := map[corev1.ResourceName]int64{}
		for i, v := range []string{number, memory, percent, cores} {
			if hugeExponent(v) {
				continue
			}
			q, err := resource.ParseQuantity(v)
			if v == "" || err != nil {
				continue
			}
			if how&(1<<i) != 0 {
				c.Resources.Requests[all[i]] = q
			} else {
				c.Resources.Limits[all[i]] = q
				if how&(1<<6) != 0 {
					d := q.DeepCopy()
					d.Add(q)
					c.Resources.Requests[all[i]] = d
				}
			}
			asked[all[i]] = q.Value()
		}
		pod := &corev1.Pod{}
		mig := how&(1<<7) != 0
		if mig {
			pod.Annotations = map[string]string{AnnotationMIGProfile: "3g.40gb"}
		}
		if how&(1<<5) != 0 {
			pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "sidecar"})
		}
		if how&(1<<4) != 0 {
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
		} else {
			pod.Spec.Containers = append(pod.Spec.Containers, c)
		}
		if got := names.HasVGPURequest(pod); got != (len(asked) > 0) {
			t.Fatalf("HasVGPURequest %v for %v", got, asked)
		}
		reqs, err := names.ContainerRequests(pod)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			if !strings.Contains(err.Error(), "container "+strconv.Quote(name)) {
				t.Fatalf("error does not name container %q: %v", name, err)
			}
			field := how&(1<<4) != 0 && strings.Contains(err.Error(), "requests vGPU resources")
			for _, r := range all {
				field = field || strings.Contains(err.Error(), string(r))
			}
			if !field {
				t.Fatalf("error names no field: %v", err)
			}
			return
		}
		if how&(1<<4) != 0 && len(asked) > 0 {
			t.Fatalf("init container's vGPU request accepted: %+v", reqs)
		}
		if len(asked) == 0 || how&(1<<4) != 0 {
			if len(reqs) != 0 {
				t.Fatalf("requests %+v from a pod that asks for nothing", reqs)
			}
			return
		}
		if len(reqs) != 1 {
			t.Fatalf("%d requests for one asking container", len(reqs))
		}
		r := reqs[0]
		n, hasN := asked[names.Number]
		mem, hasMem := asked[names.Memory]
		pct, hasPct := asked[names.MemoryPercentage]
		if mig {
			_, hasCores := asked[names.Cores]
			if hasMem || hasPct || hasCores || !hasN || r.Cards != int(n) ||
				r != (ContainerRequest{Name: name, Cards: r.Cards, MemoryPercent: 100, Cores: 100, MIGProfile: "3g.40gb"}) {
				t.Fatalf("MIG request %+v for %v", r, asked)
			}
			return
		}
		switch {
		case r.Name != name:
			t.Fatalf("request named %q, want %q", r.Name, name)
		case !hasN || r.Cards != int(n) || r.Cards < 1 || r.Cards > 64:
			t.Fatalf("%d cards for %v", r.Cards, asked)
		case r.Cores < 0 || r.Cores > 100 || int64(r.Cores) != asked[names.Cores]:
			t.Fatalf("%d cores for %v", r.Cores, asked)
		case hasMem && (r.MemoryMiB != mem || r.MemoryMiB < 1 || r.MemoryPercent != 0):
			t.Fatalf("%d MiB, %d%% for %v", r.MemoryMiB, r.MemoryPercent, asked)
		case hasPct && (int64(r.MemoryPercent) != pct || r.MemoryPercent < 1 || r.MemoryPercent > 100 || r.MemoryMiB != 0):
			t.Fatalf("%d MiB, %d%% for %v", r.MemoryMiB, r.MemoryPercent, asked)
		case !hasMem && !hasPct && (r.MemoryPercent != 100 || r.MemoryMiB != 0):
			t.Fatalf("%d MiB, %d%% for %v without a memory request", r.MemoryMiB, r.MemoryPercent, asked)
		}
	})
}

// hugeExponent says whether a quantity string has a decimal exponent beyond any
// resource's range ("0e1111111100", "1E10000000000"). ParseQuantity accepts those, but
// apimachinery's Value() and String() then take seconds to hours and gigabytes on them,
// in the fuzzing harness as anywhere else; what Tessera reads comes from the API server,
// which stores quantities in canonical form. Such inputs test apimachinery, not the
// request reader, so they are skipped.
func hugeExponent(v string) bool {
	i := strings.IndexAny(v, "eE")
	if i < 0 {
		return false
	}
	exp := strings.TrimLeft(strings.TrimLeft(v[i+1:], "+-"), "0")
	digits := 0
	for digits < len(exp) && exp[digits] >= '0' && exp[digits] <= '9' {
		digits++
	}
	return digits > 2
}
