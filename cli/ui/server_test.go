package ui

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/cli"
)

func get(t *testing.T, url, host string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func TestEveryAnswerCarriesTheSecurityHeaders(t *testing.T) {
	url := serving(t, newFakeCluster(nil), Options{})
	for _, path := range []string{"", "app.js", "app.css", "api/view", "nope"} {
		res := get(t, url+path, "")
		csp := res.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("/%s: Content-Security-Policy %q lacks %q", path, csp, want)
			}
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("X-Frame-Options") != "DENY" ||
			res.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("/%s: headers %v", path, res.Header)
		}
	}
	if res := get(t, url, ""); !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") || res.StatusCode != http.StatusOK {
		t.Errorf("/: %s, %s", res.Status, res.Header.Get("Content-Type"))
	}
	res, err := http.Post(url+"api/view", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /api/view: %s, want 405", res.Status)
	}
}

// The page and its assets name nothing outside the server: no CDN, no web font.
func TestThePageLoadsNothingFromElsewhere(t *testing.T) {
	for _, name := range []string{"assets/index.html", "assets/app.js", "assets/app.css"} {
		b, err := assets.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"http://", "https://", "//cdn", "@import", "url(", "innerHTML", "eval("} {
			if bytes.Contains(b, []byte(bad)) {
				t.Errorf("%s contains %q", name, bad)
			}
		}
	}
}

// A web page could rebind its own DNS name to 127.0.0.1 and read the tenants' pod
// names; the server answers only requests addressed to an IP or localhost.
func TestAnotherHostNameIsRefused(t *testing.T) {
	url := serving(t, newFakeCluster(nil), Options{})
	cases := []struct {
		host string
		want int
	}{
		{"attacker.example:8080", http.StatusMisdirectedRequest},
		{"localhost.attacker.example", http.StatusMisdirectedRequest},
		{"localhost:1234", http.StatusOK},
		{"127.0.0.1", http.StatusOK},
		{"[::1]:80", http.StatusOK},
	}
	for _, c := range cases {
		if res := get(t, url+"api/view", c.host); res.StatusCode != c.want {
			t.Errorf("Host %s: %s, want %d", c.host, res.Status, c.want)
		}
	}
}

func TestANonLoopbackAddressNeedsToBeAskedFor(t *testing.T) {
	cases := []struct {
		name    string
		o       Options
		refused bool
	}{
		{"the default is the loopback address", Options{}, false},
		{"localhost is loopback", Options{Address: "localhost"}, false},
		{"IPv6 loopback", Options{Address: "::1"}, false},
		{"every interface, not asked for by name, is refused", Options{Address: "0.0.0.0"}, true},
		{"a LAN address, not asked for by name, is refused", Options{Address: "10.1.2.3"}, true},
		{"a LAN address asked for by name is served", Options{Address: "10.1.2.3", Remote: true}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.o.withDefaults().listenAddress()
			if refused := errors.Is(err, errRemote); refused != c.refused {
				t.Errorf("listenAddress: %v, want refused %v", err, c.refused)
			}
		})
	}
	err := Serve(context.Background(), newFakeCluster(nil).clients(), Options{Address: "0.0.0.0"}, nil)
	if !errors.Is(err, errRemote) || !strings.Contains(err.Error(), "--address 0.0.0.0") {
		t.Errorf("Serve on 0.0.0.0 without Remote: %v, want a refusal naming --address", err)
	}
}

// The event stream announces the current version at once and each new one after a
// change, which is how the page knows to fetch without a reload.
func TestTheEventStreamAnnouncesNewVersions(t *testing.T) {
	f := newFakeCluster([]runtime.Object{gpuNode(t, "gpu-a", card("GPU-0", 0))})
	url := serving(t, f, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	events := bufio.NewReader(res.Body)
	first := nextVersion(t, events)
	pod := placed(t, vgpuPod("ml", "train-0", "research", "pg", 1, 1000, 10), "gpu-a", api.CardAssignment{UUID: "GPU-0", MemoryMiB: 1000, Cores: 10})
	if _, err := f.kube.CoreV1().Pods("ml").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if next := nextVersion(t, events); next <= first {
		t.Errorf("after a change the stream announced version %s, first %s", next, first)
	}
}

// nextVersion reads the stream up to the next view event and returns its data.
func nextVersion(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	event := ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("event stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "view":
			return strings.TrimPrefix(line, "data: ")
		}
	}
}

func TestMainCommandLine(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := Main(context.Background(), []string{"--help"}, &out, &errOut); err != nil {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"usage: tessera ui", "--address", "--port", "--kubeconfig", "--context", "--namespace", "--scheduler-conf"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
	for _, args := range [][]string{{"--no-such-flag"}, {"extra"}, {"--port", "many"}} {
		if err := Main(context.Background(), args, io.Discard, io.Discard); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// A stream outlives the server's read and write timeouts: it moves its write deadline
// forward before each write (net/http clears the read deadline once the request is read).
func TestAStreamOutlivesTheServerTimeouts(t *testing.T) {
	var n atomic.Int32
	b := newBoard(func() (*View, error) { return &View{Pending: make([]Pending, n.Load())}, nil }, time.Millisecond, time.Hour)
	if err := b.rebuild(); err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(&handler{board: b})
	srv.ReadTimeout, srv.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	res, err := http.Get("http://" + ln.Addr().String() + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	events := bufio.NewReader(res.Body)
	if v := nextVersion(t, events); v != "1" {
		t.Fatalf("first version %s", v)
	}
	time.Sleep(time.Second)
	n.Store(1)
	if err := b.rebuild(); err != nil {
		t.Fatal(err)
	}
	if v := nextVersion(t, events); v != "2" {
		t.Errorf("a second past the timeouts the stream announced %s, want 2", v)
	}
}
