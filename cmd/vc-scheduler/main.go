// Command vc-scheduler is Volcano's scheduler with Tessera's plugins compiled in.
// It is a drop-in replacement for Volcano's own vc-scheduler image: same flags, same
// configuration file, plus the plugins registered by the imports below.
package main

import (
	"context"
	goflag "flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	_ "go.uber.org/automaxprocs"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	cliflag "k8s.io/component-base/cli/flag"
	componentbaseoptions "k8s.io/component-base/config/options"
	"k8s.io/klog/v2"

	"volcano.sh/volcano/cmd/scheduler/app"
	"volcano.sh/volcano/cmd/scheduler/app/options"
	"volcano.sh/volcano/pkg/kube"
	commonutil "volcano.sh/volcano/pkg/util"
	"volcano.sh/volcano/pkg/version"

	// Volcano's own actions and plugins.
	_ "volcano.sh/volcano/pkg/scheduler/actions"
	_ "volcano.sh/volcano/pkg/scheduler/plugins"
	_ "volcano.sh/volcano/pkg/scheduler/util/assert"

	// Tessera's plugins register themselves under their conf names.
	"github.com/tessera-gpu/tessera/internal/buildinfo"
	"github.com/tessera-gpu/tessera/internal/metricsauth"
	"github.com/tessera-gpu/tessera/plugins/vgpu"
)

var logFlushFreq = pflag.Duration("log-flush-frequency", 5*time.Second, "Maximum time between log flushes.")

func main() {
	klog.InitFlags(nil)

	fs := pflag.CommandLine
	s := options.NewServerOption()
	s.AddFlags(fs)
	utilfeature.DefaultMutableFeatureGate.AddFlag(fs)
	var signing signingFlags
	signing.add(fs)

	commonutil.LeaderElectionDefault(&s.LeaderElection)
	s.LeaderElection.ResourceName = commonutil.GenerateComponentName(s.SchedulerNames)
	componentbaseoptions.BindLeaderElectionFlags(&s.LeaderElection, fs)
	s.RegisterOptions()
	metricsAuthAddress := fs.String("tessera-metrics-auth-address", "", "Serve Volcano's --listen-address (/metrics, and pprof when on) "+
		"here behind Kubernetes authentication (TokenReview) and authorization (SubjectAccessReview: the request's verb on its "+
		"path as a non-resource URL, e.g. get /metrics); --listen-address must then be a loopback address. Empty: off.")

	// --help is not an error: the flags on stdout and exit 0 (pflag's ExitOnError exits 2).
	for _, a := range os.Args[1:] {
		if a == "-h" || a == "--help" {
			fs.AddGoFlagSet(goflag.CommandLine)
			fmt.Printf("Usage of vc-scheduler:\n%s", fs.FlagUsages())
			return
		}
	}
	cliflag.InitFlags()

	if s.PrintVersion {
		// Tessera's build first, then the Volcano release it is built on.
		fmt.Println(buildinfo.String("vc-scheduler"))
		version.PrintVersionAndExit()
		return
	}
	if err := s.CheckOptionOrDie(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	if s.CaCertFile != "" && s.CertFile != "" && s.KeyFile != "" {
		if err := s.ParseCAFiles(nil); err != nil {
			fmt.Fprintf(os.Stderr, "parse CA files: %v\n", err)
			os.Exit(1)
		}
	}
	if *metricsAuthAddress != "" {
		if err := serveGuardedMetrics(*metricsAuthAddress, s); err != nil {
			fmt.Fprintf(os.Stderr, "--tessera-metrics-auth-address: %v\n", err)
			os.Exit(1)
		}
	}
	// Before Volcano's cache starts: it sizes each pod's resources as the pod arrives.
	if err := vgpu.PrepareVolcano(s.SchedulerConf); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	signer, err := signing.start(context.Background(), s.KubeClientOptions)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	vgpu.Register(prometheus.DefaultRegisterer, signer)
	klog.InfoS("Starting Tessera vc-scheduler", "goVersion", runtime.Version())

	klog.StartFlushDaemon(*logFlushFreq)
	defer klog.Flush()

	if err := app.Run(s); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
}

// serveGuardedMetrics serves Volcano's metrics server, which must listen on a loopback
// address, at addr behind delegated authentication and authorization.
func serveGuardedMetrics(addr string, s *options.ServerOption) error {
	if err := metricsauth.CheckLoopback(s.ListenAddress); err != nil {
		return fmt.Errorf("--listen-address: %w", err)
	}
	cfg, err := kube.BuildConfig(s.KubeClientOptions)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	h := metricsauth.Handler(metricsauth.NewDelegating(client), metricsauth.Proxy(metricsauth.DialTCP(s.ListenAddress)))
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go func() {
		if err := metricsauth.ServeListener(context.Background(), lis, h); err != nil {
			klog.ErrorS(err, "Guarded metrics endpoint stopped", "address", addr)
		}
	}()
	return nil
}
