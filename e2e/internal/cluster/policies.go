package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// HarnessUser is who the harness's scheduler and agents act as without Options.ChartDir
// (the admin token); with it they run under the chart's service accounts (identity.go).
const HarnessUser = "admin"

// Policies are the chart's admission policies as applied to the cluster.
type Policies struct {
	Policies, Bindings []string
}

// ApplyAdmissionPolicies renders the chart's ValidatingAdmissionPolicies with Helm, as
// helm install would for the harness's release (whose scheduler and agent accounts are
// the harness's own; without Options.ChartDir, HarnessUser is allowed to write what the
// chart keeps for them), creates them and waits until the API server enforces them.
func (c *Cluster) ApplyAdmissionPolicies(ctx context.Context, chartDir string) (*Policies, error) {
	args := []string{"--show-only", "templates/admission-policy.yaml"}
	if c.Opts.ChartDir == "" {
		args = append(args, "--set=admissionPolicy.extraSchedulerUsers={"+HarnessUser+"}")
	}
	rendered, err := c.helmTemplate(ctx, chartDir, args...)
	if err != nil {
		return nil, err
	}
	out := bytes.NewBuffer(rendered)
	applied := &Policies{}
	dec := utilyaml.NewYAMLOrJSONDecoder(out, 4096)
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
