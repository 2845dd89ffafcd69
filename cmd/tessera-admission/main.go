// Command tessera-admission is Tessera's optional admission webhook for pods
// (docs/admission.md): it routes vGPU pods made outside VolcanoJobs to Volcano's
// scheduler and a queue and refuses what the scheduler would refuse, and what the
// administrator's limits forbid, when the pod is created. It ships in the vc-scheduler
// image as a second entrypoint.
package main

import (
	"context"
	"errors"
	goflag "flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	admissionregv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	resourcev1client "k8s.io/client-go/kubernetes/typed/resource/v1"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/admission"
	"github.com/tessera-gpu/tessera/internal/buildinfo"
)

const program = "tessera-admission"

type options struct {
	kubeconfig, config, listen string
	certFile, keyFile          string
	secret                     string
	hosts                      []string
	mutating, validating       []string
	syncPeriod                 time.Duration
	version                    bool
}

func flags(o *options, klogFlags *goflag.FlagSet) *pflag.FlagSet {
	fs := pflag.NewFlagSet(program, pflag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig path; empty means in-cluster")
	fs.StringVar(&o.config, "config", "", "the webhook's configuration file (docs/admission.md); empty: route to volcano, queue default, no limits")
	fs.StringVar(&o.listen, "listen-address", ":8443", "HTTPS address of the webhooks and /healthz, /readyz")
	fs.StringVar(&o.certFile, "tls-cert-file", "", "serving certificate (PEM), e.g. cert-manager's Secret mounted; re-read when it changes")
	fs.StringVar(&o.keyFile, "tls-private-key-file", "", "key of --tls-cert-file")
	fs.StringVar(&o.secret, "self-signed-secret", "", "NAMESPACE/NAME of the Secret holding a self-made CA and serving certificate (instead of --tls-cert-file)")
	fs.StringSliceVar(&o.hosts, "self-signed-hosts", nil, "DNS names or IPs the self-made serving certificate covers (the Service's names)")
	fs.StringSliceVar(&o.mutating, "mutating-webhook-configuration", nil, "MutatingWebhookConfigurations whose caBundle the self-signed mode writes")
	fs.StringSliceVar(&o.validating, "validating-webhook-configuration", nil, "ValidatingWebhookConfigurations whose caBundle the self-signed mode writes")
	fs.DurationVar(&o.syncPeriod, "self-signed-sync-period", 30*time.Second, "how often the self-signed mode re-checks the Secret and the caBundles")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.AddGoFlagSet(klogFlags)
	return fs
}

// check refuses a TLS setup that names neither mode, or both, or half of one.
func (o *options) check() error {
	files, self := o.certFile != "" || o.keyFile != "", o.secret != ""
	switch {
	case files && self:
		return errors.New("--tls-cert-file/--tls-private-key-file and --self-signed-secret both given: pick one TLS mode")
	case !files && !self:
		return errors.New("no serving certificate: give --tls-cert-file and --tls-private-key-file, or --self-signed-secret")
	case files && (o.certFile == "" || o.keyFile == ""):
		return fmt.Errorf("--tls-cert-file %q and --tls-private-key-file %q: give both", o.certFile, o.keyFile)
	case self && len(strings.Split(o.secret, "/")) != 2:
		return fmt.Errorf("--self-signed-secret: %q: want NAMESPACE/NAME", o.secret)
	case self && len(o.hosts) == 0:
		return errors.New("--self-signed-secret needs --self-signed-hosts: the names the API server calls the webhook by")
	}
	return nil
}

func main() {
	klogFlags := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(klogFlags)
	var o options
	fs := flags(&o, klogFlags)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Printf("Usage of %s:\n%s", program, fs.FlagUsages())
			return
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if o.version {
		fmt.Println(buildinfo.String(program))
		return
	}
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg, err := admission.LoadConfig(o.config)
	if err != nil {
		klog.ErrorS(err, "Bad webhook configuration", "config", o.config)
		klog.FlushAndExit(klog.ExitFlushTimeout, 2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, &o, cfg); err != nil {
		klog.ErrorS(err, "Admission webhook stopped")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

func run(ctx context.Context, o *options, cfg *admission.Config) error {
	rest, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %q: %w", o.kubeconfig, err)
	}
	// Typed clients of the groups it uses, not the whole clientset: a third of the binary.
	core, err := corev1client.NewForConfig(rest)
	if err != nil {
		return err
	}
	var cert *admission.Certificate
	if o.secret != "" {
		reg, err := admissionregv1client.NewForConfig(rest)
		if err != nil {
			return err
		}
		parts := strings.Split(o.secret, "/")
		b := &admission.Bootstrap{Core: core, Registration: reg, Namespace: parts[0], Name: parts[1], Hosts: o.hosts,
			Mutating: o.mutating, Validating: o.validating, Now: time.Now}
		cert = &admission.Certificate{}
		if err := b.Sync(ctx, cert); err != nil {
			return fmt.Errorf("self-signed TLS: %w", err)
		}
		go b.Run(ctx, cert, o.syncPeriod)
	} else if cert, err = admission.NewFileCertificate(o.certFile, o.keyFile); err != nil {
		return err
	}
	nsInformer := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(core.RESTClient(), "namespaces", "", fields.Everything()),
		&corev1.Namespace{}, 10*time.Minute, cache.Indexers{})
	queues := &admission.ListerQueues{Lister: listerscorev1.NewNamespaceLister(nsInformer.GetIndexer()), Client: core}
	go nsInformer.Run(ctx.Done())
	// Every pod that names claims is judged by its claims' class (the region volume).
	rc, err := resourcev1client.NewForConfig(rest)
	if err != nil {
		return err
	}
	muxOpts := []admission.MuxOption{admission.WithClaimSpecs(&admission.ClaimClient{Client: rc})}
	if cfg.DRAConversion.Enabled {
		muxOpts = append(muxOpts, admission.WithClaimTemplates(&admission.TemplateClient{Client: rc}))
	}
	klog.InfoS("Admission webhook starting", "version", buildinfo.String(program), "schedulerName", cfg.SchedulerName,
		"defaultQueue", cfg.DefaultQueue, "limits", len(cfg.Limits), "queueGate", cfg.QueueGate, "draConversion", cfg.DRAConversion.Enabled)
	return admission.Serve(ctx, o.listen, cert, admission.NewMux(admission.NewPolicy(*cfg), queues, nsInformer.HasSynced, muxOpts...))
}
