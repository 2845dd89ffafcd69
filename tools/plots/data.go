package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// errData marks a data file that is missing or malformed; the message names the file.
var errData = errors.New("benchmark data")

func dataError(file, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", errData, file, fmt.Sprintf(format, args...))
}

func readData(dir, name string) ([]byte, string, error) {
	file := filepath.Join(dir, name)
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil, file, dataError(file, "missing (its make target writes it: see docs/benchmarks.md, Pictures and their data)")
	}
	if err != nil {
		return nil, file, dataError(file, "%v", err)
	}
	return b, file, nil
}

// ---- make scale: one JSON file per scheduler (e2e/internal/scale.Result) ----

// scaleResult is the part of the scale tool's result the plots read.
type scaleResult struct {
	Mode                       string
	Nodes, Jobs                int
	PodsSubmitted, PodsBound   int
	VGPUPodsBound              int
	Seconds, PodsPerSecond     float64
	CardsInUse, LowerBound     int
	Overcommitted              []string
	SchedulerCPU, LoadMean     float64
	RSSMiB, PeakRSSMiB         float64
	StartedAt                  time.Time
	BoundBySecond              []int
	Samples                    []struct{ Seconds, CPU, RSSMiB float64 }
	Machine, Revision, Command string
}

// loadScale reads run/<mode>.json for each mode, in order.
func loadScale(dir, run string, modes []string) ([]*scaleResult, error) {
	var out []*scaleResult
	var errs []error
	for _, m := range modes {
		b, file, err := readData(dir, filepath.Join(run, m+".json"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var r scaleResult
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&r); err != nil {
			errs = append(errs, dataError(file, "not a make scale result: %v", err))
			continue
		}
		switch {
		case r.Mode != m:
			errs = append(errs, dataError(file, "Mode is %q, want %q", r.Mode, m))
		case r.Nodes <= 0 || r.PodsSubmitted <= 0 || r.PodsBound <= 0 || r.Seconds <= 0:
			errs = append(errs, dataError(file, "no run in it (Nodes %d, PodsSubmitted %d, PodsBound %d, Seconds %g)", r.Nodes, r.PodsSubmitted, r.PodsBound, r.Seconds))
		case len(r.BoundBySecond) == 0 || r.BoundBySecond[len(r.BoundBySecond)-1] != r.PodsBound:
			errs = append(errs, dataError(file, "BoundBySecond does not end at PodsBound %d (a result of a scale tool older than the curve?)", r.PodsBound))
		case m != "floor" && (r.CardsInUse <= 0 || r.LowerBound <= 0):
			errs = append(errs, dataError(file, "CardsInUse %d, LowerBound %d: want both", r.CardsInUse, r.LowerBound))
		case r.Machine == "" || r.StartedAt.IsZero():
			errs = append(errs, dataError(file, "no Machine or StartedAt: where and when it ran is part of the data"))
		default:
			out = append(out, &r)
		}
	}
	return out, errors.Join(errs...)
}

// ---- go test -bench: Go's benchmark format ----

// benchFile is a file in Go's benchmark format: configuration lines (key: value) and
// result lines (BenchmarkName-P  N  value unit  value unit ...).
type benchFile struct {
	config  map[string]string // the first value of each key
	results []benchResult
}

type benchResult struct {
	name    string // without the -P suffix
	iters   int
	metrics map[string]float64 // unit → value
}

var (
	benchLine  = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+(\d+)\s+(.*)$`)
	configLine = regexp.MustCompile(`^([a-z][^\s:]*):\s*(.*)$`)
)

func loadBench(dir, name string) (*benchFile, error) {
	b, file, err := readData(dir, name)
	if err != nil {
		return nil, err
	}
	bf := &benchFile{config: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if m := benchLine.FindStringSubmatch(line); m != nil {
			iters, _ := strconv.Atoi(m[3])
			f := strings.Fields(m[4])
			if len(f)%2 != 0 {
				return nil, dataError(file, "line %d: values and units do not pair: %q", n, line)
			}
			r := benchResult{name: m[1], iters: iters, metrics: map[string]float64{}}
			for i := 0; i < len(f); i += 2 {
				v, err := strconv.ParseFloat(f[i], 64)
				if err != nil {
					return nil, dataError(file, "line %d: %q is not a number", n, f[i])
				}
				r.metrics[f[i+1]] = v
			}
			bf.results = append(bf.results, r)
		} else if m := configLine.FindStringSubmatch(line); m != nil {
			if _, seen := bf.config[m[1]]; !seen {
				bf.config[m[1]] = m[2]
			}
		}
	}
	for _, key := range []string{"date", "machine"} {
		if bf.config[key] == "" {
			return nil, dataError(file, "no %q line: where and when it ran is part of the data", key)
		}
	}
	return bf, nil
}

// get returns the named benchmark's metric, or an error naming the file.
func (bf *benchFile) get(file, name, unit string) (float64, error) {
	for _, r := range bf.results {
		if r.name == name {
			if v, ok := r.metrics[unit]; ok {
				return v, nil
			}
			return 0, dataError(file, "%s has no %q", name, unit)
		}
	}
	return 0, dataError(file, "no %s", name)
}

// ---- vgpu-core's suite: the SM limiter's cases ----

// smCase is one SM limiter case of vgpu-core's suite: the share it must hold and the
// share measured.
type smCase struct {
	name             string
	sms              int
	target, measured float64
	worstWindow      float64
	windows          int // undisturbed windows measured (the suite wants 3)
	passed           bool
}

var (
	caseLine  = regexp.MustCompile(`^(ok|FAIL|skip)\s+(.*)$`)
	suiteLine = regexp.MustCompile(`^== \S+: (.*) ==$`)
	smLine    = regexp.MustCompile(`^\s+(\d+) SMs(, graph replay)?, want (\d+(?:\.\d+)?)%: measured (\d+(?:\.\d+)?)% of the card.*off by (\d+(?:\.\d+)?); (\d+) of \d+ windows undisturbed`)
)

func loadSM(dir, name string) ([]smCase, map[string]string, error) {
	b, file, err := readData(dir, name)
	if err != nil {
		return nil, nil, err
	}
	config := map[string]string{}
	var cases []smCase
	last := ""
	lastPassed := false
	var failedElsewhere []string // failed checks that are not SM cases (the GPU test kit)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if m := caseLine.FindStringSubmatch(line); m != nil {
			if last != "" && !lastPassed {
				failedElsewhere = append(failedElsewhere, last)
			}
			last, lastPassed = m[2], m[1] == "ok"
			continue
		}
		if m := smLine.FindStringSubmatch(line); m != nil && last != "" {
			sms, _ := strconv.Atoi(m[1])
			target, _ := strconv.ParseFloat(m[3], 64)
			measured, _ := strconv.ParseFloat(m[4], 64)
			worst, _ := strconv.ParseFloat(m[5], 64)
			windows, _ := strconv.Atoi(m[6])
			cases = append(cases, smCase{name: last, sms: sms, target: target, measured: measured, worstWindow: worst, windows: windows, passed: lastPassed})
			last = ""
			continue
		}
		if m := suiteLine.FindStringSubmatch(line); m != nil {
			if last != "" && !lastPassed {
				failedElsewhere = append(failedElsewhere, last)
			}
			last = ""
			config["suite"] = m[1]
			continue
		}
		if m := configLine.FindStringSubmatch(line); m != nil {
			if _, seen := config[m[1]]; !seen {
				config[m[1]] = m[2]
			}
		}
	}
	if config["date"] == "" || config["machine"] == "" {
		return nil, nil, dataError(file, "no date or machine line: where and when it ran is part of the data")
	}
	for _, f := range failedElsewhere {
		name, _, _ := strings.Cut(f, ":")
		config["failed-elsewhere"] += map[bool]string{true: "", false: ", "}[config["failed-elsewhere"] == ""] + name
	}
	if config["suite"] == "" {
		return nil, nil, dataError(file, "no summary line (== build: N passed, ...): the suite did not run to its end")
	}
	if len(cases) < 10 {
		return nil, nil, dataError(file, "%d SM limiter cases, want the suite's (make isolation-data writes them)", len(cases))
	}
	return cases, config, nil
}

// day is the date part of a "date:" line.
func day(date string) string {
	if t, err := time.Parse(time.RFC3339, date); err == nil {
		return t.UTC().Format("2006-01-02")
	}
	return date
}
