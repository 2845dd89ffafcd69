package suite

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/cli/ui"
	"github.com/tessera-gpu/tessera/cli/ui/uitest"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// The live card map against the real cluster: `kubectl tessera ui` runs in this
// process on the cluster's kubeconfig, and a page opened once in headless
// Chromium follows it without a reload: a VolcanoJob's pods appear on exactly the
// cards their assignments name, their queue's share counts them, a gang no node can
// take is listed as waiting with the vgpu plugin's reason, and the pods of a deleted
// job leave their cards. TESSERA_UI_SCREENSHOT=path writes the page, with both jobs
// on it, as a PNG (docs/images/ui-cardmap.png is made so).
func TestUIFollowsTheClusterInChromium(t *testing.T) {
	browser := uitest.Chromium(t)
	n := ns(t, "ui")
	defer func() {
		_ = cl.Volcano.SchedulingV1beta1().Queues().Delete(context.Background(), "ui-lab", metav1.DeleteOptions{})
	}()
	defer cleanup(t, n)
	queue(t, "ui-lab", 2)

	url, stop := serveUI(t)
	defer stop()
	page := uitest.Opened(t, uitest.Launched(t, browser), url)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cards := usableCards(t)
	if err := page.WaitFor(ctx, fmt.Sprintf(`document.querySelectorAll(".tile").length === %d`, cards)); err != nil {
		t.Fatalf("the page never showed the cluster's %d cards: %v\n%s", cards, err, pageText(ctx, page))
	}
	if err := page.Eval(ctx, `window.tesseraTestMark = "not reloaded"`, nil); err != nil {
		t.Fatal(err)
	}

	submit(t,
		workload.Job(n, "ui-train", "ui-lab", 3, workload.Task{Name: "worker", Replicas: 3,
			Containers: []workload.Container{{Name: "trainer", Cards: 2, MemMiB: 10240, Cores: 30}}}),
		workload.Job(n, "ui-serve", "default", 1, workload.Task{Name: "replica", Replicas: 4,
			Containers: []workload.Container{{Name: "server", Cards: 1, MemPct: 25, Cores: 20}}}),
		workload.Job(n, "ui-too-big", "ui-lab", 1, workload.Task{Name: "w", Replicas: 1,
			Containers: []workload.Container{{Name: "trainer", Cards: 9, Cores: 100}}}))
	var running []corev1.Pod
	for job, replicas := range map[string]int{"ui-train": 3, "ui-serve": 4} {
		pods, err := workload.WaitPods(ctx, cl.Client, n, job, 3*time.Minute, workload.AllPhase(replicas, corev1.PodRunning))
		if err != nil {
			t.Fatal(err)
		}
		running = append(running, pods...)
	}
	for _, p := range running {
		cs, _, ok, err := (*api.Decoders)(nil).PodCards(&p, api.DefaultResourceNames())
		if err != nil || !ok {
			t.Fatalf("pod %s: assignment %v, %v", p.Name, ok, err)
		}
		for _, c := range cs {
			for _, a := range c.Cards {
				tile := fmt.Sprintf(`document.querySelector('section[data-node=%q] [data-card=%q]')`, p.Spec.NodeName, a.UUID)
				if err := page.WaitFor(ctx, tile+`.innerText.includes(`+fmt.Sprintf("%q", n+"/"+p.Name)+`)`); err != nil {
					t.Errorf("pod %s is not on the tile of card %s of %s: %v", p.Name, a.UUID, p.Spec.NodeName, err)
				}
			}
		}
	}
	if err := page.WaitFor(ctx, `document.querySelector('[data-queue="ui-lab"]').innerText.includes("3 running")`); err != nil {
		t.Errorf("queue ui-lab does not count its 3 running pods: %v", err)
	}
	reason, err := podGroupVGPUReason(n, "ui-too-big", 2*time.Minute)
	if err != nil {
		t.Fatalf("the PodGroup of ui-too-big never carried the vgpu plugin's reason: %v", err)
	}
	t.Logf("ui-too-big's PodGroup: %s", reason)
	waiting := `[...document.querySelectorAll('[data-pending^="` + n + `/ui-too-big"]')].some((e) => e.innerText.includes("vgpu: "))`
	if err := page.WaitFor(ctx, waiting); err != nil {
		t.Errorf("ui-too-big is not listed as waiting with the vgpu plugin's reason: %v", err)
	}

	if path := os.Getenv("TESSERA_UI_SCREENSHOT"); path != "" {
		shot, err := page.Screenshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}

	if err := cl.Volcano.BatchV1alpha1().Jobs(n).Delete(ctx, "ui-serve", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone := `![...document.querySelectorAll(".tile")].some((e) => e.innerText.includes("` + n + `/ui-serve-"))`
	if err := page.WaitFor(ctx, gone); err != nil {
		t.Errorf("the deleted job's pods never left their cards: %v", err)
	}

	var mark string
	if err := page.Eval(ctx, `window.tesseraTestMark`, &mark); err != nil || mark != "not reloaded" {
		t.Errorf("the page reloaded to follow the cluster (mark %q, %v)", mark, err)
	}
	if errs := page.Errors(); len(errs) > 0 {
		t.Errorf("the page logged errors: %q", errs)
	}
	if t.Failed() {
		t.Logf("the page:\n%s", pageText(ctx, page))
	}
}

// serveUI runs `kubectl tessera ui --kubeconfig KUBECONFIG` in this process (ui.Main,
// which cmd/tessera runs) and returns the URL it prints and the function that stops it.
func serveUI(t *testing.T) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &lineWriter{lines: make(chan string, 16)}
	var stderr strings.Builder
	done := make(chan error, 1)
	go func() { done <- ui.Main(ctx, []string{"--kubeconfig", cl.Kubeconfig, "--port", "0"}, out, &stderr) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("tessera ui: %v", err)
		}
	}
	deadline := time.After(time.Minute)
	for {
		select {
		case line := <-out.lines:
			if _, url, ok := strings.Cut(line, "Tessera card map: "); ok {
				url, _, _ = strings.Cut(url, " ")
				if stderr.Len() > 0 {
					t.Errorf("tessera ui warned with the admin's kubeconfig: %s", stderr.String())
				}
				return url, stop
			}
		case err := <-done:
			cancel()
			t.Fatalf("tessera ui ended before serving: %v\n%s", err, stderr.String())
		case <-deadline:
			cancel()
			t.Fatal("tessera ui printed no URL within a minute")
		}
	}
}

// lineWriter hands each line written to it to a channel.
type lineWriter struct {
	partial string
	lines   chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.partial += string(p)
	for {
		line, rest, ok := strings.Cut(w.partial, "\n")
		if !ok {
			return len(p), nil
		}
		w.lines <- line
		w.partial = rest
	}
}

// usableCards counts the cards of the nodes whose inventory the page reads as usable
// (the plugin's default heartbeat timeout, as the page's).
func usableCards(t *testing.T) int {
	t.Helper()
	l, err := cl.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cards := 0
	for i := range l.Items {
		if inv, err := api.ReadNodeInventory(&l.Items[i], time.Now(), pluginargs.Defaults().HeartbeatTimeout); err == nil && inv != nil {
			cards += len(inv.Cards)
		}
	}
	if cards == 0 {
		t.Fatal("no node of the cluster has usable cards")
	}
	return cards
}

func pageText(ctx context.Context, p *uitest.Page) string {
	text, err := p.Text(ctx)
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(text)
}
