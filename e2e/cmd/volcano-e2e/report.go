package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// The part of Ginkgo's JSON report (ginkgo --json-report: a list of suite reports) the
// comparison reads. The e2e module keeps Ginkgo out of its dependencies, so these are
// our own types for the fields we need, not Ginkgo's.
type suiteReport struct {
	SuiteDescription string
	SpecReports      []specReport
}

type specReport struct {
	ContainerHierarchyTexts []string
	LeafNodeText            string
	LeafNodeType            string
	State                   string
	RunTime                 time.Duration
	Failure                 struct {
		Message  string
		Location struct {
			FileName   string
			LineNumber int
		}
	}
}

// Outcome is one spec's result under one conf.
type Outcome struct {
	State   string // Ginkgo's spec state: passed, failed, skipped, timedout, panicked, ...
	RunTime time.Duration
	// Reason is where and why it failed (the failure's file:line and message), or why
	// the spec skipped itself.
	Reason string
}

// Passed reports whether the spec ran and passed.
func (o Outcome) Passed() bool { return o.State == "passed" }

// Failed reports whether the spec ran and did not pass (failed, timed out, panicked,
// was interrupted or aborted); a skipped or pending spec, or one not in the report, did
// not run.
func (o Outcome) Failed() bool {
	switch o.State {
	case "", "passed", "skipped", "pending":
		return false
	}
	return true
}

// Results are one conf's outcomes, by spec ("suite: container > ... > leaf").
type Results map[string]Outcome

// ParseReport reads Ginkgo's JSON report of one suite binary into results keyed by
// suite (the name we ran it under) and spec. The specs are the It nodes; a suite-level
// node (BeforeSuite, ReportAfterSuite) is kept, as "suite: [NodeType]", only when it did
// not pass, since then no spec after it says much.
func ParseReport(suite string, data []byte) (Results, error) {
	var reports []suiteReport
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, fmt.Errorf("ginkgo JSON report of suite %s: %w", suite, err)
	}
	if len(reports) == 0 {
		return nil, fmt.Errorf("ginkgo JSON report of suite %s: no suite in it", suite)
	}
	out := Results{}
	for _, r := range reports {
		for _, s := range r.SpecReports {
			name := suite + ": " + strings.Join(append(append([]string(nil), s.ContainerHierarchyTexts...), s.LeafNodeText), " > ")
			if s.LeafNodeType != "It" {
				if s.State == "passed" || s.State == "" {
					continue
				}
				name = fmt.Sprintf("%s: [%s]", suite, s.LeafNodeType)
			}
			o := Outcome{State: s.State, RunTime: s.RunTime}
			if s.State == "skipped" && s.Failure.Message != "" {
				// Skip("...") inside the spec: Volcano's own reason for not running it.
				o.Reason = "Skip() in the spec: " + oneLine(s.Failure.Message)
			}
			if o.Failed() {
				loc := s.Failure.Location.FileName
				if i := strings.Index(loc, "/test/e2e/"); i >= 0 {
					loc = loc[i+len("/test/e2e/"):]
				}
				o.Reason = fmt.Sprintf("%s:%d: %s", loc, s.Failure.Location.LineNumber, oneLine(s.Failure.Message))
			}
			// Two specs of one name (Volcano's suites have some: "Job E2E Test" is the
			// container of three files): keep both apart by numbering the later ones.
			key := name
			for n := 2; ; n++ {
				if _, dup := out[key]; !dup {
					break
				}
				key = fmt.Sprintf("%s (#%d)", name, n)
			}
			out[key] = o
		}
	}
	return out, nil
}

// Row is one spec across the two confs.
type Row struct {
	Spec             string
	Tessera, Volcano Outcome
}

// Regression reports whether the spec passes under Volcano's CI conf and fails under
// Tessera's: the one difference this run exists to catch.
func (r Row) Regression() bool { return r.Volcano.Passed() && r.Tessera.Failed() }

