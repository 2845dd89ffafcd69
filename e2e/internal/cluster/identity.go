package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The harness runs its scheduler and node agents under the chart's own service accounts
// and RBAC, rendered by Helm from the chart as release HarnessRelease in HarnessNamespace:
// what the chart's permissions lack, the harness's components lack too.
const (
	HarnessRelease   = "harness"
	HarnessNamespace = "kube-system"
	// The names helm gives them for that release.
	schedulerAccount = HarnessRelease + "-tessera-scheduler"
	// AgentAccount is the agents' service account, in HarnessNamespace.
	AgentAccount = HarnessRelease + "-tessera-vgpu-device-plugin"
	// tokenSeconds outlives any run of the suite.
	tokenSeconds = 48 * 3600
)

// Where the scheduler keeps its assignment signing keys and publishes their public
// halves for the agents: the chart's names for the harness's release.
const (
	SigningSecret  = HarnessNamespace + "/" + HarnessRelease + "-tessera-assignment-signing"
	AssignmentKeys = HarnessNamespace + "/" + HarnessRelease + "-tessera-assignment-keys"
)

// SchedulerUser and AgentUser are who the harness's scheduler and agents are to the API
// server (with Options.ChartDir set; else HarnessUser).
const (
	SchedulerUser = "system:serviceaccount:" + HarnessNamespace + ":" + schedulerAccount
	AgentUser     = "system:serviceaccount:" + HarnessNamespace + ":" + AgentAccount
)

// SchedulerUsers are the users a chart installed beside the harness must let write what it
// keeps for its own scheduler (admissionPolicy.extraSchedulerUsers): the harness's
// scheduler and agents, which are not the chart's.
func (c *Cluster) SchedulerUsers() []string {
	if c.Opts.ChartDir == "" {
		return []string{HarnessUser}
	}
	return []string{SchedulerUser, AgentUser}
}

// helmTemplate renders templates of the chart as release HarnessRelease.
func (c *Cluster) helmTemplate(ctx context.Context, chartDir string, args ...string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "tessera-helm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cmd := exec.CommandContext(ctx, c.Opts.Bin.Helm, append([]string{"template", HarnessRelease, chartDir,
		"--namespace", HarnessNamespace, "--kube-version", "1.34.2"}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+dir, "HELM_CONFIG_HOME="+dir, "HELM_DATA_HOME="+dir)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm template %v: %w: %s", args, err, errOut.String())
	}
	return out.Bytes(), nil
}

// applyIdentities creates the chart's service accounts and RBAC for the harness's release,
// rendered for the scheduler configuration the harness runs (the chart derives the
// scheduler's permissions from its actions and plugins).
func (c *Cluster) applyIdentities(ctx context.Context) error {
	args := []string{"--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml"}
	if c.Opts.SchedulerConf != "" {
		args = append(args, "--set-file", "scheduler.conf.override="+c.Opts.SchedulerConf)
	}
	out, err := c.helmTemplate(ctx, c.Opts.ChartDir, args...)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	created := 0
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("the chart's RBAC: %w", err)
		}
		if raw == nil {
			continue
		}
		if err := c.createObject(ctx, raw); err != nil {
			return err
		}
		created++
	}
	if created == 0 {
		return fmt.Errorf("the chart rendered no service accounts or RBAC:\n%s", out)
	}
	return nil
}

// createObject creates one of the kinds the chart's RBAC templates render.
func (c *Cluster) createObject(ctx context.Context, raw map[string]any) error {
	doc, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	decode := func(into any) error { return json.Unmarshal(doc, into) }
	kind, _ := raw["kind"].(string)
	rbac := c.Client.RbacV1()
	switch kind {
	case "ServiceAccount":
		var o corev1.ServiceAccount
		if err = decode(&o); err == nil {
			_, err = c.Client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		}
	case "ClusterRole":
		var o rbacv1.ClusterRole
		if err = decode(&o); err == nil {
			_, err = rbac.ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
		}
	case "ClusterRoleBinding":
		var o rbacv1.ClusterRoleBinding
		if err = decode(&o); err == nil {
			_, err = rbac.ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
		}
	case "Role":
		var o rbacv1.Role
		if err = decode(&o); err == nil {
			_, err = rbac.Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		}
	case "RoleBinding":
		var o rbacv1.RoleBinding
		if err = decode(&o); err == nil {
			_, err = rbac.RoleBindings(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		}
	default:
		return fmt.Errorf("the chart's RBAC templates rendered a %q, which the harness does not apply", kind)
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", kind, err)
	}
	return nil
}

// accountKubeconfig writes a kubeconfig for server that authenticates with a token of
// account, bound to pod when it is not nil (the token then carries the pod's node, as the
// kubelet's projected token does for the agent's pod).
func (c *Cluster) accountKubeconfig(ctx context.Context, path, server, account string, pod *corev1.Pod) error {
	exp := int64(tokenSeconds)
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := c.Client.CoreV1().ServiceAccounts(HarnessNamespace).CreateToken(ctx, account, req, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token of %s: %w", account, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["tessera-e2e"] = &clientcmdapi.Cluster{Server: server, InsecureSkipTLSVerify: true}
	kc.AuthInfos[account] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["tessera-e2e"] = &clientcmdapi.Context{Cluster: "tessera-e2e", AuthInfo: account}
	kc.CurrentContext = "tessera-e2e"
	return clientcmd.WriteToFile(*kc, path)
}

// agentKubeconfig returns the kubeconfig node's agent runs with: with Options.ChartDir, a
// token of the chart's agent account bound to a pod on the node (created once, tolerating
// every taint, as the agent's DaemonSet pod would), so that it carries the node claim the
// chart's admission policies keep the agent's writes to; else the admin kubeconfig.
func (c *Cluster) agentKubeconfig(ctx context.Context, node string) (string, error) {
	if c.Opts.ChartDir == "" {
		return c.Kubeconfig, nil
	}
	path := filepath.Join(c.NodeDir(node), "kubeconfig-agent")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	ctr := corev1.Container{Name: "identity", Image: "busybox"}
	if n, _ := c.node(node); n.Runtime == RuntimeContainerd {
		// A real runtime runs it: an image the node has (there is no registry).
		ctr.Image, ctr.ImagePullPolicy = PauseImage, corev1.PullNever
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: agentIdentityPod(node), Namespace: HarnessNamespace,
		Labels: map[string]string{"app.kubernetes.io/name": "tessera-harness-agent"}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: AgentAccount,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{ctr}}}
	created, err := c.Client.CoreV1().Pods(HarnessNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("the agent identity pod of %s: %w", node, err)
	}
	if err := c.accountKubeconfig(ctx, path, c.Rest.Host, AgentAccount, created); err != nil {
		return "", err
	}
	return path, nil
}

// agentIdentityPod is the name of the pod node's agent token is bound to.
func agentIdentityPod(node string) string { return "harness-agent-" + node }
