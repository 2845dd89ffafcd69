package handoff_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/assignkeys"
	"github.com/tessera-gpu/tessera/deviceplugin/nodepods"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// reportPercentiles adds p50 and p99 of the per-operation durations to the benchmark.
func reportPercentiles(b *testing.B, name string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))].Microseconds()) }
	b.ReportMetric(at(0.50), name+"-p50-µs")
	b.ReportMetric(at(0.99), name+"-p99-µs")
}

// BenchmarkAllocate measures one pod's admission through real gRPC: the kubelet's
// GetPreferredAllocation and Allocate (each asking PodResources once) for a pod of two
// cards, with 2 resident pods per card on the node (10 shares per card). "allocate" is
// the Allocate round trip alone. Each measured pod is removed again, untimed. "verified"
// runs the agent as the chart does, checking each assignment's signature and request;
// "unverified" checks the request only.
func BenchmarkAllocate(b *testing.B) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	key := api.NewSigningKey(priv)
	verifier := api.NewVerifier([]ed25519.PublicKey{priv.Public().(ed25519.PublicKey)})
	for _, n := range []int{8, 16} {
		for _, verified := range []bool{false, true} {
			name := fmt.Sprintf("%d-cards/unverified", n)
			var trust *nodepods.Trust
			if verified {
				name = fmt.Sprintf("%d-cards/verified", n)
				trust = &nodepods.Trust{Keys: assignkeys.Static{V: verifier}}
			}
			b.Run(name, func(b *testing.B) {
				h := newHarnessWith(b, nvmlfake.Cards(n), 10, trust)
				h.waitRegistered(1)
				admit := func(name string, i int) (*corev1.Pod, time.Duration, time.Duration) {
					p := pod(name, ctr{"main", []api.CardAssignment{card(h.uuids[i%n], 100, 1), card(h.uuids[(i+1)%n], 100, 1)}})
					p.Annotations[api.AnnotationAssignmentSignature] = key.SignPod(p, node)
					h.bind(p)
					for _, ok := h.pods.Get(p.Namespace, p.Name); !ok; _, ok = h.pods.Get(p.Namespace, p.Name) {
						time.Sleep(100 * time.Microsecond)
					}
					start := time.Now()
					if _, err := h.kubelet.Admit(h.ctx, p); err != nil {
						b.Fatal(err)
					}
					return p, time.Since(start), h.kubelet.LastAllocate()
				}
				for i := 0; i < 2*n; i++ {
					admit(fmt.Sprintf("resident-%d", i), i)
				}
				var admits, allocs []time.Duration
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					p, t, a := admit(fmt.Sprintf("bench-%d", i), i)
					admits, allocs = append(admits, t), append(allocs, a)
					b.StopTimer()
					h.kubelet.Release(p.UID)
					if err := h.client.CoreV1().Pods(p.Namespace).Delete(h.ctx, p.Name, metav1.DeleteOptions{}); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				b.StopTimer()
				reportPercentiles(b, "admit", admits)
				reportPercentiles(b, "allocate", allocs)
			})
		}
	}
}
