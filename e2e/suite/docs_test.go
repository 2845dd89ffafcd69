package suite

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// walkedPages are the pages a platform engineer follows from install to a first job; every
// shell block on them says whether the walk runs it (and how) or why it cannot run here.
var walkedPages = []string{"first-job.md", "install.md", "migration.md"}

// docBlock is one shell block of a page with its docs-test marker (the last non-blank line
// before its fence, indented or not, as a block in a list item is):
//
//	<!-- docs-test: run -->            run; it must succeed
//	<!-- docs-test: run output -->     and the "Label:" lines of the output block the page shows next must be there
//	<!-- docs-test: watch WORD -->     run until its output shows WORD, which it must (a command that streams,
//	                                   like get -w, or one whose output the page promises shows WORD)
//	<!-- docs-test: retry 90s -->      run again until it succeeds, for at most that long
//	<!-- docs-test: render -->         run, with each helm install or helm upgrade in it made a helm template
//	                                   of the same arguments with --validate (renderHelm): the values it
//	                                   passes must pass the chart's schema and checks, and the rendered
//	                                   objects the API server's validation, for a release the end-to-end
//	                                   cluster cannot run; nothing is installed, the block's other commands
//	                                   run as written
//	<!-- docs-test: skip: REASON -->   not run here, for that reason
//
// A block in a list item is read as a reader copies it: without the indentation of its fence.
// In the blocks it runs, the walk puts its values for the pages' <placeholders> (placeholders).
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

// placeholders are the walk's values for the <placeholders> of the blocks it runs, put in as a
// reader puts in their own: migration.md's node pool is one node of the cluster (cordoned,
// labelled and uncordoned by the page's blocks; restorePoolNode puts it back as it was), its
// HAMi volcano device plugin the names of that plugin's published manifest.
var placeholders = map[string]string{
	"<pool-label>":     "kubernetes.io/hostname=" + docsPoolNode,
	"<hami-namespace>": "kube-system",
	"<hami-plugin>":    "volcano-device-plugin",
}

// docsPoolNode is the node that stands for migration.md's node pool; poolLabel is the label the
// page gives a pool for Tessera's agent.
const (
	docsPoolNode = "gpu-d"
	poolLabel    = "tessera.io/vgpu"
)

var placeholderRE = regexp.MustCompile(`<[a-z][a-z0-9-]*>`)

// fillPlaceholders puts the walk's values in a block it runs. A placeholder it has no value
// for is an error: the reader's shell would take it for a redirection.
func fillPlaceholders(script string) (string, error) {
	var missing []string
	filled := placeholderRE.ReplaceAllStringFunc(script, func(p string) string {
		v, ok := placeholders[p]
		if !ok {
			missing = append(missing, p)
			return p
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("placeholders the walk has no value for (add them to placeholders): %s", strings.Join(missing, ", "))
	}
	return filled, nil
}

// renderHelm comes before the script of a render block: helm install and helm upgrade become
// helm template with the same arguments and --validate (the chart rendered for the cluster's
// version and APIs, its values checked against its schema, each object validated by the API
// server, nothing created), which says how many objects it rendered instead of printing them;
// every other helm command runs as it is. The block's helm install or upgrade must use flags
// helm template takes.
const renderHelm = `helm() {
	case "$1" in
	install | upgrade)
		shift
		local out
		out=$(command helm template "$@" --validate) || return
		echo "docs-test render: helm template $* --validate: $(grep -c '^kind:' <<<"$out") objects"
		;;
	*) command helm "$@" ;;
	esac
}
`

var helmInstallRE = regexp.MustCompile(`\bhelm\s+(install|upgrade)\b`)

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
		indent      int
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
		case !inFence && strings.HasPrefix(strings.TrimLeft(l, " "), "```"):
			fence := strings.TrimLeft(l, " ")
			inFence, fenceLang, fenceStart, lines = true, strings.TrimPrefix(fence, "```"), n, nil
			indent = len(l) - len(fence)
			marker = markerRE.FindStringSubmatch(previousTxt)
		case inFence && strings.HasPrefix(strings.TrimLeft(l, " "), "```"):
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
			body := strings.TrimLeft(l, " ")
			if len(l)-len(body) > indent {
				body = l[indent:]
			}
			lines = append(lines, body)
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
// as a kubectl plugin, helm, against the cluster as its admin), in page order, from a
// directory holding the first job's file and the repository's config/ and charts/, with the
// walk's values in its <placeholders>; a Helm release of Tessera the cluster cannot run is
// rendered and validated instead (render); each block it cannot run says why on the page.
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
	for _, dir := range []string{"config", "charts"} {
		if err := os.Symlink(filepath.Join(root, dir), filepath.Join(work, dir)); err != nil {
			t.Fatal(err)
		}
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
	pool, err := cl.Client.CoreV1().Nodes().Get(ctx, docsPoolNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer restorePoolNode(t, pool)

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
			case "render":
				if !helmInstallRE.MatchString(b.script) {
					t.Errorf("%s: a render block without a helm install or helm upgrade", where)
					continue
				}
			default:
				t.Errorf("%s: unknown docs-test verb %q", where, b.verb)
				continue
			}
			ran++
			if b.script, err = fillPlaceholders(b.script); err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
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

// restorePoolNode gives the node that stood for migration.md's pool back its cordon and its
// pool label as they were before the walk.
func restorePoolNode(t *testing.T, before *corev1.Node) {
	var label, unschedulable any
	if v, ok := before.Labels[poolLabel]; ok {
		label = v
	}
	if before.Spec.Unschedulable {
		unschedulable = true
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]any{poolLabel: label}},
		"spec":     map[string]any{"unschedulable": unschedulable},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Client.CoreV1().Nodes().Patch(context.Background(), before.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("node %s not restored after the walk: %v", before.Name, err)
	}
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
	script := b.script
	if b.verb == "render" {
		script = renderHelm + script
	}
	run := func(ctx context.Context, until string) (string, error) {
		cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
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
