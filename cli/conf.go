package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/tessera-gpu/tessera/pluginargs"
)

// ConfKey is the key of the scheduler's conf in its ConfigMap, as Volcano and the
// chart write it.
const ConfKey = "volcano-scheduler.conf"

// chartConfSelector finds the ConfigMap the chart (charts/tessera/templates/scheduler.yaml)
// mounts into the scheduler: "<release>-scheduler-conf", labelled with the scheduler
// component and the chart ("tessera-<version>"; nameOverride leaves the chart label).
const chartConfSelector = "app.kubernetes.io/component=scheduler,helm.sh/chart"

// schedConf is the scheduler's volcano-scheduler.conf and where it was read.
type schedConf struct {
	text, source string
	// discovered: found in the cluster rather than named by a flag.
	discovered bool
}

// readConf reads the conf the flags name; with neither flag and discover, the chart's
// ConfigMap in the cluster. nil: none (the plugin's defaults apply). What keeps the
// search from an answer is a warning, not an error: explain still answers.
func readConf(ctx context.Context, client kubernetes.Interface, o *options, discover bool, warn func(string)) (*schedConf, error) {
	switch {
	case o.conf != "":
		b, err := os.ReadFile(o.conf)
		if err != nil {
			return nil, err
		}
		return &schedConf{text: string(b), source: "file " + o.conf}, nil
	case o.confMap != "":
		ns, name, ok := strings.Cut(o.confMap, "/")
		if !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("%w: --scheduler-configmap %q: want NAMESPACE/NAME", ErrUsage, o.confMap)
		}
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("scheduler ConfigMap: %w", err)
		}
		return &schedConf{text: cm.Data[ConfKey], source: "ConfigMap " + o.confMap}, nil
	case !discover:
		return nil, nil
	}
	cms, err := client.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{LabelSelector: chartConfSelector})
	if err != nil {
		what := "cannot look for the scheduler's conf"
		if apierrors.IsForbidden(err) {
			what = "your account may not list ConfigMaps, so the scheduler's conf was not read"
		}
		warn(fmt.Sprintf("%s (%v); the vgpu plugin's defaults are used (--scheduler-configmap NAMESPACE/NAME names it)", what, err))
		return nil, nil
	}
	var found []*corev1.ConfigMap
	for i := range cms.Items {
		cm := &cms.Items[i]
		if _, ok := cm.Data[ConfKey]; ok && strings.HasPrefix(cm.Labels["helm.sh/chart"], "tessera-") {
			found = append(found, cm)
		}
	}
	switch len(found) {
	case 0:
		warn("no Tessera scheduler conf found in the cluster (the chart's ConfigMap <release>-scheduler-conf); " +
			"the vgpu plugin's defaults are used (--scheduler-configmap NAMESPACE/NAME names another)")
		return nil, nil
	case 1:
		cm := found[0]
		return &schedConf{text: cm.Data[ConfKey], source: "ConfigMap " + cm.Namespace + "/" + cm.Name, discovered: true}, nil
	}
	names := make([]string, len(found))
	for i, cm := range found {
		names[i] = cm.Namespace + "/" + cm.Name
	}
	sort.Strings(names)
	warn(fmt.Sprintf("%d Tessera scheduler confs found (%s); the vgpu plugin's defaults are used: name one with --scheduler-configmap",
		len(found), strings.Join(names, ", ")))
	return nil, nil
}

// vgpuArgs are the vgpu arguments of the conf (the plugin's defaults without one),
// what in the conf keeps the plugin or the queues from their job, and where it was read.
func vgpuArgs(ctx context.Context, client kubernetes.Interface, o *options, discover bool, warn func(string)) (pluginargs.Args, *schedConf, []string, error) {
	conf, err := readConf(ctx, client, o, discover, warn)
	if err != nil || conf == nil {
		return pluginargs.Defaults(), nil, nil, err
	}
	args, err := pluginargs.FromConf(conf.text)
	if errors.Is(err, pluginargs.ErrNotEnabled) && conf.discovered {
		// Found, not asked for: say what it means rather than fail the explanation.
		return pluginargs.Defaults(), conf, []string{"the scheduler's conf does not enable the vgpu plugin: " +
			"vGPU pods are not placed by Tessera"}, nil
	}
	findings, ferr := pluginargs.ConfFindings(conf.text)
	if ferr != nil && err == nil {
		err = ferr
	}
	more, aerr := actionFindings(conf.text)
	if aerr != nil && err == nil {
		err = aerr
	}
	return args, conf, append(findings, more...), err
}

// actionFindings: the actions without which queues keep what they borrowed. reclaim
// takes cards back for a queue below its share, preempt for a higher-priority job of
// the same queue; without them a pending vGPU pod waits for cards to free themselves.
func actionFindings(conf string) ([]string, error) {
	var c struct {
		Actions string `json:"actions"`
	}
	if err := yaml.Unmarshal([]byte(conf), &c); err != nil {
		return nil, fmt.Errorf("%s: %w", ConfKey, err)
	}
	have := map[string]bool{}
	for _, a := range strings.Split(c.Actions, ",") {
		have[strings.TrimSpace(a)] = true
	}
	var out []string
	if !have["reclaim"] {
		out = append(out, fmt.Sprintf("actions %q lack reclaim: a queue below its card share never takes back the cards "+
			"other queues borrowed; add reclaim (docs/queues.md)", c.Actions))
	}
	if !have["preempt"] {
		out = append(out, fmt.Sprintf("actions %q lack preempt: a pending job never evicts lower-priority jobs of its own "+
			"queue from their cards; add preempt (docs/queues.md)", c.Actions))
	}
	return out, nil
}
