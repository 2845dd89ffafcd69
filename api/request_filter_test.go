package api

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParsePodOptionsFilterLists(t *testing.T) {
	many := func(n int, entry string) string { return strings.TrimSuffix(strings.Repeat(entry+",", n), ",") }
	cases := []struct {
		name string
		ann  map[string]string
		want PodOptions
	}{
		{"blank entries are dropped, types lowered once, UUIDs kept",
			map[string]string{AnnotationGPUTypeInclude: " A100 ,,H100-SXM5,", AnnotationGPUUUIDExclude: "GPU-AbC, GPU-d"},
			PodOptions{TypeInclude: []string{"a100", "h100-sxm5"}, UUIDExclude: []string{"GPU-AbC", "GPU-d"}}},
		// strings.ToLower's mapping, which the card check then needs only on the model.
		{"types are lowered beyond ASCII too", map[string]string{AnnotationGPUTypeExclude: "\u212a80"},
			PodOptions{TypeExclude: []string{"k80"}}},
		{"Volcano's keys are read", map[string]string{NvidiaUseGPUType: "T4", NvidiaNoUseGPUUUID: "GPU-x"},
			PodOptions{TypeInclude: []string{"t4"}, UUIDExclude: []string{"GPU-x"}}},
		{"Tessera's key wins", map[string]string{NvidiaUseGPUType: "T4", AnnotationGPUTypeInclude: "L40S"},
			PodOptions{TypeInclude: []string{"l40s"}}},
		{"an empty Volcano list is no filter", map[string]string{NvidiaUseGPUUUID: " , "}, PodOptions{}},
		{"the most entries", map[string]string{AnnotationGPUUUIDInclude: many(MaxFilterEntries, "GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f")},
			PodOptions{UUIDInclude: strings.Split(many(MaxFilterEntries, "GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f"), ",")}},
		// Blank entries do not count; bytes do.
		{"blank entries are not counted", map[string]string{AnnotationGPUTypeInclude: "a100," + strings.Repeat(",", MaxFilterBytes-5)},
			PodOptions{TypeInclude: []string{"a100"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.want.QoS = DefaultQoS
			got, err := ParsePodOptions(c.ann)
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestParsePodOptionsRefusesLongFilterLists(t *testing.T) {
	many := func(n int, entry string) string { return strings.TrimSuffix(strings.Repeat(entry+",", n), ",") }
	longest := strings.Repeat("MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0, ", MaxFilterEntries)
	if len(longest) > MaxFilterBytes {
		t.Fatalf("%d of the longest UUIDs take %d bytes, over MaxFilterBytes", MaxFilterEntries, len(longest))
	}
	cases := []struct {
		name, key, value, want string
	}{
		{"too many entries", AnnotationGPUTypeExclude, strings.Repeat("T4,", MaxFilterEntries+1),
			"annotation tessera.io/gpu-type-exclude: 65 entries in 195 bytes, want at most 64 entries and 4096 bytes"},
		{"too many bytes", AnnotationGPUUUIDInclude, "GPU-a," + strings.Repeat(" ", MaxFilterBytes),
			"annotation tessera.io/gpu-uuid-include: 2 entries comma-separated in 4102 bytes, want at most 64 entries and 4096 bytes"},
		// What the API server's 256 KiB annotation limit let through before.
		{"the old worst case", NvidiaNoUseGPUType, many(87381, "zz"),
			"annotation nvidia.com/nouse-gputype: 87381 entries comma-separated in 262142 bytes, want at most 64 entries and 4096 bytes"},
		{"the Volcano key is named", NvidiaUseGPUUUID, strings.Repeat("x,", 100),
			"annotation nvidia.com/use-gpuuuid: 100 entries in 200 bytes"},
		{"an empty Tessera list", AnnotationGPUUUIDExclude, " ,, ", `annotation tessera.io/gpu-uuid-exclude: " ,, " lists nothing`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParsePodOptions(map[string]string{c.key: c.value, AnnotationQoS: string(QoSFixedShare)})
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
			if len(c.value) > 64 && strings.Contains(err.Error(), c.value[:64]) {
				t.Fatalf("the error repeats the value: %v", err)
			}
		})
	}
}

// A tenant's oversized value is refused without being echoed whole into the pod's
// conditions and events.
func TestRefusalsQuoteAtMostAClipOfAHostileValue(t *testing.T) {
	huge := strings.Repeat("x", 256<<10)
	for _, key := range []string{AnnotationQoS, AnnotationNUMABind, AnnotationNodePolicy, AnnotationCardPolicy} {
		_, err := ParsePodOptions(map[string]string{key: huge})
		if err == nil || !strings.Contains(err.Error(), key) || len(err.Error()) > 300 {
			t.Errorf("%s: err of %d bytes (%.80v), want a refusal naming the key in under 300 bytes", key, len(errString(err)), err)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
