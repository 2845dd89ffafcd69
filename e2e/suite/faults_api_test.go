package suite

import (
	"context"
	"testing"
	"time"
)

// The API server stops answering for 20 s while a 30-pod burst is being placed and
// admitted (its process is stopped, so every connection hangs rather than failing).
// Afterwards every pod runs with exactly its cards or failed with a reason, no card is
// over-committed, and every node is Ready and schedulable again.
func TestFaultAPIServerUnreachableMidBurst(t *testing.T) {
	n := ns(t, "fault-api")
	defer cleanup(t, n)
	jobs := burst(n, "p", 30, nil)
	submit(t, jobs...)
	waitRunning(t, n, 3)
	t.Logf("API server unresponsive for 20 s from %d of 30 pods running", runningCount(n))
	cl.PauseAPIServer(20 * time.Second)
	start := time.Now()
	checkBurstOutcome(t, n, jobs)
	t.Logf("burst settled %s after the API server answered again", time.Since(start).Round(100*time.Millisecond))
	for _, node := range nodes {
		if err := cl.WaitNodeReady(context.Background(), node.Name, time.Minute); err != nil {
			t.Error(err)
		}
	}
	noOvercommit(t)
}
