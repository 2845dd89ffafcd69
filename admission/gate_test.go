package admission

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"os"
	"slices"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
)

// gatesAfter applies a decision's patch to the pod, as the API server does, and
// returns the pod's scheduling gates.
func gatesAfter(t *testing.T, pod *corev1.Pod, d Decision) []string {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Patch) > 0 {
		ops, err := json.Marshal(d.Patch)
		if err != nil {
			t.Fatal(err)
		}
		patch, err := jsonpatch.DecodePatch(ops)
		if err != nil {
			t.Fatalf("patch %s: %v", ops, err)
		}
		if raw, err = patch.Apply(raw); err != nil {
			t.Fatalf("patch %s does not apply: %v", ops, err)
		}
	}
	var out corev1.Pod
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range out.Spec.SchedulingGates {
		names = append(names, g.Name)
	}
	return names
}

func gated(pod *corev1.Pod, gates ...string) *corev1.Pod {
	for _, g := range gates {
		pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
	}
	return pod
}

func TestMutateAddsTheQueueGate(t *testing.T) {
	on := DefaultConfig()
	on.QueueGate = true
	cases := []struct {
		name   string
		cfg    Config
		review Review
		want   []string // the pod's gates after the patch
	}{
		{"with the gate on, a vGPU pod is created gated",
			on, Review{Operation: Create, Pod: vgpuPod(nil, half)}, []string{QueueShareGate}},
		{"another controller's gate stays first and the queue gate joins it",
			on, Review{Operation: Create, Pod: gated(vgpuPod(nil, half), "example.com/quota")}, []string{"example.com/quota", QueueShareGate}},
		{"a pod that lists the gate already is left as it is",
			on, Review{Operation: Create, Pod: gated(vgpuPod(nil, half), "example.com/quota", QueueShareGate)}, []string{"example.com/quota", QueueShareGate}},
		{"a CPU pod is never gated",
			on, Review{Operation: Create, Pod: cpuPod()}, nil},
		{"an update is never gated (a gate cannot be added after creation)",
			on, Review{Operation: Update, Pod: vgpuPod(nil, half), OldPod: vgpuPod(nil, half)}, nil},
		{"with the gate off (the default), a vGPU pod is created ungated",
			DefaultConfig(), Review{Operation: Create, Pod: vgpuPod(nil, half)}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := NewPolicy(c.cfg).Mutate(c.review)
			if !d.Allowed {
				t.Fatalf("refused: %s", d.Message)
			}
			if got := gatesAfter(t, c.review.Pod, d); !slices.Equal(got, c.want) {
				t.Errorf("gates after the patch %v, want %v (patch %+v)", got, c.want, d.Patch)
			}
		})
	}
}

// The gate through the HTTP webhooks, as the API server sends a ReplicaSet's pod: the
// mutated pod carries the gate and passes the validating webhook.
func TestHTTPGatesTheAPIServersPod(t *testing.T) {
	cfg := DefaultConfig()
	cfg.QueueGate = true
	srv := httptest.NewServer(NewMux(NewPolicy(cfg), fixedQueues{"team-a": "research"}, func() bool { return true }))
	defer srv.Close()
	review, err := os.ReadFile("testdata/create-vgpu-pod.json")
	if err != nil {
		t.Fatal(err)
	}
	mutated, pod := admit(t, srv.URL, review)
	if len(pod.Spec.SchedulingGates) != 1 || pod.Spec.SchedulingGates[0].Name != QueueShareGate {
		t.Fatalf("gates %+v, want only %s", pod.Spec.SchedulingGates, QueueShareGate)
	}
	if r := answer(t, mustPost(t, srv.URL+PathValidate, mutated)); !r.Allowed {
		t.Errorf("the gated pod is refused: %+v", r.Result)
	}
}

func TestQueueGateIsOffUnlessSet(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want bool
	}{{"version: v1\n", false}, {"version: v1\nqueueGate: true\n", true}, {"version: v1\nqueueGate: false\n", false}} {
		cfg, err := ParseConfig([]byte(c.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.QueueGate != c.want {
			t.Errorf("%q: queueGate %v, want %v", c.yaml, cfg.QueueGate, c.want)
		}
	}
	if _, err := ParseConfig([]byte("version: v1\nqueueGate: sometimes\n")); err == nil {
		t.Error("queueGate: sometimes was accepted")
	}
}

// FuzzQueueGate: whatever pod the API server sends, a mutation with the gate on applies
// to it, leaves every gate it had in place and in order, and gives a vGPU pod
// QueueShareGate exactly once and any other pod none.
func FuzzQueueGate(f *testing.F) {
	review, err := os.ReadFile("testdata/create-vgpu-pod.json")
	if err != nil {
		f.Fatal(err)
	}
	var in struct {
		Request struct {
			Object json.RawMessage `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(review, &in); err != nil {
		f.Fatal(err)
	}
	pod := []byte(in.Request.Object)
	f.Add(pod)
	f.Add(bytes.Replace(pod, []byte(`"containers"`), []byte(`"schedulingGates":[{"name":"a"},{"name":"tessera.io/queue-share"}],"containers"`), 1))
	f.Add(bytes.Replace(pod, []byte(`"containers"`), []byte(`"schedulingGates":[{"name":"example.com/x"}],"containers"`), 1))
	f.Add(bytes.Replace(pod, []byte(`"containers"`), []byte(`"schedulingGates":[],"containers"`), 1))
	f.Add([]byte(`{"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"1"}}}]}}`))
	cfg := DefaultConfig()
	cfg.QueueGate = true
	policy := NewPolicy(cfg)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var p corev1.Pod
		if json.Unmarshal(raw, &p) != nil {
			return
		}
		d := policy.Mutate(Review{Operation: Create, Pod: &p})
		got := gatesAfter(t, &p, d)
		var before []string
		ours := 0
		for _, g := range p.Spec.SchedulingGates {
			before = append(before, g.Name)
			if g.Name == QueueShareGate {
				ours++
			}
		}
		if !slices.Equal(got[:min(len(before), len(got))], before) {
			t.Fatalf("gates %v became %v", before, got)
		}
		want := slices.Clone(before)
		if policy.IsVGPU(&p) && ours == 0 {
			want = append(want, QueueShareGate)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("gates %v became %v, want %v (vGPU %v)", before, got, want, policy.IsVGPU(&p))
		}
	})
}
