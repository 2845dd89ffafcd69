// Package quietinit silences klog while the packages behind the vgpu plugin
// initialise: one of Volcano's logs an error from its init when no kubeconfig sits at
// ~/.kube/config, which would otherwise greet every CLI command. Go initialises
// packages in import-path order once their imports are ready, so this package
// (which needs only klog) runs before any volcano.sh package. main turns logging
// back on with Restore.
package quietinit

import (
	"flag"
	"io"

	"k8s.io/klog/v2"
)

func init() {
	fs := flag.NewFlagSet("quiet", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
}

// Restore sends klog's warnings and errors to stderr again.
func Restore() {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "true")
	_ = fs.Set("stderrthreshold", "WARNING")
}
