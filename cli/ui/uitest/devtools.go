// Package uitest drives a headless Chromium for the card map's browser tests through
// the DevTools protocol on a pipe (--remote-debugging-pipe: no port, no WebSocket
// library): open the page, keep it open while the cluster changes, read its DOM,
// collect its errors and take screenshots. The unit tests of package ui and the
// end-to-end scenario share it.
package uitest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Browser is one headless Chromium process and the pipe to its DevTools endpoint. It
// lives from Launch until Close.
type Browser struct {
	cmd    *exec.Cmd
	toCr   *os.File // Chromium reads commands from this pipe (its fd 3)
	output *lockedWriter

	mu      sync.Mutex
	next    int64
	waiting map[int64]chan message
	events  []message
	readErr error
	done    chan struct{}
}

// message is a command, its answer or an event.
type message struct {
	ID        int64           `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    any             `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
	RawParams json.RawMessage `json:"-"`
}

// Launch starts Chromium at path, headless, with its profile in dir.
func Launch(path, dir string, width, height int) (*Browser, error) {
	crIn, toCr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	fromCr, crOut, err := os.Pipe()
	if err != nil {
		crIn.Close()
		toCr.Close()
		return nil, err
	}
	out := &lockedWriter{w: &strings.Builder{}}
	cmd := exec.Command(path, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe", "--user-data-dir="+dir,
		fmt.Sprintf("--window-size=%d,%d", width, height), "about:blank")
	cmd.ExtraFiles = []*os.File{crIn, crOut} // fds 3 and 4, as --remote-debugging-pipe expects
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{crIn, toCr, fromCr, crOut} {
			f.Close()
		}
		return nil, fmt.Errorf("start chromium: %w", err)
	}
	crIn.Close()
	crOut.Close()
	b := &Browser{cmd: cmd, toCr: toCr, output: out, waiting: map[int64]chan message{}, done: make(chan struct{})}
	go b.read(fromCr)
	return b, nil
}

// lockedWriter lets Chromium's stdout and stderr share one buffer.
type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// read delivers answers to their callers and keeps events, until the pipe closes.
func (b *Browser) read(r io.ReadCloser) {
	defer close(b.done)
	defer r.Close()
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		raw, err := br.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			b.readErr = err
			for id, ch := range b.waiting {
				close(ch)
				delete(b.waiting, id)
			}
			b.mu.Unlock()
			return
		}
		var m message
		var params struct {
			Params json.RawMessage `json:"params"`
		}
		body := raw[:len(raw)-1]
		if json.Unmarshal(body, &m) != nil || json.Unmarshal(body, &params) != nil {
			continue
		}
		m.RawParams = params.Params
		b.mu.Lock()
		if ch, ok := b.waiting[m.ID]; ok && m.ID != 0 {
			delete(b.waiting, m.ID)
			ch <- m
		} else if m.Method != "" {
			b.events = append(b.events, m)
		}
		b.mu.Unlock()
	}
}

// call sends one command (to a page when session is set) and decodes its result into out.
func (b *Browser) call(ctx context.Context, session, method string, params, out any) error {
	ch := make(chan message, 1)
	b.mu.Lock()
	if b.readErr != nil {
		b.mu.Unlock()
		return fmt.Errorf("%s: the browser is gone: %w", method, b.readErr)
	}
	b.next++
	id := b.next
	b.waiting[id] = ch
	b.mu.Unlock()
	req, err := json.Marshal(message{ID: id, Method: method, Params: params, SessionID: session})
	if err != nil {
		return err
	}
	if _, err := b.toCr.Write(append(req, 0)); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.waiting, id)
		b.mu.Unlock()
		return fmt.Errorf("%s: %w", method, ctx.Err())
	case m, ok := <-ch:
		if !ok {
			return fmt.Errorf("%s: the browser closed its pipe", method)
		}
		if m.Error != nil {
			return fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		if out != nil {
			return json.Unmarshal(m.Result, out)
		}
		return nil
	}
}

// Close asks Chromium to quit, and kills it if it does not within a few seconds.
func (b *Browser) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.call(ctx, "", "Browser.close", nil, nil)
	b.toCr.Close()
	exited := make(chan error, 1)
	go func() { exited <- b.cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-exited
	}
	<-b.done
	return nil
}

// Output is what Chromium printed, for failure messages.
func (b *Browser) Output() string {
	b.output.mu.Lock()
	defer b.output.mu.Unlock()
	return b.output.w.String()
}
