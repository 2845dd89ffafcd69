package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
)

// A DRA node (Node.CardAPI CardAPIDRA) runs the agent with cardAPI dra: no device plugin,
// the DRA driver vgpu.tessera.io instead, its sockets in the kubelet's own plugin
// directories under the node's kubelet root (kubelet/plugins, kubelet/plugins_registry).

// CardAPIDRA is Node.CardAPI for a node whose agent serves its cards as DRA devices.
const CardAPIDRA = api.CardAPIDRA

// DRADriver is the agent's DRA driver name, the driver of its ResourceSlices and the
// DeviceClass the chart installs.
const DRADriver = "vgpu.tessera.io"

// DRAGates are the alpha gates a Kubernetes 1.34 cluster needs for Tessera's DRA path
// (docs/dra.md, "Feature gates").
func DRAGates() map[string]bool {
	return map[string]bool{"DRAConsumableCapacity": true, "DRADeviceTaints": true}
}

func (c *Cluster) sortedGates() []string {
	var out []string
	for k, v := range c.Opts.FeatureGates {
		out = append(out, fmt.Sprintf("%s=%t", k, v))
	}
	sort.Strings(out)
	return out
}

// featureGatesFlag is --feature-gates for the control plane's binaries ("" for none).
func (c *Cluster) featureGatesFlag() string {
	g := c.sortedGates()
	if len(g) == 0 {
		return ""
	}
	return "--feature-gates=" + strings.Join(g, ",")
}

// apiServerGateArgs are the API server's gate flags; with DRADeviceTaints it also serves
// the alpha API of DeviceTaintRules, which Volcano's cache then watches.
func (c *Cluster) apiServerGateArgs() []string {
	f := c.featureGatesFlag()
	if f == "" {
		return nil
	}
	args := []string{f}
	if c.Opts.FeatureGates["DRADeviceTaints"] {
		args = append(args, "--runtime-config=resource.k8s.io/v1alpha3=true")
	}
	return args
}

// kcmGateArgs are kube-controller-manager's gate flags.
func (c *Cluster) kcmGateArgs() []string {
	if f := c.featureGatesFlag(); f != "" {
		return []string{f}
	}
	return nil
}

// kubeletGates are the feature gates' lines under the KubeletConfiguration's featureGates.
func (c *Cluster) kubeletGates() string {
	var b strings.Builder
	for _, g := range c.sortedGates() {
		k, v, _ := strings.Cut(g, "=")
		fmt.Fprintf(&b, "  %s: %s\n", k, v)
	}
	return b.String()
}

// draAgentArgs are the agent's flags on a DRA node: the kubelet's plugin directories.
func (c *Cluster) draAgentArgs(node string) []string {
	root := filepath.Join(c.NodeDir(node), "kubelet")
	return []string{"--card-api=" + CardAPIDRA, "--dra-plugin-dir=" + filepath.Join(root, "plugins"),
		"--dra-registration-dir=" + filepath.Join(root, "plugins_registry")}
}

// waitDRANodeReady waits until a DRA node is Ready and untainted, carries the agent's
// inventory with card-api dra, and has its ResourceSlice with every card as a device.
func (c *Cluster) waitDRANodeReady(ctx context.Context, name string, timeout time.Duration) error {
	return waitFor(ctx, "DRA node "+name+" ready", timeout, nil, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		inv := n.Annotations[api.AnnotationInventory]
		if !ready(n) || inv == "" || n.Annotations[api.AnnotationCardAPI] != CardAPIDRA || len(n.Spec.Taints) > 0 {
			return false, fmt.Errorf("ready %t, inventory %t, card-api %q, taints %v", ready(n), inv != "",
				n.Annotations[api.AnnotationCardAPI], n.Spec.Taints)
		}
		decoded, err := api.DecodeInventory(inv)
		if err != nil {
			return false, err
		}
		devices, err := c.DRADevices(ctx, name)
		if err != nil {
			return false, err
		}
		if len(devices) != len(decoded.Cards) {
			return false, fmt.Errorf("ResourceSlice devices %d, inventory cards %d", len(devices), len(decoded.Cards))
		}
		return true, nil
	})
}

// DRADevices lists the devices of the node's ResourceSlices of Tessera's driver.
func (c *Cluster) DRADevices(ctx context.Context, node string) ([]resourcev1.Device, error) {
	slices, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + DRADriver})
	if err != nil {
		return nil, err
	}
	var out []resourcev1.Device
	for _, s := range slices.Items {
		out = append(out, s.Spec.Devices...)
	}
	return out, nil
}

// WriteDRASchedulerConf writes base's scheduler conf with its predicates plugin
// allocating claims (predicate.DynamicResourceAllocationEnable: true), as a user turns
// Volcano's DRA allocation on, to path.
func WriteDRASchedulerConf(base, path string) error {
	conf, err := os.ReadFile(base)
	if err != nil {
		return err
	}
	const predicates = "  - name: predicates\n"
	if !strings.Contains(string(conf), predicates) {
		return fmt.Errorf("%s: no predicates plugin line %q to turn DRA allocation on in", base, predicates)
	}
	edited := strings.Replace(string(conf), predicates,
		predicates+"    arguments:\n      predicate.DynamicResourceAllocationEnable: true\n", 1)
	return os.WriteFile(path, []byte(edited), 0o644)
}

// EnableDRA gives the harness's accounts what the chart gives them for DRA, rendered with
// cardAPI dra and schedulerConf (whose predicates turn on
// predicate.DynamicResourceAllocationEnable): the agents may publish ResourceSlices and read
// claims, the scheduler may allocate claims. It installs the chart's DeviceClass too. The
// returned function puts the harness's RBAC back and deletes the DeviceClass.
func (c *Cluster) EnableDRA(ctx context.Context, schedulerConf string) (func() error, error) {
	restore, err := c.ApplyChartRBAC(ctx, []string{"templates/deviceclass.yaml"},
		"--set", "devicePlugin.config.cardAPI=dra", "--set-file", "scheduler.conf.override="+schedulerConf)
	if err != nil {
		return nil, err
	}
	return func() error {
		err := restore()
		if derr := c.Client.ResourceV1().DeviceClasses().Delete(context.Background(), DRADriver, metav1.DeleteOptions{}); derr != nil && !apierrors.IsNotFound(derr) && err == nil {
			err = derr
		}
		return err
	}, nil
}
