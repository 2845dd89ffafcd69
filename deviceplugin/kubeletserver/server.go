// Package kubeletserver serves the kubelet's device plugin API (v1beta1) over a unix
// socket, registers with the kubelet, and registers again whenever the kubelet
// restarts. The decisions behind Allocate live in the handoff package.
package kubeletserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/deviceplugin/cards"
)

// ErrRegister is wrapped when the kubelet refuses or cannot take the registration.
var ErrRegister = errors.New("register with the kubelet")

// Handler makes the allocation decisions.
type Handler interface {
	Preferred(ctx context.Context, req *pluginapi.ContainerPreferredAllocationRequest) ([]string, error)
	Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error)
	PreStart(ctx context.Context, ids []string) error
}

// Options configure the server.
type Options struct {
	// PluginDir holds kubelet.sock and the plugin's socket (/var/lib/kubelet/device-plugins).
	PluginDir string
	// SocketName is the plugin's socket file name inside PluginDir.
	SocketName string
	Resource   string
	// WatchInterval is how often the kubelet socket is checked for a kubelet restart.
	WatchInterval time.Duration
	// OnRegistered is called after each successful registration; may be nil.
	OnRegistered func()
	// ReportNUMA puts each slot on its card's NUMA node (TopologyInfo). Off, the
	// kubelet's Topology Manager has no preference for the slots (docs/device-plugin.md,
	// section 10, says why that is the default).
	ReportNUMA bool
	// AwaitCordons says that the Node's card cordons will come through ObserveNode:
	// until the first copy of the Node arrives, the fallback for pods with no
	// assignment prefers no card, since none is known to be uncordoned. Off, the
	// fallback takes every card as uncordoned until told otherwise.
	AwaitCordons bool
}

// Server is one device plugin endpoint.
type Server struct {
	opts    Options
	reg     *cards.Registry
	handler Handler
	cordons cordonView // the node's card cordons, from ObserveNode

	mu   sync.Mutex
	grpc *grpc.Server
	done chan struct{} // closed when the current gRPC server stops
}

// New returns a server; Run starts it.
func New(opts Options, reg *cards.Registry, h Handler) *Server {
	if opts.WatchInterval <= 0 {
		opts.WatchInterval = time.Second
	}
	return &Server{opts: opts, reg: reg, handler: h, cordons: cordonView{read: !opts.AwaitCordons}}
}

func (s *Server) socketPath() string { return filepath.Join(s.opts.PluginDir, s.opts.SocketName) }
func (s *Server) kubeletPath() string {
	return filepath.Join(s.opts.PluginDir, filepath.Base(pluginapi.KubeletSocket))
}

// Run serves and keeps the registration alive until ctx ends. The kubelet removes
// plugin sockets when it restarts and recreates kubelet.sock: either one makes the
// server start afresh and register again.
func (s *Server) Run(ctx context.Context) error {
	backoff := s.opts.WatchInterval
	for ctx.Err() == nil {
		if err := s.serve(); err != nil {
			klog.ErrorS(err, "Cannot serve the device plugin socket; retrying", "socket", s.socketPath(), "in", backoff)
			if !sleep(ctx, backoff) {
				break
			}
			continue
		}
		s.watch(ctx)
		s.stop()
	}
	s.stop()
	return nil
}

// watch registers and returns when the server must restart or ctx ends.
func (s *Server) watch(ctx context.Context) {
	var kubeletID uint64
	registered, failures := false, 0
	for {
		if !registered && fileID(s.kubeletPath()) != 0 {
			if err := s.register(ctx); err != nil {
				failures++
				if failures == 1 || failures%30 == 0 {
					klog.ErrorS(err, "Registration failed; retrying", "attempt", failures)
				}
			} else {
				registered, kubeletID = true, fileID(s.kubeletPath())
				klog.InfoS("Registered with the kubelet", "resource", s.opts.Resource, "socket", s.socketPath())
				if s.opts.OnRegistered != nil {
					s.opts.OnRegistered()
				}
			}
		}
		if !sleep(ctx, s.opts.WatchInterval) {
			return
		}
		if fileID(s.socketPath()) == 0 {
			klog.InfoS("Plugin socket removed (kubelet restart?); serving afresh", "socket", s.socketPath())
			return
		}
		if id := fileID(s.kubeletPath()); registered && id != 0 && id != kubeletID {
			klog.InfoS("Kubelet socket recreated; registering again")
			return
		}
	}
}

func (s *Server) serve() error {
	path := s.socketPath()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, &service{s: s})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.Serve(lis); err != nil {
			klog.ErrorS(err, "Device plugin gRPC server stopped", "socket", path)
		}
	}()
	s.mu.Lock()
	s.grpc, s.done = g, done
	s.mu.Unlock()
	return nil
}

func (s *Server) stop() {
	s.mu.Lock()
	g, done := s.grpc, s.done
	s.grpc, s.done = nil, nil
	s.mu.Unlock()
	if g == nil {
		return
	}
	g.Stop()
	<-done
	if err := os.Remove(s.socketPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.ErrorS(err, "Cannot remove plugin socket", "socket", s.socketPath())
	}
}

func (s *Server) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := grpc.Dial("unix://"+s.kubeletPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("%w: dial %s: %v", ErrRegister, s.kubeletPath(), err)
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     s.opts.SocketName,
		ResourceName: s.opts.Resource,
		Options:      pluginOptions(),
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRegister, err)
	}
	return nil
}

func pluginOptions() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}
}

// fileID identifies a file by inode, so a recreated socket differs; 0 when absent.
func fileID(path string) uint64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return uint64(fi.ModTime().UnixNano())
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
