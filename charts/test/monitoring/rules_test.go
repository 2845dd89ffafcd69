// Package monitoring parses the chart's alert rules and Grafana dashboard with
// Prometheus's own rule and PromQL parsers, and checks that every metric they name is
// one the scheduler or the node agent registers. It is a module of its own: Prometheus
// needs a newer client_golang than Volcano v1.14.1 compiles against (see
// charts/test/monitoring_test.go, which keeps testdata/ in step with the chart and the
// registries).
package monitoring

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// builtin are series Prometheus makes itself for every target.
var builtin = map[string]bool{"up": true}

// registered reads testdata/metrics.txt: the metric families the registries hold.
func registered(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "metrics.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if n := strings.TrimSpace(sc.Text()); n != "" {
			names[n] = true
		}
	}
	if len(names) < 10 {
		t.Fatalf("testdata/metrics.txt lists only %d names", len(names))
	}
	return names
}

// known reports whether a series name is exported: a registered family, a histogram's or
// summary's _bucket/_sum/_count series of one, or a Prometheus built-in.
func known(names map[string]bool, name string) bool {
	if names[name] || builtin[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && names[base] {
			return true
		}
	}
	return false
}

// selectedNames parses expr as PromQL and returns the metric names its selectors name.
func selectedNames(t *testing.T, p parser.Parser, expr string) []string {
	t.Helper()
	e, err := p.ParseExpr(expr)
	if err != nil {
		t.Errorf("%q does not parse as PromQL: %v", expr, err)
		return nil
	}
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			t.Errorf("%q selects series without naming a metric", expr)
		}
		out = append(out, name)
		return nil
	})
	return out
}

func TestAlertRulesParseAndNameOnlyExportedMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.Parse(b, false, model.LegacyValidation, p, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("rules.yaml: %v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	names := registered(t)
	alerts := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s lacks a severity, summary or description", r.Alert)
			}
			for _, n := range selectedNames(t, p, r.Expr) {
				if !known(names, n) {
					t.Errorf("alert %s uses %s, which neither the scheduler nor the node agent exports", r.Alert, n)
				}
			}
		}
	}
	// What docs/reference.md promises an operator is alerted on.
	for _, want := range []string{"TesseraAgentDown", "TesseraInventoryStale", "TesseraHookNotLoaded", "TesseraContainerAtMemoryCap",
		"TesseraPlacementSlow", "TesseraSchedulerDown"} {
		if !alerts[want] {
			t.Errorf("no alert %s", want)
		}
	}
}

// dashboard is the part of a Grafana dashboard model that holds queries.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// labelValues is Grafana's variable query label_values(<selector>, <label>).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_]+\)$`)

func TestDashboardQueriesParseAndNameOnlyExportedMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "tessera", "dashboards", "tessera.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboards/tessera.json: %v", err)
	}
	p := parser.NewParser(parser.Options{})
	names := registered(t)
	used := map[string]bool{}
	queries := 0
	check := func(where, expr string) {
		queries++
		for _, n := range selectedNames(t, p, expr) {
			used[n] = true
			if !known(names, n) {
				t.Errorf("%s uses %s, which neither the scheduler nor the node agent exports", where, n)
			}
		}
	}
	for _, panel := range d.Panels {
		if panel.Type != "row" && len(panel.Targets) == 0 {
			t.Errorf("panel %q has no query", panel.Title)
		}
		for _, target := range panel.Targets {
			check("panel "+panel.Title, target.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(<selector>, <label>)", v.Name, v.Definition)
			continue
		}
		check("variable "+v.Name, m[1])
	}
	if queries < 15 {
		t.Fatalf("only %d queries found: is the dashboard model read correctly?", queries)
	}
	// The panels: promised vs used memory and SM, pending pods and reasons, queue shares.
	for _, want := range []string{"tessera_card_assigned_memory_bytes", "tessera_container_gpu_memory_used_bytes",
		"tessera_card_assigned_cores_ratio", "tessera_container_gpu_sm_utilization_ratio", "tessera_scheduler_vgpu_tasks_pending",
		"tessera_scheduler_queue_vgpu_memory_bytes", "tessera_scheduler_queue_vgpu_cards"} {
		if !used[want] {
			t.Errorf("the dashboard shows no %s", want)
		}
	}
}

func TestUnknownMetricsAreCaught(t *testing.T) {
	names := map[string]bool{"tessera_card_memory_bytes": true, "tessera_scheduler_vgpu_placement_seconds": true}
	p := parser.NewParser(parser.Options{})
	got := selectedNames(t, p, `sum(tessera_card_memory_mib) / on(node) group_left() rate(tessera_scheduler_vgpu_placement_seconds_bucket[5m])`)
	if len(got) != 2 || known(names, got[0]) || !known(names, got[1]) {
		t.Fatalf("names %v: the old _mib name must be unknown, the histogram's bucket series known", got)
	}
}
