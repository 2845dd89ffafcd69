package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// suitePackage is where Volcano keeps its e2e suites, in its module.
const suitePackage = "volcano.sh/volcano/test/e2e/"

// BuildSuites compiles each suite's tests into one binary (go test -c) in cacheDir, in the
// tools module (toolsDir) that pins Volcano v1.14.1, and returns suite -> binary. A binary
// newer than the tools module's go.sum is reused: the suites are Volcano's, they change
// only with its version.
func BuildSuites(ctx context.Context, toolsDir, cacheDir string, suites []string) (map[string]string, error) {
	sum, err := os.Stat(filepath.Join(toolsDir, "go.sum"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range suites {
		if strings.ContainsAny(s, "/. ") {
			return nil, fmt.Errorf("-suites: %q is not a suite name (e.g. schedulingbase)", s)
		}
		bin := filepath.Join(cacheDir, "volcano-e2e-"+s)
		out[s] = bin
		if st, err := os.Stat(bin); err == nil && st.ModTime().After(sum.ModTime()) {
			continue
		}
		fmt.Println("  go test -c", suitePackage+s, "(cold: several minutes, Kubernetes' e2e framework is large)")
		cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, suitePackage+s)
		cmd.Dir = toolsDir
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build suite %s: %w\n%s", s, err, b)
		}
	}
	return out, nil
}

// namedConf is a scheduler conf and where it came from.
type namedConf struct {
	name, source, body string
}

// volcanoCIConf is the conf Volcano's CI installs its chart with (hack/run-e2e-kind.sh:
// scheduler_config_file: config/volcano-scheduler-ci.conf), in its module.
const volcanoCIConf = "installer/helm/chart/volcano/config/volcano-scheduler-ci.conf"

// readConfs reads Tessera's shipped conf and Volcano's CI conf (found in the module the
// tools module pins), in the order they run.
func readConfs(ctx context.Context, root, toolsDir string) ([]namedConf, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "volcano.sh/volcano")
	cmd.Dir = toolsDir
	dir, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m volcano.sh/volcano in %s: %w", toolsDir, err)
	}
	files := []namedConf{
		{name: confTessera, source: filepath.Join(root, "config", "volcano-scheduler.conf")},
		{name: confVolcano, source: filepath.Join(strings.TrimSpace(string(dir)), volcanoCIConf)},
	}
	for i := range files {
		b, err := os.ReadFile(files[i].source)
		if err != nil {
			return nil, err
		}
		files[i].body = string(b)
	}
	return files, nil
}

// runSuite runs one suite binary against the cluster, with Ginkgo's JSON report in
// dir/<suite>.json and its verbose output in dir/<suite>.log. Failing specs are results,
// not errors: only a run that leaves no report is one.
func runSuite(ctx context.Context, bin, suite, dir, kubeconfig string, o options) error {
	report := filepath.Join(dir, suite+".json")
	logFile := filepath.Join(dir, suite+".log")
	if err := os.Remove(report); err != nil && !os.IsNotExist(err) {
		return err
	}
	log, err := os.Create(logFile)
	if err != nil {
		return err
	}
	defer log.Close()
	args := []string{"-ginkgo.json-report=" + report, "-ginkgo.v", "-ginkgo.no-color",
		"-ginkgo.timeout=" + o.suiteTimeout.String(), fmt.Sprintf("-ginkgo.seed=%d", o.seed)}
	if o.focus != "" {
		args = append(args, "-ginkgo.focus="+o.focus)
	}
	if o.skip != "" {
		args = append(args, "-ginkgo.skip="+o.skip)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	// The suites read KUBECONFIG (Volcano's e2e util).
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = log, log
	start := time.Now()
	runErr := cmd.Run()
	b, err := os.ReadFile(report)
	if err != nil {
		return fmt.Errorf("suite %s left no report (%v; its output: %s): %w", suite, runErr, logFile, err)
	}
	res, err := ParseReport(suite, b)
	if err != nil {
		return err
	}
	passed, failed := 0, 0
	for _, r := range res {
		switch {
		case r.Passed():
			passed++
		case r.Failed():
			failed++
		}
	}
	fmt.Printf("  %d passed, %d failed, %d not run in %s (log: %s)\n", passed, failed, len(res)-passed-failed,
		time.Since(start).Round(time.Second), logFile)
	return nil
}
