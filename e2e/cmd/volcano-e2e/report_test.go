package main

import (
	"strings"
	"testing"
	"time"
)

// A report as Ginkgo v2.23 writes it (--json-report), cut to one suite with a passing,
// a failing, a skipped spec, one that skips itself and a passing suite-level node.
const sampleReport = `[{"SuitePath":"/x","SuiteDescription":"Volcano Scheduler Test Suite","SuiteSucceeded":false,
"SpecReports":[
 {"ContainerHierarchyTexts":["Job E2E Test"],"LeafNodeType":"It","LeafNodeText":"Schedule Job","State":"passed","RunTime":12500000000},
 {"ContainerHierarchyTexts":["Reclaim E2E Test"],"LeafNodeType":"It","LeafNodeText":"Reclaim Case 10: Multi reclaimed queue","State":"failed",
  "RunTime":300000000000,"Failure":{"Message":"Timed out after 300s.\nExpected\n    <bool>: false\nto be true",
  "Location":{"FileName":"/root/go/pkg/mod/volcano.sh/volcano@v1.14.1/test/e2e/schedulingaction/reclaim.go","LineNumber":545}}},
 {"ContainerHierarchyTexts":["Volume Binding Test"],"LeafNodeType":"It","LeafNodeText":"should fail due to wrong node","State":"skipped","RunTime":0},
 {"ContainerHierarchyTexts":["Reclaim E2E Test"],"LeafNodeType":"It","LeafNodeText":"Reclaim","State":"skipped","RunTime":0,
  "Failure":{"Message":"skip: the case has some problem","Location":{"FileName":"reclaim.go","LineNumber":758}}},
 {"ContainerHierarchyTexts":null,"LeafNodeType":"ReportAfterSuite","LeafNodeText":"","State":"passed","RunTime":1000}
]}]`

func TestParseReportKeepsSpecsWithTheirStateTimeAndReason(t *testing.T) {
	res, err := ParseReport("schedulingaction", []byte(sampleReport))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("got %d specs, want the four It nodes (a passing suite-level node is not a spec): %v", len(res), res)
	}
	ok := res["schedulingaction: Job E2E Test > Schedule Job"]
	if !ok.Passed() || ok.RunTime != 12500*time.Millisecond {
		t.Errorf("passing spec: %+v", ok)
	}
	bad := res["schedulingaction: Reclaim E2E Test > Reclaim Case 10: Multi reclaimed queue"]
	if !bad.Failed() || bad.Reason != "schedulingaction/reclaim.go:545: Timed out after 300s. Expected <bool>: false to be true" {
		t.Errorf("failing spec: %+v", bad)
	}
	if skipped := res["schedulingaction: Volume Binding Test > should fail due to wrong node"]; skipped.Passed() || skipped.Failed() || skipped.Reason != "" {
		t.Errorf("a spec skipped by --skip neither passed nor failed, and has no reason: %+v", skipped)
	}
	if own := res["schedulingaction: Reclaim E2E Test > Reclaim"]; own.State != "skipped" || own.Reason != "Skip() in the spec: skip: the case has some problem" {
		t.Errorf("a spec that skips itself keeps its reason: %+v", own)
	}
}

func TestParseReportKeepsAFailedSuiteNodeAndNumbersDuplicateNames(t *testing.T) {
	report := `[{"SpecReports":[
 {"ContainerHierarchyTexts":["Job E2E Test"],"LeafNodeType":"It","LeafNodeText":"Statement","State":"passed"},
 {"ContainerHierarchyTexts":["Job E2E Test"],"LeafNodeType":"It","LeafNodeText":"Statement","State":"failed"},
 {"LeafNodeType":"BeforeSuite","State":"panicked","Failure":{"Message":"nil kubeconfig"}}]}]`
	res, err := ParseReport("s", []byte(report))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"s: Job E2E Test > Statement", "s: Job E2E Test > Statement (#2)", "s: [BeforeSuite]"} {
		if _, ok := res[k]; !ok {
			t.Errorf("no %q in %v", k, res)
		}
	}
	if !res["s: [BeforeSuite]"].Failed() {
		t.Errorf("a panicked BeforeSuite is a failure: %+v", res["s: [BeforeSuite]"])
	}
}

func TestParseReportRejectsWhatIsNotAReport(t *testing.T) {
	for name, in := range map[string]string{"not JSON": "{", "an object, not a list": `{"SpecReports":[]}`, "no suite": "[]"} {
		if _, err := ParseReport("schedulingbase", []byte(in)); err == nil || !strings.Contains(err.Error(), "schedulingbase") {
			t.Errorf("%s: got %v, want an error naming the suite", name, err)
		}
	}
}

func TestCompareFlagsOnlyAPassUnderVolcanosConfThatFailsUnderTesserasAsARegression(t *testing.T) {
	pass, failed, skipped := Outcome{State: "passed"}, Outcome{State: "failed", Reason: "x.go:1: boom"}, Outcome{State: "skipped"}
	tessera := Results{"both pass": pass, "regression": failed, "tessera only": pass, "both fail": failed, "skipped": skipped,
		"timed out under tessera": {State: "timedout"}}
	volcano := Results{"both pass": pass, "regression": pass, "tessera only": failed, "both fail": failed, "skipped": skipped,
		"timed out under tessera": pass, "only in volcano's run": pass}
	rows := Compare(tessera, volcano)
	var regressions []string
	for _, r := range rows {
		if r.Regression() {
			regressions = append(regressions, r.Spec)
		}
	}
	if got := strings.Join(regressions, ","); got != "regression,timed out under tessera" {
		t.Errorf("regressions %q, want a failure and a timeout under Tessera's conf of specs that pass under Volcano's", got)
	}
	s := Summarize(rows)
	if s != (Summary{Both: 1, Regressions: 2, OnlyVolcanoFails: 1, BothFail: 1, NotRun: 2}) {
		t.Errorf("summary %+v", s)
	}
	var b strings.Builder
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "REGRESSION: x.go:1: boom") || !strings.Contains(b.String(), "not run") {
		t.Errorf("table does not mark the regression or the spec missing from one run:\n%s", b.String())
	}
}

// FuzzParseReport: whatever the file holds, parsing returns results or an error, and
// every result's key names the suite.
func FuzzParseReport(f *testing.F) {
	f.Add([]byte(sampleReport))
	f.Add([]byte(`[{"SpecReports":[{"LeafNodeType":"It","State":"failed","Failure":{"Message":"a\nb"}}]}]`))
	f.Add([]byte(`[{"SpecReports":null}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := ParseReport("suite", data)
		if err != nil {
			return
		}
		for k, o := range res {
			if !strings.HasPrefix(k, "suite: ") {
				t.Fatalf("key %q does not name the suite", k)
			}
			if o.Failed() && strings.Contains(o.Reason, "\n") {
				t.Fatalf("reason %q spans lines", o.Reason)
			}
		}
	})
}
