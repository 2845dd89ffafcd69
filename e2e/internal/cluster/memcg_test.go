package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// TestMemoryCgroupHoldsAProcessToItsLimit: a process that takes more than the limit is
// killed by the kernel, and the cgroup says so; one within it runs and its peak is read.
func TestMemoryCgroupHoldsAProcessToItsLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("memory cgroups need root")
	}
	cg, err := NewMemoryCgroup(fmt.Sprintf("tessera-memcg-test-%d", os.Getpid()), 64<<20)
	if err != nil {
		t.Skip(err) // no writable memory hierarchy here
	}
	defer cg.Remove()
	// tail -n 1 keeps a whole line in memory: 256 MiB without a newline is more than the limit.
	hog := exec.Command("sh", "-c", "read _; head -c 268435456 /dev/zero | tail -n 1 >/dev/null")
	in, err := hog.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	if err := cg.Add(hog.Process.Pid); err != nil {
		t.Fatal(err)
	}
	in.Write([]byte("go\n"))
	in.Close()
	err = hog.Wait()
	peak, kills, perr := cg.Peak()
	if perr != nil {
		t.Fatal(perr)
	}
	t.Logf("hog: %v; peak %d MiB, OOM kills %d", err, peak>>20, kills)
	if err == nil || kills < 1 {
		t.Fatalf("a process over the limit ran to its end (%v) or no OOM kill was counted (%d)", err, kills)
	}
	if peak > 64<<20 || peak < 32<<20 {
		t.Errorf("peak %d MiB, want near the 64 MiB limit", peak>>20)
	}
}
