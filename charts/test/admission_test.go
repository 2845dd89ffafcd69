package charttest

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tessera-gpu/tessera/admission"
	"github.com/tessera-gpu/tessera/api"
)

const admissionName = "gpu-tessera-admission"

// The chart registers exactly the webhooks admission.Webhooks describes (the ones the
// e2e scenario registers): rules, the CEL match condition for the configured resource
// names, failure policies, timeouts, review versions.
func TestAdmissionWebhooksAreTheOnesTheE2ERuns(t *testing.T) {
	for _, c := range []struct {
		values         string
		names          api.ResourceNames
		mutatingPolicy admissionregv1.FailurePolicyType
	}{
		{"testdata/admission-values.yaml", func() api.ResourceNames {
			n := api.DefaultResourceNames()
			n.Number = "example.com/vgpu"
			return n
		}(), admissionregv1.Fail},
		{"testdata/admission-certmanager-values.yaml", api.DefaultResourceNames(), admissionregv1.Ignore},
	} {
		r := MustRender(t, c.values)
		var m admissionregv1.MutatingWebhookConfiguration
		r.Get(t, "MutatingWebhookConfiguration", admissionName, &m)
		var v admissionregv1.ValidatingWebhookConfiguration
		r.Get(t, "ValidatingWebhookConfiguration", admissionName, &v)
		if len(m.Webhooks) != 1 || len(v.Webhooks) != 1 {
			t.Fatalf("%s: %d mutating and %d validating webhooks", c.values, len(m.Webhooks), len(v.Webhooks))
		}
		svc := admissionregv1.WebhookClientConfig{Service: &admissionregv1.ServiceReference{
			Namespace: "volcano-system", Name: admissionName, Port: ptr(int32(443))}}
		wantM, wantV := admission.Webhooks(svc, c.names, c.mutatingPolicy, admissionregv1.Fail, 10)
		wantM.NamespaceSelector, wantM.ObjectSelector = m.Webhooks[0].NamespaceSelector, m.Webhooks[0].ObjectSelector
		wantV.NamespaceSelector, wantV.ObjectSelector = v.Webhooks[0].NamespaceSelector, v.Webhooks[0].ObjectSelector
		if !reflect.DeepEqual(m.Webhooks[0], wantM) {
			t.Errorf("%s: mutating webhook\n got %+v\nwant %+v", c.values, m.Webhooks[0], wantM)
		}
		if !reflect.DeepEqual(v.Webhooks[0], wantV) {
			t.Errorf("%s: validating webhook\n got %+v\nwant %+v", c.values, v.Webhooks[0], wantV)
		}
		for _, sel := range []*admissionregv1.MutatingWebhook{&m.Webhooks[0]} {
			ex := sel.NamespaceSelector.MatchExpressions
			if len(ex) != 1 || ex[0].Key != "kubernetes.io/metadata.name" || !slices.Contains(ex[0].Values, "kube-system") ||
				!slices.Contains(ex[0].Values, "volcano-system") {
				t.Errorf("%s: namespaceSelector %+v does not leave out kube-system and the release namespace", c.values, sel.NamespaceSelector)
			}
		}
	}
}

