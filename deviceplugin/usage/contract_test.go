package usage

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The cross-language contract: a region written by the real vgpu-core library (preloaded
// into a program on the stub driver) is read back here with the numbers the program
// allocated. The C side lives in vgpu-core/tests/contract_region.c.

const (
	stubUUID0 = "GPU-7e55e7a0-0000-0000-0000-000000000000"
	stubUUID1 = "GPU-7e55e7a0-0000-0000-0000-000000000001"
	mib       = 1 << 20
)

// buildVGPUCore builds libvgpu.so, the stub driver and the contract program (make is
// incremental: a no-op when `make build` already ran).
func buildVGPUCore(t *testing.T) (lib, prog string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("vgpu-core builds on Linux only")
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "vgpu-core"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-s", "-C", dir, "build/libvgpu.so", "build/tests/contract_region")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building vgpu-core: %v\n%s", err, out)
	}
	return filepath.Join(dir, "build", "libvgpu.so"), filepath.Join(dir, "build", "tests", "contract_region")
}

func TestContractLayoutMatchesTheCStructs(t *testing.T) {
	_, prog := buildVGPUCore(t)
	out, err := exec.Command(prog, "layout").Output()
	if err != nil {
		t.Fatalf("%s layout: %v", prog, err)
	}
	c := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("layout line %q: %v", line, err)
		}
		c[k] = n
	}
	l, err := nativeLayout()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		"version": LayoutVersion, "max_cards": MaxCards, "max_procs": MaxProcs, "size": l.Size,
		"off_version": offVersion, "off_size": offSize, "off_reclaimed": l.Reclaimed, "off_cards": l.Cards,
		"card_size": cardSize, "card_used": cardUsed, "card_capped": cardCapped, "card_util_pct": cardUtilPct,
		"card_charged": cardCharged, "off_procs": l.Procs, "proc_size": procSize, "proc_pid": procPID,
		"proc_start": procStart, "proc_used": procUsed, "proc_marker_fd": procMarkerFD, "proc_marker_ino": procMarkerIno,
	}
	if len(c) != len(want) {
		t.Errorf("the C side prints %d layout values, the Go side checks %d", len(c), len(want))
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s: C says %d, the Go reader uses %d", k, c[k], v)
		}
	}
}

// holder is a running contract program holding memory through the hook library.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func startHolder(t *testing.T, lib, prog, region string, args ...string) *holder {
	t.Helper()
	cmd := exec.Command(prog, append([]string{"hold"}, args...)...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TESSERA_") && !strings.HasPrefix(kv, "LD_PRELOAD=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env,
		"LD_PRELOAD="+lib,
		"TESSERA_STUB_DEVICES=2",
		"TESSERA_STUB_MEMORY_MIB=4096",
		"TESSERA_SHARED_REGION="+region,
		"TESSERA_VISIBLE_UUIDS="+stubUUID0+","+stubUUID1,
		"TESSERA_MEMORY_LIMIT_MIB=1024,2048",
		"TESSERA_SM_LIMIT=100,50",
		"TESSERA_QOS=fixed-share",
	)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, stdin: stdin}
	t.Cleanup(h.stop)
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		if strings.TrimSpace(line) != "ready" {
			t.Fatalf("contract program said %q instead of ready", line)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("contract program not ready after 60 s")
	}
	return h
}

func (h *holder) stop() {
	_ = h.stdin.Close()
	_ = h.cmd.Wait()
}

func TestContractRegionWrittenByTheHookLibrary(t *testing.T) {
	lib, prog := buildVGPUCore(t)
	region := filepath.Join(t.TempDir(), "region")
	h := startHolder(t, lib, prog, region, "0:100", "1:300:2500")

	s := NewSampler("/proc", true)
	u, r, err := s.Container(region)
	if err != nil {
		t.Fatalf("reading the region the library wrote: %v", err)
	}
	if len(r.Procs) != 1 || r.Procs[0].PID != int32(h.cmd.Process.Pid) {
		t.Fatalf("registered processes %+v, want only pid %d", r.Procs, h.cmd.Process.Pid)
	}
	if u.LiveProcs != 1 || u.DeadProcs != 0 {
		t.Fatalf("the running holder counts as %d live, %d dead", u.LiveProcs, u.DeadProcs)
	}
	if u.Cards[0].UsedBytes != 100*mib || u.Cards[1].UsedBytes != 300*mib {
		t.Fatalf("used = %d, %d bytes; the program allocated 100 MiB and 300 MiB", u.Cards[0].UsedBytes, u.Cards[1].UsedBytes)
	}
	if u.Cards[0].Measured || u.Cards[0].Capped {
		t.Errorf("card 0 has no SM limit, yet reads as measured/capped: %+v", u.Cards[0])
	}
	if !u.Cards[1].Capped || !u.Cards[1].Measured || u.Cards[1].SMRatio <= 0 || u.Cards[1].SMRatio > 1 {
		t.Errorf("card 1 (50%% SM limit, kernels launched for 2.5 s): %+v, want capped with a share in (0, 1]", u.Cards[1])
	}

	// The holder exits without freeing: its slot stays in the region, but is dead.
	h.stop()
	u, r, err = NewSampler("/proc", true).Container(region)
	if err != nil {
		t.Fatal(err)
	}
	if r.Cards[1].UsedBytes != 300*mib {
		t.Fatalf("the region's own total is %d: nobody reclaimed it, it should still show the dead process", r.Cards[1].UsedBytes)
	}
	if u.LiveProcs != 0 || u.DeadProcs != 1 || u.Cards[0].UsedBytes != 0 || u.Cards[1].UsedBytes != 0 || u.Cards[1].Measured {
		t.Fatalf("after the holder exited: %+v", u)
	}
}

func TestContractRegionOfAnotherVersionIsRefused(t *testing.T) {
	lib, prog := buildVGPUCore(t)
	region := filepath.Join(t.TempDir(), "region")
	startHolder(t, lib, prog, region, "0:1").stop()
	b, err := os.ReadFile(region)
	if err != nil {
		t.Fatal(err)
	}
	b[offVersion]++ // what a vgpu-core of the next layout would write
	if err := os.WriteFile(region, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = NewSampler("/proc", true).Container(region)
	if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "layout version 4") {
		t.Fatalf("reading a version 4 region: %v, want %v naming version 4", err, ErrLayout)
	}
}