// Compare lines up the two confs' results, in spec order.
func Compare(tessera, volcano Results) []Row {
	names := map[string]bool{}
	for n := range tessera {
		names[n] = true
	}
	for n := range volcano {
		names[n] = true
	}
	rows := make([]Row, 0, len(names))
	for n := range names {
		rows = append(rows, Row{Spec: n, Tessera: tessera[n], Volcano: volcano[n]})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Spec < rows[j].Spec })
	return rows
}

// Summary counts the rows by how the two confs compare.
type Summary struct {
	Both, Regressions, OnlyVolcanoFails, BothFail, NotRun int
}

// Summarize counts rows: passing under both, regressions (pass under Volcano's conf only),
// passing under Tessera's only, failing under both, and not run under one or both.
func Summarize(rows []Row) Summary {
	var s Summary
	for _, r := range rows {
		switch {
		case r.Tessera.Passed() && r.Volcano.Passed():
			s.Both++
		case r.Regression():
			s.Regressions++
		case r.Tessera.Passed() && r.Volcano.Failed():
			s.OnlyVolcanoFails++
		case r.Tessera.Failed() && r.Volcano.Failed():
			s.BothFail++
		default:
			s.NotRun++
		}
	}
	return s
}

// WriteTable writes the side-by-side table: spec, result and time under Tessera's conf,
// result and time under Volcano's CI conf, and a note (REGRESSION, or the failure's
// reason: Tessera's when only it failed, else Volcano's).
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SPEC\tTESSERA CONF\tVOLCANO CI CONF\tNOTE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Spec, cell(r.Tessera), cell(r.Volcano), note(r, 100))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := Summarize(rows)
	_, err := fmt.Fprintf(w, "\n%d specs: %d pass under both, %d regressions (pass with Volcano's CI conf, fail with Tessera's), "+
		"%d pass with Tessera's conf only, %d fail under both, %d not run under one or both\n",
		len(rows), s.Both, s.Regressions, s.OnlyVolcanoFails, s.BothFail, s.NotRun)
	return err
}

// WriteMarkdown writes the same table as Markdown (for docs/compatibility.md), with the
// full reason of every failure.
func WriteMarkdown(w io.Writer, rows []Row) error {
	if _, err := fmt.Fprintln(w, "| Spec | Tessera's conf | Volcano's CI conf | Note |\n|---|---|---|---|"); err != nil {
		return err
	}
	for _, r := range rows {
		n := strings.ReplaceAll(note(r, 0), "|", `\|`)
		if _, err := fmt.Fprintf(w, "| %s | %s | %s | %s |\n", strings.ReplaceAll(r.Spec, "|", `\|`), cell(r.Tessera), cell(r.Volcano), n); err != nil {
			return err
		}
	}
	return nil
}

func cell(o Outcome) string {
	switch {
	case o.State == "":
		return "not run"
	case o.State == "skipped" || o.State == "pending":
		return o.State
	}
	return fmt.Sprintf("%s %s", o.State, o.RunTime.Round(time.Second))
}

// note is a row's last column: REGRESSION first, then the reason of a failure, cut to
// max runes (0: whole).
func note(r Row, max int) string {
	var n string
	switch {
	case r.Regression():
		n = "REGRESSION: " + r.Tessera.Reason
	case r.Tessera.Failed():
		n = r.Tessera.Reason
	case r.Volcano.Failed():
		n = "(Volcano's conf) " + r.Volcano.Reason
	case r.Tessera.Reason != "":
		n = r.Tessera.Reason
	}
	if rs := []rune(n); max > 0 && len(rs) > max {
		n = string(rs[:max-1]) + "…"
	}
	return n
}

// oneLine folds a multi-line Gomega message into one line of single spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// LoadResults reads one conf's reports, one file per suite (suite name -> file).
func LoadResults(files map[string]string) (Results, error) {
	all := Results{}
	for suite, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		r, err := ParseReport(suite, b)
		if err != nil {
			return nil, err
		}
		for k, v := range r {
			all[k] = v
		}
	}
	return all, nil
}
