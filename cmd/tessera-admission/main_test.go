package main

import (
	goflag "flag"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/testing/golist"
)

// The webhook links neither Volcano's scheduler (whose packages set up clients at init)
// nor the scheduler plugin or the node agent: it reads requests through api and
// pluginargs, as the plugin does.
func TestTheWebhookLinksNoSchedulerOrAgent(t *testing.T) {
	const module = "github.com/tessera-gpu/tessera/"
	for _, dep := range golist.Deps(t, ".") {
		for _, banned := range []string{"volcano.sh/volcano/", module + "plugins/", module + "deviceplugin/"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("cmd/tessera-admission links %s", dep)
			}
		}
	}
}

func TestTLSFlagsPickExactlyOneMode(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no serving certificate"},
		{[]string{"--tls-cert-file=a"}, `--tls-cert-file "a" and --tls-private-key-file "": give both`},
		{[]string{"--tls-cert-file=a", "--tls-private-key-file=b", "--self-signed-secret=ns/s"}, "pick one TLS mode"},
		{[]string{"--self-signed-secret=s", "--self-signed-hosts=x"}, `--self-signed-secret: "s": want NAMESPACE/NAME`},
		{[]string{"--self-signed-secret=ns/s"}, "needs --self-signed-hosts"},
		{[]string{"--self-signed-secret=ns/s", "--self-signed-hosts=svc.ns.svc,127.0.0.1"}, ""},
		{[]string{"--tls-cert-file=a", "--tls-private-key-file=b"}, ""},
	} {
		var o options
		fs := flags(&o, goflag.NewFlagSet("klog", goflag.ContinueOnError))
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		err := o.check()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}
