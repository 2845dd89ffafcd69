package cli

import (
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

// chromium finds Debian's chromium, installing it with apt-get when it is missing
// (CI machines start without it). Only a machine without apt-get skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	apt, err := exec.LookPath("apt-get")
	if err != nil {
		t.Skip("\n" + `*** SKIPPED: the HTML report's browser test needs Chromium and this machine has neither chromium nor apt-get. ***` +
			"\n*** Install Chromium (Debian: apt-get install chromium) to run it. ***")
	}
	t.Log("chromium is missing; installing Debian's chromium package with apt-get")
	install := func() error {
		cmd := exec.Command(apt, "install", "-y", "--no-install-recommends", "chromium")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if os.Geteuid() != 0 {
			cmd = exec.Command("sudo", append([]string{"-n", "env", "DEBIAN_FRONTEND=noninteractive", apt}, cmd.Args[1:]...)...)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	// A stale package list needs an update; a dpkg lock held by another install
	// needs a moment. Three attempts cover both.
	var err2 error
	for attempt := 1; attempt <= 3; attempt++ {
		if err2 = install(); err2 == nil {
			break
		}
		t.Logf("apt-get install chromium, attempt %d: %v", attempt, err2)
		update := exec.Command(apt, "update")
		if os.Geteuid() != 0 {
			update = exec.Command("sudo", "-n", apt, "update")
		}
		_ = update.Run()
		time.Sleep(time.Duration(attempt) * 5 * time.Second)
	}
	if err2 != nil {
		t.Fatalf("apt-get install chromium failed three times: %v", err2)
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium installed but not on PATH: %v", err)
	}
	return p
}

// screenshot renders the page in headless Chromium and decodes the PNG.
func screenshot(t *testing.T, browser, page string) image.Image {
	t.Helper()
	dir := t.TempDir()
	shot := filepath.Join(dir, "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1280,900", "--screenshot="+shot, "file://"+page)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	return img
}

// ink measures a screenshot: the fraction of pixels that differ from the white page
// background, and the fraction that are strongly coloured (queue colours; the page's
// own greys and text are not).
func ink(img image.Image) (painted, coloured float64) {
	b := img.Bounds()
	var n, p, c int
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			r, g, bl = r>>8, g>>8, bl>>8
			n++
			if r < 245 || g < 245 || bl < 245 {
				p++
			}
			if max(r, g, bl)-min(r, g, bl) > 60 {
				c++
			}
		}
	}
	return float64(p) / float64(n), float64(c) / float64(n)
}

func writeReport(t *testing.T, objs []runtime.Object) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "report.html")
	mustRun(t, objs, "report", "--html", path)
	return path
}

// The card map must show: a page whose tiles did not render (empty data, broken
// template or CSS) fails. The empty cluster is the control that the measure can fail.
func TestReportRendersACardMapInChromium(t *testing.T) {
	browser := chromium(t)
	full := screenshot(t, browser, writeReport(t, cluster(t)))
	if b := full.Bounds(); b.Dx() < 1000 || b.Dy() < 800 {
		t.Fatalf("screenshot is %v", b)
	}
	painted, coloured := ink(full)
	t.Logf("card map: %.1f%% of pixels painted, %.2f%% in queue colours", 100*painted, 100*coloured)
	if painted < 0.08 {
		t.Errorf("only %.1f%% of the page is painted: the card map did not render", 100*painted)
	}
	if coloured < 0.002 {
		t.Errorf("only %.2f%% of the page is in queue colours: the usage bars did not render", 100*coloured)
	}
	emptyPainted, emptyColoured := ink(screenshot(t, browser, writeReport(t, nil)))
	t.Logf("empty cluster: %.1f%% painted, %.2f%% coloured", 100*emptyPainted, 100*emptyColoured)
	if emptyPainted >= 0.08 || emptyColoured >= 0.002 {
		t.Errorf("an empty report passes the thresholds (%.1f%%, %.2f%%): the test could not tell an empty page", 100*emptyPainted, 100*emptyColoured)
	}
	if os.Getenv("TESSERA_REPORT_SHOT") != "" {
		f, err := os.Create(os.Getenv("TESSERA_REPORT_SHOT"))
		if err == nil {
			_ = png.Encode(f, full)
			f.Close()
		}
	}
}
