package scale

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// profiler fetches the live scheduler's pprof profiles (vc-scheduler --enable-pprof
// serves them beside its metrics) into a run directory: CPU profiles back to back
// while the workload is placed, and one heap profile at the end.
type profiler struct {
	base   string // http://host:port
	dir    string
	window time.Duration
	done   chan struct{}
	cancel context.CancelFunc
	errs   []error
}

// startProfiler begins CPU profiles of window each; stop ends them. A zero window
// profiles nothing.
func startProfiler(ctx context.Context, metricsURL, dir string, window time.Duration) *profiler {
	p := &profiler{base: strings.TrimSuffix(metricsURL, "/metrics"), dir: dir, window: window, done: make(chan struct{})}
	if window <= 0 {
		close(p.done)
		p.cancel = func() {}
		return p
	}
	ctx, p.cancel = context.WithCancel(ctx)
	go func() {
		defer close(p.done)
		for i := 0; ctx.Err() == nil; i++ {
			path := fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(window.Seconds()))
			if err := p.fetch(ctx, path, fmt.Sprintf("cpu-%02d.pprof", i)); err != nil && ctx.Err() == nil {
				p.errs = append(p.errs, err)
				return
			}
		}
	}()
	return p
}

// stop ends the CPU profiles (the one under way is dropped) and takes a heap profile.
func (p *profiler) stop() error {
	p.cancel()
	<-p.done
	if p.window > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.fetch(ctx, "/debug/pprof/heap", "heap.pprof"); err != nil {
			p.errs = append(p.errs, err)
		}
	}
	if len(p.errs) > 0 {
		return fmt.Errorf("scheduler profile: %w", p.errs[0])
	}
	return nil
}

func (p *profiler) fetch(ctx context.Context, path, name string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	f, err := os.Create(filepath.Join(p.dir, name))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	return f.Close()
}
