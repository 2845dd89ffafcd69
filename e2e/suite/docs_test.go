package suite

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// walkedPages are the pages a platform engineer follows from install to a first job; every
// shell block on them says whether the walk runs it (and how) or why it cannot run here.
var walkedPages = []string{"first-job.md", "install.md", "migration.md"}

// docBlock is one shell block of a page with its docs-test marker:
//
//	<!-- docs-test: run -->            run; it must succeed
//	<!-- docs-test: run output -->     and the "Label:" lines of the output block the page shows next must be there
//	<!-- docs-test: watch WORD -->     run until its output shows WORD (a command that streams, like get -w)
//	<!-- docs-test: retry 90s -->      run again until it succeeds, for at most that long
//	<!-- docs-test: skip: REASON -->   not run here, for that reason
type docBlock struct {
	page   string
	line   int
	verb   string
	arg    string
	script string
	// shown is the output block the page prints after it ("" if none).
	shown string
}

var markerRE = regexp.MustCompile(`^<!-- docs-test: (\w+):? ?(.*?) -->$`)

// readBlocks parses a page; a shell block without a marker is an error naming its line.
func readBlocks(path string) ([]docBlock, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		blocks      []docBlock
		lines       []string
		marker      []string
		inFence     bool
		fenceLang   string
		fenceStart  int
		waitOutput  = -1
		unmarked    []string
		previousTxt string
	)
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		l := sc.Text()
		switch {
		case !inFence && strings.HasPrefix(l, "```"):
			inFence, fenceLang, fenceStart, lines = true, strings.TrimPrefix(l, "```"), n, nil
			marker = markerRE.FindStringSubmatch(previousTxt)
		case inFence && strings.HasPrefix(l, "```"):
			inFence = false
			body := strings.Join(lines, "\n")
			switch fenceLang {
			case "sh", "bash", "shell", "console":
				if marker == nil {
					unmarked = append(unmarked, fmt.Sprintf("%s:%d", filepath.Base(path), fenceStart))
					break
				}
				blocks = append(blocks, docBlock{page: filepath.Base(path), line: fenceStart, verb: marker[1], arg: marker[2], script: body})
				waitOutput = -1
				if marker[1] == "run" && marker[2] == "output" {
					waitOutput = len(blocks) - 1
				}
			case "":
				if waitOutput >= 0 {
					blocks[waitOutput].shown = body
					waitOutput = -1
				}
			}
		case inFence:
			lines = append(lines, l)
		}
		if strings.TrimSpace(l) != "" {
			previousTxt = strings.TrimSpace(l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(unmarked) > 0 {
		return nil, fmt.Errorf("shell blocks without a docs-test marker (say how the walk runs them, or why it cannot): %s", strings.Join(unmarked, ", "))
	}
	return blocks, nil
}

// TestDocsCommandsRunAsWritten walks the install, first-job and migration pages: every
// shell block the end-to-end cluster can run is run as written (kubectl, kubectl tessera
// as a kubectl plugin, against the cluster as its admin), in page order, from a directory
// holding the first job's file and the repository's config/; each block it cannot run says
// why on the page.
func TestDocsCommandsRunAsWritten(t *testing.T) {
	ctx := context.Background()
	bin := t.TempDir()
	for name, src := range map[string]string{"kubectl": cl.Opts.Bin.Kubectl, "kubectl-tessera": cl.Opts.Bin.KubectlTessera, "helm": cl.Opts.Bin.Helm} {
		if err := os.Symlink(src, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	job, err := os.ReadFile(filepath.Join(root, "config", "first-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "first-job.yaml"), job, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "config"), filepath.Join(work, "config")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECONFIG="+cl.Kubeconfig, "HOME="+work)
	defer func() {
		_ = cl.Volcano.BatchV1alpha1().Jobs("default").Delete(ctx, "first-vgpu", metav1.DeleteOptions{})
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			pods, err := cl.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "volcano.sh/job-name=first-vgpu"})
			if err == nil && len(pods.Items) == 0 {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Errorf("the first job's pods outlived the walk")
	}()

	ran, skipped := 0, 0
	for _, page := range walkedPages {
		blocks, err := readBlocks(filepath.Join(root, "docs", page))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			where := fmt.Sprintf("%s:%d", b.page, b.line)
			switch b.verb {
			case "skip":
				if strings.TrimSpace(b.arg) == "" {
					t.Errorf("%s: skipped without a reason", where)
				}
				skipped++
				continue
			case "run", "watch", "retry":
			default:
				t.Errorf("%s: unknown docs-test verb %q", where, b.verb)
				continue
			}
			ran++
			out, err := runBlock(b, work, env)
			if err != nil {
				t.Errorf("%s: %v\n$ %s\n%s", where, err, b.script, out)
				continue
			}
			t.Logf("%s: ok\n$ %s\n%s", where, b.script, out)
			if b.arg == "output" {
				for _, label := range shownLabels(b.shown) {
					if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(label) + `:`).MatchString(out) {
						t.Errorf("%s: the page shows a %q line; the command printed none:\n%s", where, label, out)
					}
				}
			}
		}
	}
	if ran == 0 {
		t.Fatal("the walk ran no block")
	}
	t.Logf("%d blocks run, %d skipped with their reasons", ran, skipped)
}

// shownLabels are the "Label:" words at the start of the lines of an output block.
func shownLabels(shown string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^([A-Z][A-Za-z]*):`).FindAllStringSubmatch(shown, -1) {
		out = append(out, m[1])
	}
	return out
}

// runBlock runs one block with bash -e, as a reader pasting it would, within its verb's
// rules.
func runBlock(b docBlock, dir string, env []string) (string, error) {
	run := func(ctx context.Context, until string) (string, error) {
		cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", b.script)
		cmd.Dir, cmd.Env = dir, env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		var buf lockedBuffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Start(); err != nil {
			return "", err
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case err := <-done:
				if until != "" && !strings.Contains(buf.String(), until) {
					return buf.String(), fmt.Errorf("ended (%v) without showing %q", err, until)
				}
				return buf.String(), err
			case <-tick.C:
				if until != "" && strings.Contains(buf.String(), until) {
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
					<-done
					return buf.String(), nil
				}
			}
		}
	}
	switch b.verb {
	case "watch":
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		return run(ctx, b.arg)
	case "retry":
		limit, err := time.ParseDuration(b.arg)
		if err != nil {
			return "", fmt.Errorf("retry %q: %w", b.arg, err)
		}
		deadline := time.Now().Add(limit)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			out, err := run(ctx, "")
			cancel()
			if err == nil || time.Now().After(deadline) {
				return out, err
			}
			time.Sleep(2 * time.Second)
		}
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		return run(ctx, "")
	}
}

// lockedBuffer is a bytes.Buffer the command writes while the walk reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
