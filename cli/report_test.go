package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReportHasATilePerCardWithItsPodsAndQueues(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.html")
	out := mustRun(t, cluster(t), "report", "--html", path)
	if !strings.Contains(out, "5 nodes, 4 cards") {
		t.Errorf("summary line: %q", out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if n := strings.Count(page, `data-card="`); n != 4 {
		t.Errorf("%d tiles, want one per card (4)", n)
	}
	for _, want := range []string{
		"team-a/train-0 [main] queue research, fixed-share: 30000 MiB, 50% cores", // hover text
		"serving/bert-0 [main] queue inference",
		QueueColourOf("research"), QueueColourOf("prod"), // legend and bar segments
		"width:73.24%", // 30000 of 40960 MiB
		"UNHEALTHY", "node agent heartbeat is 10m0s old",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, external := range []string{"<script src", "<link ", "http://", "https://"} {
		if strings.Contains(page, external) {
			t.Errorf("report is not self-contained: it has %q", external)
		}
	}
	var r Report
	if err := json.Unmarshal([]byte(mustRun(t, cluster(t), "report", "-o", "json")), &r); err != nil {
		t.Fatal(err)
	}
	if r.Totals.Cards != 4 || r.Totals.BusyCards != 3 || r.Totals.UnhealthyCards != 1 || len(r.Queues) != 3 {
		t.Errorf("report JSON totals %+v, queues %v", r.Totals, r.Queues)
	}
}

func TestQueueColoursAreStableAndDistinct(t *testing.T) {
	if QueueColourOf("research") != QueueColourOf("research") {
		t.Fatal("colour changes between calls")
	}
	if QueueColourOf("research") == QueueColourOf("prod") || QueueColourOf("research") == QueueColourOf("inference") {
		t.Errorf("queues share a colour: %s %s %s", QueueColourOf("research"), QueueColourOf("prod"), QueueColourOf("inference"))
	}
}
