package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"

	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// ApplyChartRBAC gives the harness's accounts the RBAC the chart renders with values
// (helm template flags such as "--set", "admission.config.queueGate=true"), plus the
// chart's extra templates (e.g. templates/deviceclass.yaml): a scenario runs what a user
// with those values installs. The returned function puts back the RBAC the harness
// started with; it leaves the extra templates' objects.
func (c *Cluster) ApplyChartRBAC(ctx context.Context, extra []string, values ...string) (func() error, error) {
	if c.Opts.ChartDir == "" {
		return nil, errors.New("the chart's RBAC needs the chart (Options.ChartDir)")
	}
	// The harness's own render first (identity.go): values given later win over it.
	before := []string{"--show-only", "templates/rbac.yaml"}
	if c.Opts.SchedulerConf != "" {
		before = append(before, "--set-file", "scheduler.conf.override="+c.Opts.SchedulerConf)
	}
	args := append([]string{}, before...)
	for _, e := range extra {
		args = append(args, "--show-only", e)
	}
	with, err := c.renderChart(ctx, append(args, values...)...)
	if err != nil {
		return nil, err
	}
	harness, err := c.renderChart(ctx, before...)
	if err != nil {
		return nil, err
	}
	for _, o := range with {
		if err := c.applyObject(ctx, o); err != nil {
			return nil, err
		}
	}
	return func() error {
		for _, o := range harness {
			if err := c.applyObject(context.Background(), o); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// renderChart renders the chart's templates as the harness's release, one object each.
func (c *Cluster) renderChart(ctx context.Context, args ...string) ([]map[string]any, error) {
	out, err := c.helmTemplate(ctx, c.Opts.ChartDir, args...)
	if err != nil {
		return nil, err
	}
	var objs []map[string]any
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, err
		}
		if raw != nil {
			objs = append(objs, raw)
		}
	}
}

// applyObject creates or replaces one of the cluster-wide RBAC objects or the DeviceClass
// the chart renders; other kinds are created as createObject does.
func (c *Cluster) applyObject(ctx context.Context, raw map[string]any) error {
	doc, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	kind, _ := raw["kind"].(string)
	switch kind {
	case "ClusterRole":
		var o rbacv1.ClusterRole
		if err := json.Unmarshal(doc, &o); err != nil {
			return err
		}
		cur, err := c.Client.RbacV1().ClusterRoles().Get(ctx, o.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = c.Client.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
			return err
		} else if err != nil {
			return err
		}
		cur.Rules = o.Rules
		_, err = c.Client.RbacV1().ClusterRoles().Update(ctx, cur, metav1.UpdateOptions{})
		return err
	case "Role":
		var o rbacv1.Role
		if err := json.Unmarshal(doc, &o); err != nil {
			return err
		}
		cur, err := c.Client.RbacV1().Roles(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = c.Client.RbacV1().Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
			return err
		} else if err != nil {
			return err
		}
		cur.Rules = o.Rules
		_, err = c.Client.RbacV1().Roles(o.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	case "DeviceClass":
		var o resourcev1.DeviceClass
		if err := json.Unmarshal(doc, &o); err != nil {
			return err
		}
		_, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, &o, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		return err
	}
	err = c.createObject(ctx, raw)
	if apierrors.IsAlreadyExists(errors.Unwrap(err)) {
		return nil
	}
	return err
}
