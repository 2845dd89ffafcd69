package admission

import (
	"fmt"
	"strings"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
)

// Names of the two webhooks in their configurations.
const (
	MutatingWebhookName   = "mutate.pods.tessera.io"
	ValidatingWebhookName = "validate.pods.tessera.io"
)

// MatchConditionName names the CEL condition that sends only vGPU pods to the webhook.
const MatchConditionName = "requests-vgpu"

// MatchExpression is the CEL test, evaluated by the API server, of the pods the webhook
// judges: IsVGPU (a container or init container names one of the resources in its limits
// or requests), or a pod being created that names ResourceClaims, whose class only the
// webhook can read (claims.go; an update of such a pod never waits on the webhook). With it, a CPU-only pod never waits on the webhook, even when the webhook
// is down and the failure policy is Fail. The chart renders the same expression (its
// tests compare).
func MatchExpression(n api.ResourceNames) string {
	var names []string
	for _, r := range []corev1.ResourceName{n.Number, n.Memory, n.MemoryPercentage, n.Cores} {
		names = append(names, fmt.Sprintf("'%s'", r))
	}
	list := "[" + strings.Join(names, ", ") + "]"
	asks := fmt.Sprintf("has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(r, r in %s)) || "+
		"(has(c.resources.requests) && c.resources.requests.exists(r, r in %s)))", list, list)
	return fmt.Sprintf("object.spec.containers.exists(c, %s) || "+
		"(has(object.spec.initContainers) && object.spec.initContainers.exists(c, %s)) || "+
		"(request.operation == 'CREATE' && has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)", asks, asks)
}

// Webhooks returns the mutating and the validating webhook as the chart registers them
// (rules, match condition, side effects, review versions), for client with the path
// filled in. The e2e harness registers exactly these.
func Webhooks(client admissionregv1.WebhookClientConfig, n api.ResourceNames, mutatingPolicy, validatingPolicy admissionregv1.FailurePolicyType,
	timeoutSeconds int32) (admissionregv1.MutatingWebhook, admissionregv1.ValidatingWebhook) {
	rule := func(ops ...admissionregv1.OperationType) []admissionregv1.RuleWithOperations {
		scope := admissionregv1.NamespacedScope
		return []admissionregv1.RuleWithOperations{{Operations: ops, Rule: admissionregv1.Rule{
			APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: &scope}}}
	}
	at := func(path string) admissionregv1.WebhookClientConfig {
		c := *client.DeepCopy()
		if c.Service != nil {
			c.Service.Path = &path
		} else if c.URL != nil {
			u := strings.TrimSuffix(*c.URL, "/") + path
			c.URL = &u
		}
		return c
	}
	match := []admissionregv1.MatchCondition{{Name: MatchConditionName, Expression: MatchExpression(n)}}
	none := admissionregv1.SideEffectClassNone
	// With draConversion on, the mutating webhook creates the claims' templates, except
	// on a dry run (draconvert.go).
	noneOnDryRun := admissionregv1.SideEffectClassNoneOnDryRun
	equivalent := admissionregv1.Equivalent
	never := admissionregv1.NeverReinvocationPolicy
	versions := []string{"v1"}
	m := admissionregv1.MutatingWebhook{Name: MutatingWebhookName, ClientConfig: at(PathMutate),
		Rules: rule(admissionregv1.Create), FailurePolicy: &mutatingPolicy, MatchPolicy: &equivalent,
		SideEffects: &noneOnDryRun, TimeoutSeconds: &timeoutSeconds, AdmissionReviewVersions: versions,
		ReinvocationPolicy: &never, MatchConditions: match}
	v := admissionregv1.ValidatingWebhook{Name: ValidatingWebhookName, ClientConfig: at(PathValidate),
		Rules: rule(admissionregv1.Create, admissionregv1.Update), FailurePolicy: &validatingPolicy, MatchPolicy: &equivalent,
		SideEffects: &none, TimeoutSeconds: &timeoutSeconds, AdmissionReviewVersions: versions, MatchConditions: match}
	return m, v
}
