package cluster

import (
	"strings"
	"testing"
	"time"
)

func TestSchedulerGoneTellsACrashFromARunningScheduler(t *testing.T) {
	c := &Cluster{logDir: t.TempDir()}
	if err := c.SchedulerGone(); err != nil {
		t.Fatalf("no scheduler started: %v, want nil", err)
	}

	running, err := startProc(c.logDir, "vc-scheduler", "sleep", "30")
	if err != nil {
		t.Fatal(err)
	}
	defer running.stop(time.Second)
	c.sched = running
	if err := c.SchedulerGone(); err != nil {
		t.Fatalf("running scheduler: %v, want nil", err)
	}

	crashed, err := startProc(c.logDir, "vc-scheduler", "sh", "-c", "exit 2")
	if err != nil {
		t.Fatal(err)
	}
	c.sched = crashed
	<-crashed.done
	err = c.SchedulerGone()
	if err == nil || !strings.Contains(err.Error(), "exit status 2") || !strings.Contains(err.Error(), "vc-scheduler.log") {
		t.Fatalf("crashed scheduler: %v, want its exit status and log named", err)
	}
}
