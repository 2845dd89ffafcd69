// Package klogtest captures klog's output in tests, so that a test can check what a
// component logged (and how often) without reading the process's stderr.
package klogtest

import (
	"bytes"
	"flag"
	"os"
	"strconv"
	"testing"

	"k8s.io/klog/v2"
)

// Capture sends klog's output at verbosity v and above to the returned buffer for the
// rest of the test, each message once (not also to stderr), and restores klog's
// defaults when the test ends. klog's settings are global: tests that capture must not
// run in parallel.
func Capture(t testing.TB, v int) *bytes.Buffer {
	t.Helper()
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	set := map[string]string{"v": strconv.Itoa(v), "logtostderr": "false", "alsologtostderr": "false",
		"one_output": "true", "stderrthreshold": "FATAL"}
	for k, val := range set {
		if err := fs.Set(k, val); err != nil {
			t.Fatalf("klog flag %s=%s: %v", k, val, err)
		}
	}
	var buf bytes.Buffer
	klog.SetOutput(&buf)
	t.Cleanup(func() {
		klog.Flush()
		klog.SetOutput(os.Stderr)
		for k, val := range map[string]string{"v": "0", "logtostderr": "true", "one_output": "false", "stderrthreshold": "ERROR"} {
			_ = fs.Set(k, val)
		}
	})
	return &buf
}
