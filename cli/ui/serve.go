package ui

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

// shutdownGrace is how long open requests get to finish once Serve is asked to stop.
const shutdownGrace = 5 * time.Second

// Started is what Serve reports once the page is served.
type Started struct {
	// URL is the page's address, with the port the system picked for port 0.
	URL string
	// Unread says what the account may not read; the page shows it too.
	Unread []string
}

// Serve runs the live card map until ctx ends: it checks what the account may read,
// fills informer caches from the cluster, serves the page on the loopback address
// (or on o.Address when o.Remote) and calls started with its URL; the page follows
// the cluster without a reload. It returns nil once ctx has ended and the server
// has stopped.
func Serve(ctx context.Context, c Clients, o Options, started func(Started)) error {
	o = o.withDefaults()
	addr, err := o.listenAddress()
	if err != nil {
		return err
	}
	r, err := probeReach(ctx, c, o)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()

	watching, stopWatching := context.WithCancel(ctx)
	var b *board
	cc, err := newClusterCache(c, r, o.Args, func() { b.changed() })
	if err != nil {
		stopWatching()
		return err
	}
	b = newBoard(func() (*View, error) {
		in, err := cc.contents()
		if err != nil {
			return nil, err
		}
		return buildView(in, o.Args, time.Now(), r.unread), nil
	}, o.Debounce, o.Resync)
	// The informers stop only once their context is cancelled: cancel, then wait.
	defer func() {
		stopWatching()
		cc.stop()
	}()
	if err := cc.start(watching); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while the caches filled
		}
		return err
	}
	if err := b.rebuild(); err != nil {
		return err
	}
	url := "http://" + ln.Addr().String() + "/"
	klog.InfoS("Serving the card map", "url", url, "namespace", r.podNamespace, "queues", r.queues, "podGroups", r.podGroups)
	return serveBoard(watching, ln, b, o.Address, func() {
		if started != nil {
			started(Started{URL: url, Unread: r.unread})
		}
	})
}

// serveBoard serves the board's page on ln and keeps the board rebuilding until ctx
// ends; then it stops the board, whose open event streams end with it, and the server.
func serveBoard(ctx context.Context, ln net.Listener, b *board, address string, started func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	boardDone := make(chan struct{})
	go func() {
		defer close(boardDone)
		b.run(ctx)
	}()
	srv := newHTTPServer(&handler{board: b, address: address})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	started()

	select {
	case <-ctx.Done():
	case err := <-served:
		cancel()
		<-boardDone
		return fmt.Errorf("serve: %w", err)
	}
	<-boardDone
	sctx, scancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("stop serving: %w", err)
	}
	return nil
}
