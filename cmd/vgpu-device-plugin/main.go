// Command vgpu-device-plugin is Tessera's node agent. It reads its configuration
// (flag > env > file; see config/device-plugin.yaml) and runs deviceplugin/agent.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/deviceplugin/agent"
	"github.com/tessera-gpu/tessera/deviceplugin/config"
	"github.com/tessera-gpu/tessera/internal/buildinfo"
	"github.com/tessera-gpu/tessera/internal/metricsauth"
)

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println(buildinfo.String("vgpu-device-plugin"))
		return
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	authFlags := flag.NewFlagSet("metrics-auth", flag.ContinueOnError)
	metricsAuth := authFlags.String("metrics-auth", metricsauth.ModeNone, "who may read /metrics: "+metricsauth.ModeKubernetes+
		" (a bearer token the API server authenticates, whose user may get the non-resource URL /metrics; needs create on"+
		" tokenreviews and subjectaccessreviews) or "+metricsauth.ModeNone+" (anyone); /healthz and /readyz stay open")
	cfg, err := config.Load(os.Args[1:], os.LookupEnv, klogFlags, authFlags)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Print(config.Usage(klogFlags, authFlags))
		return
	}
	if err == nil {
		_, err = metricsauth.ParseMode(*metricsAuth)
	}
	if err != nil {
		klog.ErrorS(err, "Bad configuration")
		os.Exit(2)
	}
	rest, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		klog.ErrorS(err, "Cannot build the Kubernetes client configuration", "kubeconfig", cfg.Kubeconfig)
		os.Exit(1)
	}
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		klog.ErrorS(err, "Cannot create the Kubernetes client")
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	deps := agent.Deps{NVML: nvml.New(), Client: client}
	if *metricsAuth == metricsauth.ModeKubernetes && cfg.MetricsAddress != "" {
		// The agent serves /metrics, /healthz and /readyz in memory; the port serves them
		// through the guard (the probes without credentials).
		deps.MetricsListener = agent.GuardMetrics(ctx, cfg.MetricsAddress, client)
	}
	if err := agent.Run(ctx, cfg, deps); err != nil {
		klog.ErrorS(err, "Node agent stopped")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}
