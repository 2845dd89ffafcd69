package charttest

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/tessera-gpu/tessera/admission"
)

// admission.config.draConversion reaches the webhook's configuration as the webhook reads
// it, and only with it enabled may the webhook get and create ResourceClaimTemplates (the
// claims' templates it makes in the converted pods' namespaces); nothing else is added.
func TestAdmissionDRAConversionRendersItsConfigAndTemplateRBAC(t *testing.T) {
	for _, c := range []struct {
		name, values string
		want         admission.DRAConversion
		templates    bool
	}{
		{"off by default", "admission: {enabled: true}\n", admission.DefaultConfig().DRAConversion, false},
		{"enabled with a card size", "admission: {enabled: true, config: {draConversion: {enabled: true, podOptIn: true, cardMemoryMiB: 24576}}}\n",
			func() admission.DRAConversion {
				d := admission.DefaultConfig().DRAConversion
				d.Enabled, d.PodOptIn, d.CardMemoryMiB = true, true, 24576
				return d
			}(), true},
		{"enabled with its own class and minimum", "admission: {enabled: true, config: {draConversion: {enabled: true, deviceClassName: gpu-shares, minMemoryMiB: 512}}}\n",
			admission.DRAConversion{Enabled: true, DeviceClassName: "gpu-shares", MinMemoryMiB: 512}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := RenderValues(t, c.values)
			if err != nil {
				t.Fatal(err)
			}
			var cm corev1.ConfigMap
			r.Get(t, "ConfigMap", admissionName, &cm)
			cfg, err := admission.ParseConfig([]byte(cm.Data["admission.yaml"]))
			if err != nil {
				t.Fatalf("the webhook refuses the chart's configuration: %v\n%s", err, cm.Data["admission.yaml"])
			}
			if cfg.DRAConversion != c.want {
				t.Errorf("draConversion %+v, want %+v\n%s", cfg.DRAConversion, c.want, cm.Data["admission.yaml"])
			}
			var cr rbacv1.ClusterRole
			r.Get(t, "ClusterRole", admissionName, &cr)
			var got []string
			for _, rl := range cr.Rules {
				if slices.Contains(rl.APIGroups, "resource.k8s.io") {
					got = append(got, strings.Join(rl.Resources, ",")+" "+strings.Join(rl.Verbs, ","))
				}
			}
			// Every release reads the claims and templates pods name (their class decides
			// the region volume); the conversion also creates templates.
			want := []string{"resourceclaims,resourceclaimtemplates get,list"}
			if c.templates {
				want = append(want, "resourceclaimtemplates create")
			}
			if !slices.Equal(got, want) {
				t.Errorf("resource.k8s.io rules %v, want %v", got, want)
			}
		})
	}
	if _, err := RenderValues(t, "admission: {enabled: true, config: {draConversion: {enabled: true, cardMemory: 1}}}\n"); err == nil ||
		!strings.Contains(err.Error(), "cardMemory") {
		t.Errorf("a misspelt draConversion value: %v", err)
	}
}
