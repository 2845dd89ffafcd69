package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tessera-gpu/tessera/api"
)

// ClusterFlags read the conf where explain reads it: the ConfigMap a flag names, else
// the chart's, found in the cluster; the client flags select the kubeconfig's cluster
// with kubectl's overrides.
func TestClusterFlagsReadTheConfAndTheKubeconfigAsExplainDoes(t *testing.T) {
	conf := "actions: \"enqueue, allocate, reclaim, preempt\"\ntiers:\n- plugins:\n  - name: vgpu\n    arguments:\n      vgpu.NodePolicy: spread\n"
	client := fake.NewSimpleClientset(chartConfigMap("tessera-system", "gpu", conf))
	kubeconfig := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://one.example:6443\"}\n"+
		"contexts:\n- name: c\n  context: {cluster: c, user: u}\nusers:\n- name: u\n  user: {token: t}\ncurrent-context: c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args         []string
		policy       api.Policy
		source, host string
	}{
		{[]string{"--kubeconfig", kubeconfig}, api.PolicySpread, "ConfigMap tessera-system/gpu-scheduler-conf", "https://one.example:6443"},
		{[]string{"--kubeconfig", kubeconfig, "-s", "https://two.example:6443", "--scheduler-conf", writeConf(t, "tiers:\n- plugins:\n  - name: vgpu\n")},
			api.PolicyBinpack, "file ", "https://two.example:6443"},
	} {
		var f ClusterFlags
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		f.Bind(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		var warnings []string
		args, source, err := f.SchedulerArgs(context.Background(), client, func(s string) { warnings = append(warnings, s) })
		if err != nil {
			t.Fatal(err)
		}
		if args.NodePolicy != tc.policy || !strings.HasPrefix(source, tc.source) {
			t.Errorf("%v: node policy %s from %q, want %s from %q (warnings %q)", tc.args, args.NodePolicy, source, tc.policy, tc.source, warnings)
		}
		cfg, err := f.RESTConfig()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != tc.host {
			t.Errorf("%v: host %q, want %q", tc.args, cfg.Host, tc.host)
		}
	}
}

func writeConf(t *testing.T, conf string) string {
	path := filepath.Join(t.TempDir(), "volcano-scheduler.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
