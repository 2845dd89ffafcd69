package ui

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/cli/ui/uitest"
)

// twoQueues is two nodes of four cards; queue prod holds gpu-a's first two cards
// whole, queue research shares gpu-a's card 2, gpu-b is idle.
func twoQueues(t *testing.T) (kube, volcano []runtime.Object) {
	var cards [2][]api.Card
	for n := range cards {
		for i := 0; i < 4; i++ {
			cards[n] = append(cards[n], card(fmt.Sprintf("GPU-%c%d", 'a'+n, i), i))
		}
	}
	kube = []runtime.Object{gpuNode(t, "gpu-a", cards[0]...), gpuNode(t, "gpu-b", cards[1]...)}
	for i := 0; i < 2; i++ {
		uuid := fmt.Sprintf("GPU-a%d", i)
		kube = append(kube, placed(t, vgpuPod("serving", fmt.Sprintf("llm-%d", i), "prod", "llm", 1, 40960, 100), "gpu-a",
			api.CardAssignment{UUID: uuid, MemoryMiB: 40960, Cores: 100}))
	}
	for i := 0; i < 3; i++ {
		kube = append(kube, placed(t, vgpuPod("lab", fmt.Sprintf("tune-%d", i), "research", "tune", 1, 10240, 30), "gpu-a",
			api.CardAssignment{UUID: "GPU-a2", MemoryMiB: 10240, Cores: 30}))
	}
	volcano = []runtime.Object{volcanoQueue("prod", 3, nil), volcanoQueue("research", 1, nil)}
	return kube, volcano
}

// The page, opened once in headless Chromium, follows the cluster: a pod bound and a
// pod refused after it loaded appear without a reload (a value the test left in the
// page survives), with no script error or blocked load, and the map is painted in
// queue colours. TESSERA_UI_TEST_SHOT=path keeps the screenshot.
func TestThePageFollowsTheClusterInChromium(t *testing.T) {
	browser := uitest.Chromium(t)
	kube, volcano := twoQueues(t)
	f := newFakeCluster(kube, volcano...)
	url := serving(t, f, Options{})
	f.waitWatching(t, 2, "queues", "podgroups")
	b := uitest.Launched(t, browser)
	page := uitest.Opened(t, b, url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if err := page.WaitFor(ctx, `document.querySelectorAll(".tile").length === 8 && document.body.innerText.includes("lab/tune-2")`); err != nil {
		text, _ := page.Text(ctx)
		t.Fatalf("the card map did not draw: %v\n%s", err, text)
	}
	if err := page.Eval(ctx, `window.tesseraTestMark = "not reloaded"`, nil); err != nil {
		t.Fatal(err)
	}

	fresh := placed(t, vgpuPod("lab", "fresh-notebook", "research", "nb", 1, 20480, 50), "gpu-b",
		api.CardAssignment{UUID: "GPU-b3", MemoryMiB: 20480, Cores: 50})
	refused := unschedulable(vgpuPod("lab", "huge-0", "research", "huge", 1, 81920, 100),
		"0/2 nodes are unavailable: 2 vgpu: no card has 81920 MiB of memory.")
	for _, p := range []*corev1.Pod{fresh, refused} {
		if _, err := f.kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cond := `document.querySelector('[data-card="GPU-b3"]').innerText.includes("lab/fresh-notebook") &&
		document.querySelector('[data-pending="lab/huge-0"]').innerText.includes("no card has 81920 MiB")`
	if err := page.WaitFor(ctx, cond); err != nil {
		text, _ := page.Text(ctx)
		t.Fatalf("the page did not follow the cluster: %v\n%s", err, text)
	}
	// An administrator cordons a card (kubectl tessera cordon): its tile says so, dashed.
	node, err := f.kube.CoreV1().Nodes().Get(ctx, "gpu-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cordons, err := api.EncodeCordons(&api.NodeCordons{Cards: map[string]api.CardCordon{
		"GPU-b0": {Reason: "fan replaced", Since: time.Now().UTC().Truncate(time.Second)}}})
	if err != nil {
		t.Fatal(err)
	}
	node.Annotations[api.AnnotationCordonedCards] = cordons
	if _, err := f.kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cordoned := `(() => { const t = document.querySelector('[data-card="GPU-b0"]');
		return t.classList.contains("cordoned") && t.innerText.includes("CORDONED") && t.title.includes("fan replaced"); })()`
	if err := page.WaitFor(ctx, cordoned); err != nil {
		text, _ := page.Text(ctx)
		t.Fatalf("the page did not show the cordoned card: %v\n%s", err, text)
	}
	var mark string
	if err := page.Eval(ctx, `window.tesseraTestMark`, &mark); err != nil || mark != "not reloaded" {
		t.Errorf("the page reloaded to show the change (mark %q, %v)", mark, err)
	}
	var live string
	if err := page.Eval(ctx, `document.getElementById("live").textContent`, &live); err != nil || live != "live" {
		t.Errorf("live indicator %q (%v), want live", live, err)
	}
	text, err := page.Text(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"undefined", "NaN", "null"} {
		if strings.Contains(text, bad) {
			t.Errorf("the page shows %q: it reads a field the view does not have\n%s", bad, text)
		}
	}
	if errs := page.Errors(); len(errs) > 0 {
		t.Errorf("the page logged errors: %q", errs)
	}

	shot, err := page.Screenshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	painted, coloured, err := uitest.Ink(shot)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("card map: %.1f%% of pixels painted, %.2f%% in queue colours", 100*painted, 100*coloured)
	if painted < 0.08 || coloured < 0.005 {
		t.Errorf("%.1f%% painted, %.2f%% coloured: the card map did not render", 100*painted, 100*coloured)
	}
	if path := os.Getenv("TESSERA_UI_TEST_SHOT"); path != "" {
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Error(err)
		}
	}
}

// The Content-Security-Policy is in force in a real browser: a script from elsewhere
// is blocked, and the block lands in the page's error log, which the test above
// requires to be empty.
func TestTheBrowserEnforcesThePolicy(t *testing.T) {
	browser := uitest.Chromium(t)
	url := serving(t, newFakeCluster(nil), Options{})
	page := uitest.Opened(t, uitest.Launched(t, browser), url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	script := `new Promise((done) => {
		const s = document.createElement("script");
		s.src = "http://203.0.113.1/x.js";
		document.addEventListener("securitypolicyviolation", () => done("blocked"), { once: true });
		s.onload = () => done("loaded");
		s.onerror = () => setTimeout(() => done("error"), 500);
		document.head.appendChild(s);
	})`
	var got string
	if err := page.Eval(ctx, script, &got); err != nil {
		t.Fatal(err)
	}
	if got != "blocked" {
		t.Errorf("a script from elsewhere: %s, want blocked by the Content-Security-Policy", got)
	}
	if len(page.Errors()) == 0 {
		t.Error("the blocked load left no error in the page's log: the first test could not see one")
	}
}
