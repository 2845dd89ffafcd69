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
	"strings"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// HarnessUser is who the harness's scheduler and agents act as (the admin token), where
// the chart runs them under service accounts of their own.
const HarnessUser = "admin"

// Policies are the chart's admission policies as applied to the cluster.
type Policies struct {
	Policies, Bindings []string
}

// ApplyAdmissionPolicies renders the chart's ValidatingAdmissionPolicies with Helm, as
// helm install would (with HarnessUser allowed to write what the chart keeps for its
// scheduler and agents), creates them and waits until the API server enforces them.
func (c *Cluster) ApplyAdmissionPolicies(ctx context.Context, chartDir string) (*Policies, error) {
	dir, err := os.MkdirTemp("", "tessera-helm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cmd := exec.CommandContext(ctx, c.Opts.Bin.Helm, "template", "tessera", chartDir, "--namespace", "tessera-system",
		"--set=admissionPolicy.extraSchedulerUsers={"+HarnessUser+"}", "--kube-version", "1.34.2",
		"--show-only", "templates/admission-policy.yaml")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+dir, "HELM_CONFIG_HOME="+dir, "HELM_DATA_HOME="+dir)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm template: %w: %s", err, errOut.String())
	}
	applied := &Policies{}
	dec := utilyaml.NewYAMLOrJSONDecoder(&out, 4096)
	regs := c.Client.AdmissionregistrationV1()
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return applied, fmt.Errorf("the chart's admission policies: %w", err)
		}
		doc, err := json.Marshal(raw)
		if err != nil {
			return applied, err
		}
		switch raw["kind"] {
		case "ValidatingAdmissionPolicy":
			var p admissionregv1.ValidatingAdmissionPolicy
			if err := json.Unmarshal(doc, &p); err != nil {
				return applied, err
			}
			if _, err := regs.ValidatingAdmissionPolicies().Create(ctx, &p, metav1.CreateOptions{}); err != nil {
				return applied, fmt.Errorf("create policy %s: %w", p.Name, err)
			}
			applied.Policies = append(applied.Policies, p.Name)
		case "ValidatingAdmissionPolicyBinding":
			var b admissionregv1.ValidatingAdmissionPolicyBinding
			if err := json.Unmarshal(doc, &b); err != nil {
				return applied, err
			}
			if _, err := regs.ValidatingAdmissionPolicyBindings().Create(ctx, &b, metav1.CreateOptions{}); err != nil {
				return applied, fmt.Errorf("create binding %s: %w", b.Name, err)
			}
			applied.Bindings = append(applied.Bindings, b.Name)
		}
	}
	if len(applied.Bindings) == 0 {
		return applied, fmt.Errorf("the chart rendered no admission policy bindings:\n%s", out.String())
	}
	// Policies load asynchronously: a dry run of a vGPU pod created on a node tells when
	// they hold.
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "policy-probe", Namespace: "default"}, Spec: corev1.PodSpec{
		NodeName: "nowhere", Containers: []corev1.Container{{Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"volcano.sh/vgpu-number": resource.MustParse("1")}}}}}}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "spec.nodeName"), nil
	})
	if err != nil {
		return applied, fmt.Errorf("the chart's admission policies never took effect: %w", err)
	}
	return applied, nil
}

// Remove deletes the policies and their bindings.
func (p *Policies) Remove(ctx context.Context, c *Cluster) {
	regs := c.Client.AdmissionregistrationV1()
	for _, n := range p.Bindings {
		_ = regs.ValidatingAdmissionPolicyBindings().Delete(ctx, n, metav1.DeleteOptions{})
	}
	for _, n := range p.Policies {
		_ = regs.ValidatingAdmissionPolicies().Delete(ctx, n, metav1.DeleteOptions{})
	}
}
