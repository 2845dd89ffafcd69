package ui

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/tessera-gpu/tessera/pluginargs"
)

// Defaults of the server's options.
const (
	DefaultAddress  = "127.0.0.1"
	DefaultDebounce = 300 * time.Millisecond
	// DefaultResync rebuilds the page even without events: a node agent whose
	// heartbeat stops sends none, yet its cards turn unusable once the heartbeat is stale.
	DefaultResync = 15 * time.Second
)

// errRemote refuses a non-loopback address nobody asked for by name.
var errRemote = errors.New("refusing to serve the card map beyond this machine")

// Options configure Serve.
type Options struct {
	// Address is the IP or host name to listen on (DefaultAddress when empty).
	Address string
	// Remote: the user named a non-loopback Address explicitly (--address), knowing
	// that whoever reaches it sees every tenant's pod names. Without it Serve refuses one.
	Remote bool
	// Port to listen on; 0 picks a free one.
	Port int
	// Namespace is read alone when the account may not list every namespace's pods.
	Namespace string
	// AllNamespaces: every namespace's pods or an error, never the fallback (-A).
	AllNamespaces bool
	// Args are the vgpu plugin's arguments that shape the view (pluginargs.Defaults
	// unless read from the scheduler's conf).
	Args pluginargs.Args
	// Debounce is how long a rebuild waits after the first change, gathering the
	// changes that follow it; Resync how often the page is rebuilt without any.
	Debounce, Resync time.Duration
}

func (o Options) withDefaults() Options {
	if o.Address == "" {
		o.Address = DefaultAddress
	}
	if o.Debounce <= 0 {
		o.Debounce = DefaultDebounce
	}
	if o.Resync <= 0 {
		o.Resync = DefaultResync
	}
	if o.Args.Resources.Number == "" {
		o.Args = pluginargs.Defaults()
	}
	return o
}

// listenAddress is host:port to listen on, after the loopback rule.
func (o Options) listenAddress() (string, error) {
	if o.Port < 0 || o.Port > 65535 {
		return "", fmt.Errorf("port %d: want 0..65535", o.Port)
	}
	if !isLoopback(o.Address) && !o.Remote {
		return "", fmt.Errorf("%w: %q is not a loopback address; the page shows every tenant's pod names, "+
			"so pass --address %s explicitly to serve it there", errRemote, o.Address, o.Address)
	}
	return net.JoinHostPort(o.Address, strconv.Itoa(o.Port)), nil
}

// isLoopback: only this machine can connect to host.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
