// Command screens renders the two pictures of pages rather than plots (make screens),
// through headless Chromium:
//
//   - card-map.png: `tessera report --html` (cli/report.go) on the cluster `tessera
//     simulate` places its default workload on (internal/sim: Tessera's plugin inside
//     Volcano's scheduler, no API server);
//   - dashboard.png: the Grafana dashboard of the chart
//     (charts/tessera/dashboards/tessera.json) drawn from its panel definitions with
//     sample data: its layout, not a screenshot of Grafana (dashboard.go).
//
// A browser's pixels differ between machines, so these PNGs are not part of make
// plots-check; rerun make screens when the report's template, the simulator's default
// scenario or the dashboard changes.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tessera-gpu/tessera/cli"
	"github.com/tessera-gpu/tessera/internal/sim"
)

func main() {
	out := flag.String("out", "docs/images", "directory of the PNGs")
	dashboard := flag.String("dashboard", "charts/tessera/dashboards/tessera.json", "the Grafana dashboard")
	browser := flag.String("chromium", "", "Chromium (default: chromium, chromium-browser or google-chrome on PATH; Debian: apt-get install chromium)")
	flag.Parse()
	if err := run(*out, *dashboard, *browser); err != nil {
		fmt.Fprintln(os.Stderr, "screens:", err)
		os.Exit(1)
	}
}

func run(out, dashboard, browser string) error {
	if browser == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				browser = p
				break
			}
		}
		if browser == "" {
			return fmt.Errorf("no Chromium on PATH (Debian: apt-get install chromium), or name it with -chromium")
		}
	}
	tmp, err := os.MkdirTemp("", "tessera-screens-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}

	page := filepath.Join(tmp, "card-map.html")
	if err := cardMap(page); err != nil {
		return fmt.Errorf("card map: %w", err)
	}
	if err := shoot(browser, tmp, page, filepath.Join(out, "card-map.png"), 1280, 1050); err != nil {
		return err
	}

	page = filepath.Join(tmp, "dashboard.html")
	b, err := os.ReadFile(dashboard)
	if err != nil {
		return err
	}
	w, h, err := writeDashboard(page, dashboard, b)
	if err != nil {
		return fmt.Errorf("%s: %w", dashboard, err)
	}
	return shoot(browser, tmp, page, filepath.Join(out, "dashboard.png"), w, h)
}

// cardMap writes `tessera report --html` of the simulator's default scenario, as
// placed by Tessera's plugin inside Volcano's scheduler.
func cardMap(file string) error {
	s, err := sim.DefaultScenario()
	if err != nil {
		return err
	}
	res, err := sim.Run(s)
	if err != nil {
		return err
	}
	queues := map[string]string{}
	for _, j := range s.Jobs {
		queues[j.Name] = j.Queue
	}
	var objs []runtime.Object
	for _, n := range res.Nodes {
		objs = append(objs, n)
	}
	for _, p := range res.Bound {
		p = p.DeepCopy()
		// Volcano's job controller puts the queue on every pod it creates; the
		// simulator's pods carry their PodGroup only.
		if q := queues[p.Annotations["scheduling.k8s.io/group-name"]]; q != "" {
			p.Annotations[cli.QueueKey] = q
		}
		p.Status.Phase = corev1.PodRunning
		objs = append(objs, p)
	}
	client := fake.NewClientset(objs...)
	env := cli.Env{Stdout: io.Discard, Stderr: os.Stderr, Now: time.Now,
		Client: func(string, *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error) {
			return client, "default", nil
		}}
	return cli.Run(context.Background(), env, "report", []string{"--html", file, "-A"})
}

// shoot renders page in headless Chromium into png, w × h pixels.
func shoot(browser, tmp, page, png string, w, h int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir="+filepath.Join(tmp, "profile"), fmt.Sprintf("--window-size=%d,%d", w, h),
		"--screenshot="+png, "file://"+page)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chromium: %v\n%s", err, b)
	}
	fmt.Println("wrote", png)
	return nil
}
