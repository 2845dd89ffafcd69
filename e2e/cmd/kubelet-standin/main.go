// Command kubelet-standin plays the kubelet of one simulated GPU node for the end-to-end
// harness: see package e2e/internal/kubelet.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/e2e/internal/kubelet"
)

func main() {
	var o kubelet.Options
	var kubeconfig, labels string
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig path")
	flag.StringVar(&o.Node, "node-name", "", "Node to register")
	flag.StringVar(&o.DevicePluginDir, "device-plugin-dir", "", "directory for kubelet.sock and plugin sockets")
	flag.StringVar(&o.PodResourcesSocket, "pod-resources-socket", "", "PodResources socket path")
	flag.StringVar(&o.Resource, "resource", "volcano.sh/vgpu-number", "device plugin resource")
	flag.StringVar(&o.RecordDir, "record-dir", "", "directory for one JSON record per started container")
	flag.StringVar(&labels, "labels", "", "extra node labels k=v,k=v")
	flag.StringVar(&o.CPU, "cpu", "64", "CPU capacity")
	flag.StringVar(&o.Memory, "memory", "512Gi", "memory capacity")
	flag.DurationVar(&o.StatusInterval, "status-interval", 0, "node status heartbeat (default 10s)")
	klog.InitFlags(nil)
	flag.Parse()
	if o.Node == "" || o.DevicePluginDir == "" || o.PodResourcesSocket == "" || o.RecordDir == "" {
		klog.ErrorS(nil, "--node-name, --device-plugin-dir, --pod-resources-socket and --record-dir are required")
		os.Exit(2)
	}
	o.Labels = map[string]string{}
	for _, kv := range strings.Split(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			o.Labels[k] = v
		}
	}
	rest, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		klog.ErrorS(err, "Bad kubeconfig")
		os.Exit(1)
	}
	rest.QPS, rest.Burst = 200, 400
	client := kubernetes.NewForConfigOrDie(rest)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := kubelet.New(client, o).Run(ctx); err != nil {
		klog.ErrorS(err, "Kubelet stand-in stopped")
		os.Exit(1)
	}
}
