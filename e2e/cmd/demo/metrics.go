package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
)

// The series the docs point users at: the demo fails if the scheduler or an agent does
// not serve them.
var (
	schedulerSeries = []string{"tessera_scheduler_queue_vgpu_memory_bytes", "tessera_scheduler_queue_vgpu_cards",
		"tessera_scheduler_card_allocated_memory_bytes", "tessera_scheduler_vgpu_placement_seconds_count"}
	// The hook and region series are left out: the agent serves them only for pods with
	// the region volume, which the admission webhook adds and the demo does not run.
	agentSeries = []string{"tessera_card_assigned_memory_bytes", "tessera_container_gpu_memory_limit_bytes"}
)

// scrape fetches a /metrics page and returns its sample lines by metric name. token,
// when set, is sent as the bearer token: the agents serve /metrics only to a token whose
// user may get it, as the chart runs them (metrics.authentication).
func scrape(ctx context.Context, url, token string) (map[string][]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	out := map[string][]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		out[name] = append(out[name], line)
	}
	return out, sc.Err()
}

// showMetrics prints where the scheduler and the agents serve their metrics, checks
// that the series the docs name are there, and prints the queues' shares.
func showMetrics(ctx context.Context, c *cluster.Cluster, nodes []string) ([]string, error) {
	url := c.SchedulerMetricsURL()
	lines := []string{"scheduler: " + url}
	sched, err := scrape(ctx, url, "")
	if err != nil {
		return nil, err
	}
	if err := need(sched, schedulerSeries, "the scheduler"); err != nil {
		return nil, err
	}
	for _, node := range nodes {
		u := c.AgentMetricsURL(node)
		lines = append(lines, "agent on "+node+": "+u)
		agent, err := scrape(ctx, u, c.Rest.BearerToken) // the harness's admin may get /metrics
		if err != nil {
			return nil, err
		}
		if err := need(agent, agentSeries, "the agent on "+node); err != nil {
			return nil, err
		}
	}
	shares := append([]string(nil), sched["tessera_scheduler_queue_vgpu_cards"]...)
	sort.Strings(shares)
	lines = append(lines, "queue shares (whole cards of SMs):")
	for _, s := range shares {
		lines = append(lines, "  "+s)
	}
	return lines, nil
}

func need(series map[string][]string, names []string, who string) error {
	for _, n := range names {
		if len(series[n]) == 0 {
			return fmt.Errorf("%s serves no %s", who, n)
		}
	}
	return nil
}
