package uitest

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"testing"
	"time"
)

// Window is the size, in CSS pixels, of the pages the tests open.
const (
	WindowWidth  = 1440
	WindowHeight = 1000
)

// Chromium is the path of a Chromium or Chrome, installed with apt-get (directly as
// root, else through sudo -n) when none is on PATH. A machine where neither works
// skips the test, saying how to run it.
func Chromium(t testing.TB) string {
	t.Helper()
	if p, ok := findChromium(); ok {
		return p
	}
	apt, err := exec.LookPath("apt-get")
	if err != nil {
		t.Skip("SKIPPED: this browser test needs Chromium; install it (Debian: apt-get install chromium) to run it")
	}
	t.Log("chromium is missing; installing Debian's chromium package with apt-get")
	run := func(args ...string) error {
		cmd := exec.Command(apt, args...)
		if os.Geteuid() != 0 {
			cmd = exec.Command("sudo", append([]string{"-n", apt}, args...)...)
		}
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %v: %w: %s", args, err, out)
		}
		return nil
	}
	// A stale package list wants an update first; a dpkg lock held elsewhere, a moment.
	for attempt := 1; attempt <= 3; attempt++ {
		if err = run("install", "-y", "--no-install-recommends", "chromium"); err == nil {
			break
		}
		t.Logf("attempt %d: %v", attempt, err)
		_ = run("update")
		time.Sleep(time.Duration(attempt) * 5 * time.Second)
	}
	if p, ok := findChromium(); ok {
		return p
	}
	t.Skipf("SKIPPED: this browser test needs Chromium, and installing it failed: %v", err)
	return ""
}

func findChromium() (string, bool) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, true
		}
	}
	return "", false
}

// Launched starts a browser for the test and closes it when the test ends.
func Launched(t testing.TB, path string) *Browser {
	t.Helper()
	b, err := Launch(path, t.TempDir(), WindowWidth, WindowHeight)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Close()
		if t.Failed() {
			t.Logf("chromium's output:\n%s", b.Output())
		}
	})
	return b
}

// Opened opens url in a new tab of the test's browser and waits for it to load.
func Opened(t testing.TB, b *Browser, url string) *Page {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := b.Open(ctx, url, WindowWidth, WindowHeight)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	return p
}

// Ink measures a screenshot: the fraction of pixels that differ from the white
// background, and the fraction strongly coloured (queue colours; the page's own greys
// and text are not).
func Ink(shot []byte) (painted, coloured float64, err error) {
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		return 0, 0, fmt.Errorf("screenshot is not a PNG: %w", err)
	}
	return ink(img), colouredInk(img), nil
}

func ink(img image.Image) float64 {
	return fraction(img, func(r, g, b uint32) bool { return r < 245 || g < 245 || b < 245 })
}

func colouredInk(img image.Image) float64 {
	return fraction(img, func(r, g, b uint32) bool { return max(r, g, b)-min(r, g, b) > 60 })
}

func fraction(img image.Image, hit func(r, g, b uint32) bool) float64 {
	bounds := img.Bounds()
	var n, hits int
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			n++
			if hit(r>>8, g>>8, b>>8) {
				hits++
			}
		}
	}
	if n == 0 {
		return 0
	}
	return float64(hits) / float64(n)
}
