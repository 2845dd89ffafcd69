package suite

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// schedulerQueueMiB reads, per queue, the card memory of one kind (deserved, allocated,
// request) from tessera_scheduler_queue_vgpu_memory_bytes.
func schedulerQueueMiB(ctx context.Context, kind string) (map[string]float64, error) {
	return schedulerQueueSeries(ctx, "tessera_scheduler_queue_vgpu_memory_bytes", kind, 1<<20)
}

// schedulerQueueMIGSlices reads, per queue, the MIG slices of one kind (deserved,
// allocated, request) from tessera_scheduler_queue_mig_slices.
func schedulerQueueMIGSlices(ctx context.Context, kind string) (map[string]float64, error) {
	return schedulerQueueSeries(ctx, "tessera_scheduler_queue_mig_slices", kind, 1)
}

// schedulerQueueSeries reads, per queue, the value of metric{kind=kind} from the
// scheduler's /metrics, divided by unit.
func schedulerQueueSeries(ctx context.Context, metric, kind string, unit float64) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cl.SchedulerMetricsURL(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", cl.SchedulerMetricsURL(), resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") || !strings.Contains(line, `kind="`+kind+`"`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `queue="`)
		q, _, _ := strings.Cut(rest, `"`)
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[q] = v / unit
		}
	}
	return out, sc.Err()
}
