package ui

import (
	"embed"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

//go:embed assets
var assets embed.FS

// Server timeouts. Event streams live longer than writeTimeout: they move their own
// write deadline forward before each write.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 32 << 10
	// pingEvery keeps idle event streams open through proxies and finds closed pages.
	pingEvery = 15 * time.Second
)

// contentSecurityPolicy lets the page load its own script and style and talk to its
// own server, nothing else: no CDN, no fonts, no frames, no inline code.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// handler serves the page, its data and its event stream from one board.
type handler struct {
	board *board
	// address is the --address the user gave; a request naming it as Host passes the
	// DNS-rebinding check along with IP literals and localhost.
	address string
}

func newHTTPServer(h *handler) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", asset("assets/index.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /app.js", asset("assets/app.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /app.css", asset("assets/app.css", "text/css; charset=utf-8"))
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /api/view", h.view)
	mux.HandleFunc("GET /events", h.events)
	return &http.Server{
		Handler:           h.guard(mux),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          klog.NewStandardLogger("WARNING"),
	}
}

// guard sets the security headers on every answer and refuses a request whose Host
// is a name other than localhost or --address: a web page the user visits could
// otherwise rebind its own DNS name to 127.0.0.1 and read the tenants' pod names.
func (h *handler) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", contentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		hd.Set("Cross-Origin-Resource-Policy", "same-origin")
		hd.Set("Cache-Control", "no-store")
		if !h.hostAllowed(r.Host) {
			klog.V(2).InfoS("Refused a request for another host name", "host", r.Host, "remote", r.RemoteAddr)
			http.Error(w, "unexpected Host header: open the page by the address kubectl tessera ui printed", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h *handler) hostAllowed(hostport string) bool {
	host := hostport
	if hp, _, err := net.SplitHostPort(hostport); err == nil {
		host = hp
	}
	host = strings.Trim(host, "[]")
	return host == "localhost" || net.ParseIP(host) != nil || (h.address != "" && strings.EqualFold(host, h.address))
}

func asset(name, contentType string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		b, err := assets.ReadFile(name)
		if err != nil {
			http.Error(w, "missing asset", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(b)
	}
}

// view answers the current data.
func (h *handler) view(w http.ResponseWriter, _ *http.Request) {
	_, body := h.board.current()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// events is a server-sent event stream: the current version at once, then each new
// one; the page fetches /api/view when the version differs from what it shows.
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	versions, cancel, ok := h.board.subscribe()
	if !ok {
		http.Error(w, "too many open card map pages, or the server is stopping", http.StatusServiceUnavailable)
		return
	}
	defer cancel()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	send := func(format string, a ...any) bool {
		if err := rc.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, format, a...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	version, _ := h.board.current()
	if !send("retry: 2000\nevent: view\ndata: %d\n\n", version) {
		return
	}
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case v, open := <-versions:
			if !open || !send("event: view\ndata: %d\n\n", v) {
				return
			}
		case <-ping.C:
			if !send(": ping\n\n") {
				return
			}
		}
	}
}
