package klogtest

import (
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

func TestCaptureKeepsWhatWasLoggedAtItsVerbosity(t *testing.T) {
	buf := Capture(t, 2)
	klog.InfoS("shown", "k", 1)
	klog.V(2).InfoS("shown at v2")
	klog.V(3).InfoS("hidden at v3")
	klog.Flush()
	out := buf.String()
	if !strings.Contains(out, `"shown" k=1`) || !strings.Contains(out, "shown at v2") {
		t.Errorf("captured %q, want both messages at v<=2", out)
	}
	if strings.Contains(out, "hidden at v3") {
		t.Errorf("captured %q, want nothing above v2", out)
	}
	if n := strings.Count(out, "shown at v2"); n != 1 {
		t.Errorf("message captured %d times, want once", n)
	}
}
