package inventory

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// BenchmarkPublish measures one inventory write (encode + node PATCH against the fake
// API server) for 8 and 16 cards, with the HAMi registration annotation on.
func BenchmarkPublish(b *testing.B) {
	for _, n := range []int{8, 16} {
		b.Run(fmt.Sprintf("%d-cards", n), func(b *testing.B) {
			client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
			p := New(client, registry(b, n), Options{Node: "node-a", Heartbeat: time.Hour, VolcanoCompat: true}, nil)
			ctx := context.Background()
			d := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := p.Publish(ctx); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(start))
			}
			b.StopTimer()
			sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
			b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(d[(len(d)-1)*99/100].Microseconds()), "p99-µs")
			body, _ := p.Patch()
			b.ReportMetric(float64(len(body)), "patch-bytes")
		})
	}
}
