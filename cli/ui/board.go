package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// maxStreams bounds the open pages (server-sent event streams) one server feeds.
const maxStreams = 64

// board holds the page's current data and rebuilds it from the cluster cache,
// debounced: a burst of watch events costs one rebuild, made Debounce after the first
// of them. Open pages subscribe to its version. It lives from newBoard until the
// context given to run ends.
type board struct {
	build            func() (*View, error)
	debounce, resync time.Duration
	kick             chan struct{}

	mu      sync.Mutex
	version uint64
	body    []byte // the current View as JSON
	content []byte // the same without version and time, to tell a real change
	subs    map[chan uint64]struct{}
	closed  bool
}

func newBoard(build func() (*View, error), debounce, resync time.Duration) *board {
	return &board{build: build, debounce: debounce, resync: resync, kick: make(chan struct{}, 1), subs: map[chan uint64]struct{}{}}
}

// changed tells the board that the cluster changed; it never blocks.
func (b *board) changed() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// run rebuilds after changes and every resync period until ctx ends, then ends every
// subscription so that open event streams return.
func (b *board) run(ctx context.Context) {
	defer b.close()
	tick := time.NewTicker(b.resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-b.kick:
			wait := time.NewTimer(b.debounce)
			select {
			case <-ctx.Done():
				wait.Stop()
				return
			case <-wait.C:
			}
			// This rebuild reads the cache after every change signalled so far.
			select {
			case <-b.kick:
			default:
			}
		}
		if err := b.rebuild(); err != nil {
			klog.ErrorS(err, "Rebuilding the card map")
		}
	}
}

// rebuild builds the view and publishes it when it differs from the last.
func (b *board) rebuild() error {
	start := time.Now()
	v, err := b.build()
	if err != nil {
		return err
	}
	generated := v.Generated
	v.Version, v.Generated = 0, ""
	content, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode the card map: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if string(content) == string(b.content) {
		klog.V(5).InfoS("Card map unchanged", "version", b.version, "took", time.Since(start))
		return nil
	}
	v.Version, v.Generated = b.version+1, generated
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode the card map: %w", err)
	}
	b.version, b.body, b.content = v.Version, body, content
	if logger := klog.V(4); logger.Enabled() {
		logger.InfoS("Card map rebuilt", "version", b.version, "queues", len(v.Queues), "pending", len(v.Pending),
			"bytes", len(body), "took", time.Since(start))
	}
	for ch := range b.subs {
		select { // keep only the newest version for a slow reader
		case <-ch:
		default:
		}
		ch <- b.version
	}
	return nil
}

// current is the latest version and its JSON.
func (b *board) current() (uint64, []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.version, b.body
}

// subscribe returns a channel that receives each new version, closed when the board
// stops, and the function that ends the subscription; ok is false when the board has
// stopped or feeds maxStreams pages already.
func (b *board) subscribe() (<-chan uint64, func(), bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || len(b.subs) >= maxStreams {
		return nil, nil, false
	}
	ch := make(chan uint64, 1)
	b.subs[ch] = struct{}{}
	return ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.subs[ch]; ok {
			delete(b.subs, ch)
			close(ch)
		}
	}, true
}

func (b *board) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for ch := range b.subs {
		delete(b.subs, ch)
		close(ch)
	}
}
