package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fixture writes a complete, small data directory: every file the figures read.
func fixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var bench strings.Builder
	bench.WriteString("date: 2026-11-27T10:00:00Z\nmachine: test CPU, 2 cores, 24 GiB\nload: 1.0 1.0 1.0\ngoos: linux\n")
	for _, nodes := range growthNodes {
		for _, tasks := range growthTasks {
			for _, mode := range []string{"none", "tessera"} {
				cpu := float64(nodes*tasks) / 250000
				if mode == "tessera" {
					cpu *= 1.2
				}
				fmt.Fprintf(&bench, "BenchmarkSessionGrowth/nodes=%d/tasks=%d/%s-2 \t 1\t 123 ns/op\t %d tasks-placed\t %.2f cpu-s/op\n", nodes, tasks, mode, tasks, cpu)
			}
		}
	}
	write(t, filepath.Join(dir, sessionBench), bench.String())
	var sm strings.Builder
	sm.WriteString("date: 2026-11-27T10:00:00Z\nmachine: test CPU, 2 cores, 24 GiB\n-- SM limiter, batch 1 of 2 --\n")
	for i := 0; i < 12; i++ {
		want := 10 + 5*i
		fmt.Fprintf(&sm, "ok    sm: 80 SMs fixed-share %d%% holds %d±5%% after 2 s\n      80 SMs, want %d%%: measured %.1f%% of the card after 2 s (worst 0.5 s window off by 0.2; 3 of 3 windows undisturbed), 999 launches\n      3 checks passed, 0 failed\n", want, want, want, float64(want)-0.1)
	}
	sm.WriteString("== build: 12 passed, 0 failed, 0 skipped ==\n")
	write(t, filepath.Join(dir, isolationData), sm.String())
	for _, run := range scaleRuns {
		for _, m := range scaleModes {
			r := map[string]any{"Mode": m, "Nodes": 100, "Jobs": 210, "PodsSubmitted": 900, "PodsBound": 900, "Seconds": 3.5,
				"PodsPerSecond": 257, "CardsInUse": 480, "LowerBound": 470, "StartedAt": time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC),
				"BoundBySecond": []int{0, 300, 600, 850, 900}, "Machine": "test CPU, 2 cores, 24 GiB",
				"Samples": []map[string]float64{{"Seconds": 1, "CPU": 0.5, "RSSMiB": 200}, {"Seconds": 2, "CPU": 1.4, "RSSMiB": 230}}}
			if m == "floor" {
				r["CardsInUse"], r["LowerBound"] = 0, 0
			}
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, run, m+".json"), string(b))
		}
	}
	return dir
}

func write(t *testing.T, file, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestEveryFigureIsDrawnTheSameTwice(t *testing.T) {
	data := fixture(t)
	a, err := drawAll(data)
	if err != nil {
		t.Fatal(err)
	}
	b, err := drawAll(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(figures()) {
		t.Errorf("%d SVGs for %d figures", len(a), len(figures()))
	}
	for name, svg := range a {
		if !bytes.Equal(svg, b[name]) {
			t.Errorf("%s differs between two draws of the same data", name)
		}
		if !bytes.Contains(svg, []byte("<svg ")) || !bytes.Contains(svg, []byte("drawn by make plots")) {
			t.Errorf("%s is not an SVG with its header", name)
		}
		// GitHub shows an SVG as an image: no script, no external font or image.
		for _, bad := range []string{"<script", "@import", "@font-face", "href=\"http"} {
			if bytes.Contains(svg, []byte(bad)) {
				t.Errorf("%s contains %q", name, bad)
			}
		}
		if bytes.Contains(svg, []byte("font-family:Liberation Sans;")) {
			t.Errorf("%s names Liberation Sans without the fonts of its metrics after it", name)
		}
	}
}

func TestCheckNamesMissingStaleAndChangedSVGs(t *testing.T) {
	data, out := fixture(t), t.TempDir()
	if err := writeAll(data, out); err != nil {
		t.Fatal(err)
	}
	if err := checkAll(data, out); err != nil {
		t.Fatalf("a fresh draw does not pass the check: %v", err)
	}
	write(t, filepath.Join(out, "isolation.svg"), "<svg/>")
	if err := os.Remove(filepath.Join(out, "architecture.svg")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(out, "old.svg"), "<svg/>")
	err := checkAll(data, out)
	for _, want := range []string{"isolation.svg is not what its data draws", "architecture.svg is missing", "old.svg is drawn by no figure"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("check error %v, want it to say %q", err, want)
		}
	}
}

func TestMissingOrMalformedDataFailsNamingTheFile(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, dir string)
		want  string
	}{
		{"a scale result missing", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "scale-250", "tessera.json")); err != nil {
				t.Fatal(err)
			}
		}, "scale-250/tessera.json: missing"},
		{"a scale result that is not JSON", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "scale-100", "floor.json"), "{")
		}, "scale-100/floor.json: not a make scale result"},
		{"a scale result of an older tool, without the curve", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "scale-100", "deviceshare.json"), `{"Mode":"deviceshare","Nodes":1,"PodsSubmitted":1,"PodsBound":1,"Seconds":1,"CardsInUse":1,"LowerBound":1}`)
		}, "scale-100/deviceshare.json: BoundBySecond"},
		{"a benchmark missing from the bench file", func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, sessionBench))
			write(t, filepath.Join(dir, sessionBench), strings.ReplaceAll(string(b), "nodes=500/tasks=250/none", "nodes=500/tasks=250/gone"))
		}, sessionBench + ": no BenchmarkSessionGrowth/nodes=500/tasks=250/none"},
		{"a bench file without its machine", func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, sessionBench))
			write(t, filepath.Join(dir, sessionBench), strings.Replace(string(b), "machine:", "host:", 1))
		}, sessionBench + `: no "machine" line`},
		{"a truncated vgpu-core log", func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, isolationData))
			write(t, filepath.Join(dir, isolationData), string(b[:len(b)/3]))
		}, "the suite did not run to its end"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := fixture(t)
			c.spoil(t, dir)
			_, err := drawAll(dir)
			if err == nil || !errors.Is(err, errData) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want a data error saying %q", err, c.want)
			}
		})
	}
}