func TestAdmissionSelfSignedRendersItsConfigSecretAndNarrowRBAC(t *testing.T) {
	r := MustRender(t, "testdata/admission-values.yaml")
	var cm corev1.ConfigMap
	r.Get(t, "ConfigMap", admissionName, &cm)
	cfg, err := admission.ParseConfig([]byte(cm.Data["admission.yaml"]))
	if err != nil {
		t.Fatalf("the webhook refuses the chart's configuration: %v\n%s", err, cm.Data["admission.yaml"])
	}
	if cfg.SchedulerName != "gpu-batch" || !slices.Equal(cfg.SchedulerNames, []string{"gpu-batch", "volcano"}) ||
		cfg.DefaultQueue != "batch" || cfg.ResourceNames().Number != "example.com/vgpu" || len(cfg.Limits) != 2 ||
		cfg.Limits[1].Namespace != "interns" || cfg.Limits[1].MaxCores != 50 {
		t.Errorf("configuration %+v", cfg)
	}

	var d appsv1.Deployment
	r.Get(t, "Deployment", admissionName, &d)
	ctr := d.Spec.Template.Spec.Containers[0]
	args := strings.Join(ctr.Args, " ")
	for _, want := range []string{
		"--self-signed-secret=volcano-system/gpu-tessera-admission-tls",
		"--self-signed-hosts=gpu-tessera-admission,gpu-tessera-admission.volcano-system,gpu-tessera-admission.volcano-system.svc",
		"--mutating-webhook-configuration=" + admissionName, "--validating-webhook-configuration=" + admissionName,
		"--config=/etc/tessera-admission/admission.yaml", "--listen-address=:8443",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args lack %s: %s", want, args)
		}
	}
	if !slices.Equal(ctr.Command, []string{"/usr/bin/tessera-admission"}) || !strings.HasPrefix(ctr.Image, "ghcr.io/tessera-gpu/vc-scheduler:") {
		t.Errorf("command %v, image %s: want the vc-scheduler image's second entrypoint", ctr.Command, ctr.Image)
	}
	if *d.Spec.Replicas != 2 || !subset(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("replicas %d, selector %v, labels %v", *d.Spec.Replicas, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	var s corev1.Service
	r.Get(t, "Service", admissionName, &s)
	if !subset(s.Spec.Selector, d.Spec.Template.Labels) || s.Spec.Ports[0].Port != 443 {
		t.Errorf("service selects %v on %v", s.Spec.Selector, s.Spec.Ports)
	}
	var m admissionregv1.MutatingWebhookConfiguration
	r.Get(t, "MutatingWebhookConfiguration", admissionName, &m)
	sel := m.Webhooks[0].NamespaceSelector
	if sel.MatchLabels["tessera.io/admission"] != "enabled" || !slices.Contains(sel.MatchExpressions[0].Values, "monitoring") {
		t.Errorf("namespaceSelector %+v lacks the chosen label or exclusion", sel)
	}

	var cr rbacv1.ClusterRole
	r.Get(t, "ClusterRole", admissionName, &cr)
	var role rbacv1.Role
	r.Get(t, "Role", admissionName, &role)
	got := map[string]bool{}
	for _, rules := range [][]rbacv1.PolicyRule{cr.Rules, role.Rules} {
		for _, rl := range rules {
			for _, res := range rl.Resources {
				for _, verb := range rl.Verbs {
					got[res+" "+verb+" "+strings.Join(rl.ResourceNames, ",")] = true
				}
			}
		}
	}
	want := map[string]bool{
		"namespaces get ": true, "namespaces list ": true, "namespaces watch ": true,
		"resourceclaims get ": true, "resourceclaims list ": true, "resourceclaimtemplates get ": true, "resourceclaimtemplates list ": true,
		"mutatingwebhookconfigurations get " + admissionName: true, "mutatingwebhookconfigurations update " + admissionName: true,
		"validatingwebhookconfigurations get " + admissionName: true, "validatingwebhookconfigurations update " + admissionName: true,
		"secrets create ": true, "secrets get gpu-tessera-admission-tls": true, "secrets update gpu-tessera-admission-tls": true,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("admission RBAC\n got %v\nwant %v", got, want)
	}
}

func TestAdmissionCertManagerMountsTheCertificateAndInjectsItsCA(t *testing.T) {
	r := MustRender(t, "testdata/admission-certmanager-values.yaml")
	kinds := r.Kinds()
	if kinds["Certificate"] != 1 || kinds["Issuer"] != 0 || r.Has("Role", admissionName) {
		// The webhook needs no Secret access.
		t.Errorf("kinds %v: want a Certificate from the given issuer, no Issuer, no Role for the webhook", kinds)
	}
	var d appsv1.Deployment
	r.Get(t, "Deployment", admissionName, &d)
	spec := d.Spec.Template.Spec
	args := strings.Join(spec.Containers[0].Args, " ")
	if !strings.Contains(args, "--tls-cert-file=/etc/tessera-admission/tls/tls.crt") || strings.Contains(args, "self-signed") {
		t.Errorf("args %s", args)
	}
	if spec.Containers[0].Image != "registry.example.com/tessera/vc-scheduler:v0.2.0" {
		t.Errorf("image %s", spec.Containers[0].Image)
	}
	var mounted bool
	for _, v := range spec.Volumes {
		mounted = mounted || (v.Secret != nil && v.Secret.SecretName == "gpu-tessera-admission-tls")
	}
	if !mounted {
		t.Errorf("the Certificate's Secret is not mounted: %+v", spec.Volumes)
	}
	for _, o := range r.Objs {
		switch o.GetKind() {
		case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
			if got := o.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != "volcano-system/"+admissionName {
				t.Errorf("%s: inject-ca-from %q", o.GetKind(), got)
			}
		case "Certificate":
			dns, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "dnsNames")
			if !slices.Contains(dns, "gpu-tessera-admission.volcano-system.svc") {
				t.Errorf("certificate names %v", dns)
			}
		}
	}
	// Without an issuer the chart brings a self-signed one.
	path := filepath.Join(t.TempDir(), "v.yaml")
	if err := os.WriteFile(path, []byte("admission: {enabled: true, tls: {mode: certManager}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if k := MustRender(t, path).Kinds(); k["Issuer"] != 1 || k["Certificate"] != 1 {
		t.Errorf("kinds %v: want a self-signed Issuer and its Certificate", k)
	}
}

// values.schema.json refuses bad admission values, naming them.
func TestAdmissionRefusesBadValuesNamingThem(t *testing.T) {
	for _, c := range []struct{ values, want string }{
		{"admission: {enabled: true, tls: {mode: vault}}", `admission.tls.mode must be one of the following: "selfSigned", "certManager"`},
		{"admission: {enabled: true, failurePolicy: {mutating: Retry}}", `admission.failurePolicy.mutating must be one of the following: "Fail", "Ignore"`},
		{"admission: {enabled: true, timeoutSeconds: 60}", "admission.timeoutSeconds: Must be less than or equal to 30"},
		{"admission: {enabled: true, config: {limits: [{maxCores: 150}]}}", "admission.config.limits.0.maxCores"},
		{"admission: {enabled: true, config: {limits: [{allowedQoS: [gold]}]}}", "admission.config.limits.0.allowedQoS.0"},
		{"admission: {enabled: true, confg: {}}", "confg"},
	} {
		path := filepath.Join(t.TempDir(), "v.yaml")
		if err := os.WriteFile(path, []byte(c.values+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Render(t, path, "volcano-system")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.values, err, c.want)
		}
	}
}

// The webhook's ServiceAccount exists without rbac.create, as the other components' do,
// and a named one is used by the Deployment and the bindings.
func TestAdmissionServiceAccountIsIndependentOfRBAC(t *testing.T) {
	for _, c := range []struct {
		values   string
		sa       string
		accounts int
		bindings int
	}{
		{"admission: {enabled: true}\nrbac: {create: false}\n", admissionName, 1, 0},
		{"admission: {enabled: true, serviceAccount: {name: webhook-sa}}\n", "webhook-sa", 1, 2},
		{"admission: {enabled: true, serviceAccount: {create: false, name: byo}}\n", "byo", 0, 2},
	} {
		path := filepath.Join(t.TempDir(), "v.yaml")
		if err := os.WriteFile(path, []byte(c.values), 0o644); err != nil {
			t.Fatal(err)
		}
		r := MustRender(t, path)
		var d appsv1.Deployment
		r.Get(t, "Deployment", admissionName, &d)
		if d.Spec.Template.Spec.ServiceAccountName != c.sa {
			t.Errorf("%q: the webhook runs as %q, want %q", c.values, d.Spec.Template.Spec.ServiceAccountName, c.sa)
		}
		accounts, bindings := 0, 0
		for _, o := range r.Objs {
			switch {
			case o.GetKind() == "ServiceAccount" && o.GetName() == c.sa:
				accounts++
			case (o.GetKind() == "ClusterRoleBinding" || o.GetKind() == "RoleBinding") && o.GetName() == admissionName:
				bindings++
				subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
				if len(subjects) != 1 || subjects[0].(map[string]interface{})["name"] != c.sa {
					t.Errorf("%q: %s binds %v, want %s", c.values, o.GetKind(), subjects, c.sa)
				}
			}
		}
		if accounts != c.accounts || bindings != c.bindings {
			t.Errorf("%q: %d ServiceAccounts named %s and %d bindings, want %d and %d", c.values, accounts, c.sa, bindings, c.accounts, c.bindings)
		}
	}
}

func ptr[T any](v T) *T { return &v }
