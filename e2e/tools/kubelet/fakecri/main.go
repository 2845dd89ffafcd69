// Command fakecri is the container runtime of the end-to-end harness's simulated GPU
// nodes: Kubernetes' in-memory CRI fake (k8s.io/cri-client/pkg/fake) served on a unix
// socket for one real kubelet, with three additions. It records what the kubelet passes
// to every container it creates (environment, mounts, devices, CDI devices, annotations,
// and the Tessera limits file read through the mounts) as one JSON file per container in
// --record-dir; it creates the log file the kubelet expects for each container; and a
// container whose command is `sleep N` exits with status 0 after N seconds, so pods go
// to Succeeded through the kubelet's own status updates. Nothing is executed.
//
// With --cdi-spec-dir it also does what a CDI-enabled runtime does with the CDI devices
// the kubelet names (cdi.go). Like containerd, it reports each container's resources in
// ContainerStatus, from CreateContainer and every UpdateContainerResources since
// (resources.go); the fake alone reports none.
//
// Usage: fakecri --socket=PATH --record-dir=DIR --node=NAME [--cdi-spec-dir=DIR]
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
)

func main() {
	socket := flag.String("socket", "", "unix socket to serve the CRI on")
	recordDir := flag.String("record-dir", "", "directory for one JSON record per created container")
	node := flag.String("node", "", "node name written into each record")
	cdiDir := flag.String("cdi-spec-dir", "", "CDI spec directory; empty leaves CDI off")
	klog.InitFlags(nil)
	flag.Parse()
	if *socket == "" || *recordDir == "" || *node == "" {
		fmt.Fprintln(os.Stderr, "fakecri: --socket, --record-dir and --node are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var cdiDirs []string
	if *cdiDir != "" {
		cdiDirs = append(cdiDirs, *cdiDir)
	}
	if err := run(ctx, *socket, *recordDir, *node, cdiDirs); err != nil {
		klog.ErrorS(err, "Runtime stopped")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

func run(ctx context.Context, socket, recordDir, node string, cdiDirs []string) error {
	if err := os.MkdirAll(recordDir, 0o755); err != nil {
		return fmt.Errorf("record dir: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return fmt.Errorf("socket dir: %w", err)
	}
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("stale socket: %w", err)
	}
	rt := newRuntime(fake.NewFakeRemoteRuntime(), recordDir, node, cdiDirs...)
	server := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(server, rt)
	runtimeapi.RegisterImageServiceServer(server, rt)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socket, err)
	}
	go rt.forgetCalls(ctx, 10*time.Second)
	go func() {
		<-ctx.Done()
		server.Stop()
	}()
	klog.InfoS("In-memory CRI serving", "socket", socket, "node", node, "records", recordDir)
	if err := server.Serve(l); err != nil && ctx.Err() == nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