func TestBenchLinesParseAsGoWritesThem(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "b.txt"), "date: 2026-11-27T10:00:00Z\nmachine: m\ncpu: AMD EPYC\n"+
		"BenchmarkSessionGrowth/nodes=250/tasks=250/none-2         \t       1\t1234567890 ns/op\t         0.7800 cpu-s/op\t       250.0 tasks-placed\n"+
		"E1127 17:58:37.312747   24353 util.go:77] a log line between results\n"+
		"BenchmarkX \t 3\t 10.5 ns/op\n")
	bf, err := loadBench(dir, "b.txt")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := bf.get("b.txt", "BenchmarkSessionGrowth/nodes=250/tasks=250/none", "cpu-s/op"); err != nil || v != 0.78 {
		t.Errorf("cpu-s/op %v, %v; want 0.78", v, err)
	}
	if v, err := bf.get("b.txt", "BenchmarkX", "ns/op"); err != nil || v != 10.5 {
		t.Errorf("BenchmarkX without a -P suffix: %v, %v", v, err)
	}
	if bf.config["cpu"] != "AMD EPYC" {
		t.Errorf("config %v", bf.config)
	}
}

func TestSMCasesKeepTheSuitesNamesAndVerdicts(t *testing.T) {
	dir := t.TempDir()
	body := "date: d\nmachine: m\n"
	for i := 0; i < 10; i++ {
		body += "ok    sm: 80 SMs fixed-share 30% holds 30±5% after 2 s\n      80 SMs, want 30%: measured 29.9% of the card after 2 s (worst 0.5 s window off by 0.1; 3 of 3 windows undisturbed), 2979 launches\n"
	}
	body += "FAIL  sm: 30% graph replay beside 70% plain launches, host pids, 188 SMs: tenant A holds 30%\n      188 SMs, graph replay, want 30%: measured 21.5% of the card after 2 s (worst 0.5 s window off by 9.4; 3 of 3 windows undisturbed), 681 replays\n== build: 10 passed, 1 failed, 0 skipped ==\n"
	write(t, filepath.Join(dir, "sm.txt"), body)
	cases, _, err := loadSM(dir, "sm.txt")
	if err != nil {
		t.Fatal(err)
	}
	last := cases[len(cases)-1]
	if len(cases) != 11 || last.passed || last.measured != 21.5 || last.target != 30 || last.sms != 188 || last.windows != 3 {
		t.Errorf("cases %d, last %+v", len(cases), last)
	}
	if got := shortCase(last); got != "30% graph replay beside 70% plain launches, host pids, 188 SMs: tenant A holds 30%" {
		t.Errorf("label %q", got)
	}
	if got := shortCase(cases[0]); got != "80 SMs fixed-share 30%" {
		t.Errorf("label %q", got)
	}
	if got := failure(last); got != "failed: a window off by 9.4" {
		t.Errorf("failure %q", got)
	}
}
