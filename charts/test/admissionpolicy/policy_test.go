// Package admissionpolicy evaluates the chart's ValidatingAdmissionPolicies with the API
// server's own policy machinery (k8s.io/apiserver's validating plugin: its CEL
// environment, variable composition, match conditions, validations and message
// expressions), compiled as a Kubernetes 1.30 API server compiles a new policy, and
// type-checks them against the built-in types' OpenAPI schemas as the API server's
// type-checking controller does. Every rule is tried on a request it must admit and on
// one it must refuse, and a refusal must name what it refuses.
//
// It is apart from the chart's other tests so that the API server's admission packages
// stay out of the binary that links Volcano's scheduler framework.
package admissionpolicy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/kubernetes/scheme"
	k8sopenapi "k8s.io/kubernetes/pkg/generated/openapi"

	"github.com/tessera-gpu/tessera/charts/test"
)

// The users of the default render (release gpu in volcano-system).
const (
	schedulerSA = "system:serviceaccount:volcano-system:gpu-tessera-scheduler"
	agentSA     = "system:serviceaccount:volcano-system:gpu-tessera-vgpu-device-plugin"
	tenant      = "alice"
	nodeClaim   = "authentication.kubernetes.io/node-name"
)

// compiledPolicy is a policy compiled as the API server's validating plugin compiles it
// (validating.compilePolicy, which is not exported).
type compiledPolicy struct {
	policy    *admissionregistrationv1.ValidatingAdmissionPolicy
	validator validating.Validator
}

// compile builds the policy's validator in the CEL environment of compatibility version
// 1.29: what a 1.30 API server (the first with ValidatingAdmissionPolicy GA) accepts
// in a new policy. A function or library introduced later fails to compile here.
func compile(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	t.Helper()
	env, err := plugincel.NewCompositionEnv(plugincel.VariablesTypeName, environment.MustBaseEnvSet(version.MajorMinor(1, 29), true))
	if err != nil {
		t.Fatal(err)
	}
	vars := plugincel.OptionalVariableDeclarations{HasAuthorizer: true, StrictCost: true}
	msgVars := plugincel.OptionalVariableDeclarations{StrictCost: true}
	c := plugincel.NewCompositedCompilerFromTemplate(env)
	var variables []plugincel.NamedExpressionAccessor
	for _, v := range p.Spec.Variables {
		variables = append(variables, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	c.CompileAndStoreVariables(variables, vars, environment.NewExpressions)
	var matcher matchconditions.Matcher
	if len(p.Spec.MatchConditions) > 0 {
		var mc []plugincel.ExpressionAccessor
		for i := range p.Spec.MatchConditions {
			mc = append(mc, (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i]))
		}
		matcher = matchconditions.NewMatcher(c.CompileCondition(mc, vars, environment.NewExpressions), p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	validations := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	return validating.NewValidator(c.CompileCondition(validations, vars, environment.NewExpressions), matcher,
		c.CompileCondition(nil, vars, environment.NewExpressions), c.CompileCondition(messages, msgVars, environment.NewExpressions),
		p.Spec.FailurePolicy)
}

// policies renders the chart with values and compiles every policy; it checks that each
// has a binding of the same name with the configured actions.
func policies(t *testing.T, values string) map[string]compiledPolicy {
	t.Helper()
	r, err := charttest.RenderValues(t, values)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	out := map[string]compiledPolicy{}
	bindings := map[string]admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for _, o := range r.Objs {
		switch o.GetKind() {
		case "ValidatingAdmissionPolicy":
			p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			r.Get(t, o.GetKind(), o.GetName(), p)
			out[p.Name] = compiledPolicy{policy: p, validator: compile(t, p)}
		case "ValidatingAdmissionPolicyBinding":
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			r.Get(t, o.GetKind(), o.GetName(), &b)
			bindings[b.Name] = b
		}
	}
	for name := range out {
		b, ok := bindings[name]
		if !ok || b.Spec.PolicyName != name || len(b.Spec.ValidationActions) == 0 {
			t.Errorf("policy %s has no binding of its name naming it with validation actions: %+v", name, b.Spec)
		}
	}
	if len(bindings) != len(out) {
		t.Errorf("%d bindings for %d policies", len(bindings), len(out))
	}
	return out
}

// request is one API request as admission sees it.
type request struct {
	op          admission.Operation
	resource    string // "pods", "nodes", "bindings"
	subresource string
	kind        string
	obj, old    runtime.Object
	user        string
	extra       map[string][]string
}

// matches reports whether a policy's resource rules select the request (group "", v1).
func matches(p *admissionregistrationv1.ValidatingAdmissionPolicy, r request) bool {
	res := r.resource
	if r.subresource != "" {
		res += "/" + r.subresource
	}
	for _, rule := range p.Spec.MatchConstraints.ResourceRules {
		var op, rs bool
		for _, o := range rule.Operations {
			op = op || string(o) == string(r.op) || o == admissionregistrationv1.OperationAll
		}
		for _, x := range rule.Resources {
			rs = rs || x == res
		}
		if op && rs {
			return true
		}
	}
	return false
}

// denyAll is the authorizer variable; no policy asks it.
type denyAll struct{}

func (denyAll) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", nil
}

// admit runs the request through every policy that selects it and returns the refusals
// ("policy: message"), and the names of the policies that saw it.
func admit(t *testing.T, ps map[string]compiledPolicy, r request) (refusals []string, saw []string) {
	t.Helper()
	obj := r.obj
	if obj == nil {
		obj = r.old
	}
	m, _ := meta.Accessor(obj)
	attr := admission.NewAttributesRecord(r.obj, r.old, schema.GroupVersionKind{Version: "v1", Kind: r.kind}, m.GetNamespace(), m.GetName(),
		schema.GroupVersionResource{Version: "v1", Resource: r.resource}, r.subresource, r.op, nil, false,
		&user.DefaultInfo{Name: r.user, Extra: r.extra})
	va := &admission.VersionedAttributes{Attributes: attr, VersionedKind: attr.GetKind(), VersionedObject: r.obj, VersionedOldObject: r.old}
	for name, p := range ps {
		if !matches(p.policy, r) {
			continue
		}
		saw = append(saw, name)
		res := p.validator.Validate(context.Background(), attr.GetResource(), va, nil, nil, 10_000_000, denyAll{})
		for _, d := range res.Decisions {
			if d.Action == validating.ActionDeny {
				refusals = append(refusals, name+": "+d.Message)
			}
		}
	}
	return refusals, saw
}

func vgpuPod(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID("uid-" + name),
			Annotations: map[string]string{"tessera.io/qos": "fixed-share"}},
		Spec: corev1.PodSpec{SchedulerName: "volcano", Containers: []corev1.Container{{
			Name: "train", Image: "pytorch",
			Env: []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				"volcano.sh/vgpu-number": resource.MustParse("1"), "volcano.sh/vgpu-memory": resource.MustParse("8000")}},
		}}},
	}
	for _, f := range mutate {
		f(p)
	}
	return p
}

func cpuPod(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := vgpuPod(name, mutate...)
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
	return p
}

func annotate(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		for i := 0; i < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func onNode(n string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

// bound is a vGPU pod the scheduler has bound to node-1 with an assignment.
func bound(mutate ...func(*corev1.Pod)) *corev1.Pod {
	return vgpuPod("bound", append([]func(*corev1.Pod){onNode("node-1"),
		annotate("tessera.io/assignment", `{"v":1}`, "tessera.io/assignment-signature", "v1.k.sig", "tessera.io/handoff", "pending")}, mutate...)...)
}

func createPod(p *corev1.Pod, who string) request {
	return request{op: admission.Create, resource: "pods", kind: "Pod", obj: p, user: who}
}

func updatePod(old, new *corev1.Pod, who string, extra map[string][]string) request {
	return request{op: admission.Update, resource: "pods", kind: "Pod", obj: new, old: old, user: who, extra: extra}
}

func on(node string) map[string][]string { return map[string][]string{nodeClaim: {node}} }

type tcase struct {
	name   string
	req    request
	refuse []string // substrings the refusal must hold; nil: admitted
}

func run(t *testing.T, ps map[string]compiledPolicy, cases []tcase) {
	t.Helper()
	for _, c := range cases {
		refusals, saw := admit(t, ps, c.req)
		if len(saw) == 0 {
			t.Errorf("%s: no policy selects %s %s/%s", c.name, c.req.op, c.req.resource, c.req.subresource)
			continue
		}
		switch {
		case c.refuse == nil && len(refusals) > 0:
			t.Errorf("%s: refused, want admitted:\n  %s", c.name, strings.Join(refusals, "\n  "))
		case c.refuse != nil && len(refusals) == 0:
			t.Errorf("%s: admitted (by %v), want refused", c.name, saw)
		case c.refuse != nil:
			all := strings.Join(refusals, "\n")
			for _, want := range c.refuse {
				if !strings.Contains(all, want) {
					t.Errorf("%s: refusal does not name %q:\n  %s", c.name, want, strings.Join(refusals, "\n  "))
				}
			}
			if strings.Contains(all, "compil") || strings.Contains(all, "no such key") || strings.Contains(all, "evaluation") {
				t.Errorf("%s: refused by an evaluation error, not by the rule:\n  %s", c.name, all)
			}
		}
	}
}

// (a) Tessera's annotations may not arrive with a pod; users' own tessera.io keys may.
func TestAPodMayNotBeCreatedWithTesserasAnnotations(t *testing.T) {
	ps := policies(t, "")
	cases := []tcase{
		{"a vGPU pod with the user's qos annotation", createPod(vgpuPod("ok"), tenant), nil},
		{"a CPU pod", createPod(cpuPod("cpu"), tenant), nil},
		{"a controller's pod without them", createPod(vgpuPod("rs"), "system:serviceaccount:kube-system:replicaset-controller"), nil},
	}
	for _, k := range []string{"tessera.io/assignment", "tessera.io/assignment-signature", "tessera.io/assigned-at", "tessera.io/handoff",
		"tessera.io/handoff-message", "volcano.sh/vgpu-ids-new", "volcano.sh/devices-to-allocate", "volcano.sh/vgpu-node",
		"volcano.sh/vgpu-time", "volcano.sh/bind-phase", "volcano.sh/bind-time"} {
		cases = append(cases,
			tcase{"a vGPU pod created with " + k, createPod(vgpuPod("forged", annotate(k, "x")), tenant), []string{"pod annotation " + k}},
			tcase{"a CPU pod created with " + k, createPod(cpuPod("forged", annotate(k, "x")), tenant), []string{k}},
			// Templates are copied by controllers: the policy does not trust the creator.
			tcase{"a ReplicaSet's pod with " + k, createPod(vgpuPod("forged", annotate(k, "x")), "system:serviceaccount:kube-system:replicaset-controller"), []string{k}},
		)
	}
	run(t, ps, cases)
}

// (b) A vGPU pod may not arrive already bound to a node.
func TestAVGPUPodMayNotBeCreatedOnANode(t *testing.T) {
	ps := policies(t, "devicePlugin:\n  config: {resourceName: example.com/vgpu}\nadmissionPolicy:\n  extraResourceNames: [example.com/gpu-slice]\n")
	initOnly := func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "warmup", Image: "x", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"volcano.sh/vgpu-cores": resource.MustParse("30")}}}}
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	}
	withResource := func(name string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(name): resource.MustParse("1")}}
		}
	}
	run(t, ps, []tcase{
		{"a vGPU pod for the scheduler", createPod(vgpuPod("ok"), tenant), nil},
		{"a CPU pod on a node", createPod(cpuPod("cpu", onNode("node-1")), tenant), nil},
		{"a vGPU pod on a node", createPod(vgpuPod("x", onNode("node-1")), tenant),
			[]string{"spec.nodeName (node-1)", "volcano.sh/vgpu-number", "volcano.sh/vgpu-memory"}},
		{"an init container's vGPU cores on a node", createPod(vgpuPod("x", initOnly, onNode("node-1")), tenant), []string{"volcano.sh/vgpu-cores"}},
		{"the configured resourceName on a node", createPod(vgpuPod("x", withResource("example.com/vgpu"), onNode("n")), tenant), []string{"example.com/vgpu"}},
		{"an extra resource name on a node", createPod(vgpuPod("x", withResource("example.com/gpu-slice"), onNode("n")), tenant), []string{"example.com/gpu-slice"}},
		{"vgpu-memory-percentage on a node", createPod(vgpuPod("x", withResource("volcano.sh/vgpu-memory-percentage"), onNode("n")), tenant),
			[]string{"volcano.sh/vgpu-memory-percentage"}},
	})
}

// (d) A vGPU pod may not set the hook's variables or preload a library of its own.
func TestAVGPUPodMayNotOverrideTheAgentsEnvironment(t *testing.T) {
	ps := policies(t, "")
	env := func(container string, names ...string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			c := corev1.Container{Name: container, Image: "x"}
			for _, n := range names {
				c.Env = append(c.Env, corev1.EnvVar{Name: n, Value: "1"})
			}
			if container == "train" {
				p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, c.Env...)
			} else {
				p.Spec.InitContainers = append(p.Spec.InitContainers, c)
			}
		}
	}
	run(t, ps, []tcase{
		{"ordinary env", createPod(vgpuPod("ok", env("train", "TESSERA", "MY_TESSERA_X", "PRELOAD")), tenant), nil},
		{"a CPU pod may preload", createPod(cpuPod("cpu", env("train", "LD_PRELOAD", "TESSERA_LOG_LEVEL")), tenant), nil},
		{"TESSERA_MEMORY_LIMIT", createPod(vgpuPod("x", env("train", "TESSERA_MEMORY_LIMIT")), tenant), []string{"train: TESSERA_MEMORY_LIMIT"}},
		{"LD_PRELOAD", createPod(vgpuPod("x", env("train", "LD_PRELOAD")), tenant), []string{"train: LD_PRELOAD"}},
		{"both, in an init container", createPod(vgpuPod("x", env("setup", "TESSERA_CORE_LIMIT", "LD_PRELOAD")), tenant),
			[]string{"setup: TESSERA_CORE_LIMIT, LD_PRELOAD"}},
	})
}

// (c) Only the scheduler changes its annotations; the agent only the handoff ones.
func TestOnlyTheSchedulerAndTheAgentChangeTheirPodAnnotations(t *testing.T) {
	ps := policies(t, "admissionPolicy:\n  extraSchedulerUsers: [system:serviceaccount:volcano-system:volcano-scheduler]\n")
	pending := vgpuPod("p")
	assigned := vgpuPod("p", annotate("tessera.io/assignment", `{"v":1}`, "tessera.io/handoff", "pending"))
	withHandoff := func(state string) *corev1.Pod {
		return bound(annotate("tessera.io/handoff", state))
	}
	relabelled := bound(func(p *corev1.Pod) { p.Labels = map[string]string{"team": "a"} })
	forged := bound(annotate("tessera.io/assignment", `{"v":1,"cards":["GPU-other"]}`))
	dropped := bound(func(p *corev1.Pod) { delete(p.Annotations, "tessera.io/assignment-signature") })
	status := func(r request) request { r.subresource = "status"; return r }
	run(t, ps, []tcase{
		{"the scheduler writes an assignment", updatePod(pending, assigned, schedulerSA, nil), nil},
		{"Volcano writes it back with a status update", status(updatePod(pending, assigned, schedulerSA, nil)), nil},
		{"an extra scheduler user (Volcano's, migrating)", updatePod(pending, assigned, "system:serviceaccount:volcano-system:volcano-scheduler", nil), nil},
		{"the agent marks the handoff done", updatePod(bound(), withHandoff("done"), agentSA, on("node-1")), nil},
		{"a tenant relabels its pod", updatePod(bound(), relabelled, tenant, nil), nil},
		{"a kubelet status update", status(updatePod(bound(), bound(), "system:node:node-1", nil)), nil},
		{"a tenant forges an assignment", updatePod(bound(), forged, tenant, nil), []string{"tessera.io/assignment", tenant}},
		{"a tenant removes the signature", updatePod(bound(), dropped, tenant, nil), []string{"tessera.io/assignment-signature"}},
		{"a tenant adds an assignment to a pending pod", updatePod(pending, assigned, tenant, nil), []string{"tessera.io/assignment", "tessera.io/handoff"}},
		{"a tenant marks the handoff done", updatePod(bound(), withHandoff("done"), tenant, nil), []string{"tessera.io/handoff", "scheduler or node agent"}},
		{"a tenant via pods/status", status(updatePod(bound(), forged, tenant, nil)), []string{"tessera.io/assignment"}},
		{"the agent rewrites the assignment", updatePod(bound(), forged, agentSA, on("node-1")), []string{"tessera.io/assignment", agentSA}},
		{"another ServiceAccount named like the scheduler in a tenant namespace",
			updatePod(bound(), forged, "system:serviceaccount:team-a:gpu-tessera-scheduler", nil), []string{"tessera.io/assignment"}},
	})
}

// A Binding's annotations reach the pod past pods UPDATE admission.
func TestOnlyTheSchedulerBindsWithAnAssignment(t *testing.T) {
	ps := policies(t, "")
	binding := func(ann map[string]string) *corev1.Binding {
		return &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team-a", Annotations: ann},
			Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}
	}
	bind := func(b *corev1.Binding, who, resource, sub string) request {
		return request{op: admission.Create, resource: resource, subresource: sub, kind: "Binding", obj: b, user: who}
	}
	ann := map[string]string{"tessera.io/assignment": "{}", "tessera.io/assignment-signature": "v1.k.s"}
	run(t, ps, []tcase{
		{"the scheduler binds with its assignment", bind(binding(ann), schedulerSA, "pods", "binding"), nil},
		{"another scheduler binds without one", bind(binding(nil), "system:kube-scheduler", "pods", "binding"), nil},
		{"another scheduler binds with one", bind(binding(ann), "system:kube-scheduler", "pods", "binding"),
			[]string{"tessera.io/assignment, tessera.io/assignment-signature", "system:kube-scheduler"}},
		{"the legacy bindings resource", bind(binding(ann), tenant, "bindings", ""), []string{"tessera.io/assignment"}},
	})
}

func node(name string, ann map[string]string, mutate ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann, Labels: map[string]string{"nvidia.com/gpu.present": "true"}}}
	for _, f := range mutate {
		f(n)
	}
	return n
}

func updateNode(old, new *corev1.Node, who string, extra map[string][]string) request {
	return request{op: admission.Update, resource: "nodes", kind: "Node", obj: new, old: old, user: who, extra: extra}
}

// The agent writes only its own Node's inventory, heartbeat, context reserves, MIG layout
// and card API.
func TestTheAgentChangesOnlyItsOwnNode(t *testing.T) {
	ps := policies(t, "")
	before := map[string]string{"tessera.io/inventory": "v1-old", "tessera.io/heartbeat": "t0", "other.io/x": "1"}
	after := map[string]string{"tessera.io/inventory": "v1-new", "tessera.io/heartbeat": "t1", "other.io/x": "1"}
	other := map[string]string{"tessera.io/inventory": "v1-old", "tessera.io/heartbeat": "t0", "other.io/x": "2"}
	compat := map[string]string{"tessera.io/inventory": "v1-old", "tessera.io/heartbeat": "t0", "other.io/x": "1",
		"volcano.sh/node-vgpu-register": "GPU-1,10,8000,100,NVIDIA,true:"}
	reserved := map[string]string{"tessera.io/inventory": "v1-new", "tessera.io/heartbeat": "t1", "other.io/x": "1",
		"tessera.io/context-reserve": `{"version":"v1","cards":{"GPU-1":518}}`}
	partitioned := map[string]string{"tessera.io/inventory": "v1-new", "tessera.io/heartbeat": "t1", "other.io/x": "1",
		"tessera.io/mig-instances": `{"version":"v1","cards":{}}`}
	draMode := map[string]string{"tessera.io/inventory": "v1-new", "tessera.io/heartbeat": "t1", "other.io/x": "1",
		"tessera.io/card-api": "dra"}
	devicePluginMode := map[string]string{"tessera.io/inventory": "v1-new", "tessera.io/heartbeat": "t1", "other.io/x": "1",
		"tessera.io/card-api": "device-plugin"}
	tainted := func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "evil", Effect: corev1.TaintEffectNoSchedule}}
	}
	relabelled := func(n *corev1.Node) { n.Labels["node-role.kubernetes.io/control-plane"] = "" }
	run(t, ps, []tcase{
		{"the agent publishes its inventory", updateNode(node("node-1", before), node("node-1", after), agentSA, on("node-1")), nil},
		{"the agent publishes its context reserves", updateNode(node("node-1", before), node("node-1", reserved), agentSA, on("node-1")), nil},
		{"the agent removes its context reserves", updateNode(node("node-1", reserved), node("node-1", after), agentSA, on("node-1")), nil},
		{"the agent publishes its MIG layout", updateNode(node("node-1", before), node("node-1", partitioned), agentSA, on("node-1")), nil},
		{"the agent shows its card API", updateNode(node("node-1", before), node("node-1", draMode), agentSA, on("node-1")), nil},
		{"the agent restarted in the other mode changes its card API", updateNode(node("node-1", draMode), node("node-1", devicePluginMode), agentSA, on("node-1")), nil},
		{"the agent shows its card API on another node", updateNode(node("node-2", before), node("node-2", draMode), agentSA, on("node-1")),
			[]string{"node-1 may only change its own Node, not node-2"}},
		{"the kubelet updates its node", updateNode(node("node-1", before), node("node-1", other), "system:node:node-1", nil), nil},
		{"the agent writes another node", updateNode(node("node-2", before), node("node-2", after), agentSA, on("node-1")),
			[]string{"node-1 may only change its own Node, not node-2"}},
		{"the agent's token has no node claim", updateNode(node("node-1", before), node("node-1", after), agentSA, nil),
			[]string{"no node claim", nodeClaim}},
		{"the agent writes another annotation", updateNode(node("node-1", before), node("node-1", other), agentSA, on("node-1")),
			[]string{"not other.io/x"}},
		{"the agent taints its node", updateNode(node("node-1", before), node("node-1", before, tainted), agentSA, on("node-1")),
			[]string{"spec (taints"}},
		{"the agent relabels its node", updateNode(node("node-1", before), node("node-1", before, relabelled), agentSA, on("node-1")),
			[]string{"labels"}},
		{"compatibility annotations without volcanoCompat", updateNode(node("node-1", before), node("node-1", compat), agentSA, on("node-1")),
			[]string{"volcano.sh/node-vgpu-register"}},
	})
	run(t, policies(t, "devicePlugin:\n  config: {volcanoCompat: true}\n"), []tcase{
		{"compatibility annotations with volcanoCompat", updateNode(node("node-1", before), node("node-1", compat), agentSA, on("node-1")), nil},
	})
}

// The card cordons are an administrator's word on the agent's own node: the agent may
// neither cordon a card nor lift a cordon (an agent taken over could put a failing card
// back in service); an administrator writes them (the policy matches only the agent).
func TestTheAgentMayNotCordonOrUncordonCards(t *testing.T) {
	ps := policies(t, "")
	const key = "tessera.io/cordoned-cards"
	plain := map[string]string{"tessera.io/inventory": "v1", "tessera.io/heartbeat": "t0"}
	cordoned := map[string]string{"tessera.io/inventory": "v1", "tessera.io/heartbeat": "t0",
		key: `{"version":"v1","cards":{"GPU-1":{"reason":"ECC","since":"2026-03-01T12:00:00Z"}}}`}
	republished := map[string]string{"tessera.io/inventory": "v2", "tessera.io/heartbeat": "t1", key: cordoned[key]}
	run(t, ps, []tcase{
		{"the agent cordons a card of its node", updateNode(node("node-1", plain), node("node-1", cordoned), agentSA, on("node-1")),
			[]string{"not " + key}},
		{"the agent lifts a cordon on its node", updateNode(node("node-1", cordoned), node("node-1", plain), agentSA, on("node-1")),
			[]string{"not " + key}},
		{"the agent republishes its inventory beside a cordon", updateNode(node("node-1", cordoned), node("node-1", republished), agentSA, on("node-1")), nil},
		{"an administrator cordons a card", updateNode(node("node-1", plain), node("node-1", cordoned), "kubernetes-admin", nil), nil},
	})
}

// The agent writes only the handoff annotations of the pods bound to its node.
func TestTheAgentChangesOnlyThePodsOfItsNode(t *testing.T) {
	ps := policies(t, "")
	done := bound(annotate("tessera.io/handoff", "done"))
	failed := bound(annotate("tessera.io/handoff", "failed", "tessera.io/handoff-message", "no card"))
	elsewhere := func(p *corev1.Pod) { p.Spec.NodeName = "node-2" }
	image := bound(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil" })
	labelled := bound(func(p *corev1.Pod) { p.Labels = map[string]string{"x": "y"} })
	userKey := bound(annotate("tessera.io/qos", "burst-share"))
	run(t, ps, []tcase{
		{"the agent marks a pod of its node done", updatePod(bound(), done, agentSA, on("node-1")), nil},
		{"the agent marks a failure with a message", updatePod(bound(), failed, agentSA, on("node-1")), nil},
		{"the agent clears the message", updatePod(failed, done, agentSA, on("node-1")), nil},
		{"the agent marks a pod of another node", updatePod(bound(elsewhere), bound(elsewhere, annotate("tessera.io/handoff", "done")), agentSA, on("node-1")),
			[]string{"may only change pods bound to it", "on node node-2"}},
		{"the agent marks an unbound pod", updatePod(vgpuPod("p"), vgpuPod("p", annotate("tessera.io/handoff", "done")), agentSA, on("node-1")),
			[]string{"may only change pods bound to it", "(not bound)"}},
		{"the agent without a node claim", updatePod(bound(), done, agentSA, nil), []string{"no node claim"}},
		{"the agent changes a user annotation", updatePod(bound(), userKey, agentSA, on("node-1")), []string{"not tessera.io/qos"}},
		{"the agent changes an image", updatePod(bound(), image, agentSA, on("node-1")), []string{"spec"}},
		{"the agent labels a pod", updatePod(bound(), labelled, agentSA, on("node-1")), []string{"labels"}},
	})
}

func slice(name, node, driver string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node, Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}}}
}

func sliceRequest(op admission.Operation, old, new *resourceapi.ResourceSlice, who string, extra map[string][]string) request {
	r := request{op: op, resource: "resourceslices", kind: "ResourceSlice", user: who, extra: extra}
	if new != nil {
		r.obj = new
	}
	if old != nil {
		r.old = old
	}
	return r
}

// With cardAPI dra the agent writes only the vgpu.tessera.io ResourceSlices of its own
// node; the kubelet and other drivers are not its policy's business. Without dra the
// policy is not rendered: the agent's role grants no ResourceSlices at all then.
func TestTheAgentWritesOnlyItsOwnNodesResourceSlices(t *testing.T) {
	ps := policies(t, "devicePlugin:\n  config: {cardAPI: dra}\n")
	own, own2 := slice("node-1-vgpu-x1", "node-1", "vgpu.tessera.io"), slice("node-1-vgpu-x1", "node-1", "vgpu.tessera.io")
	own2.Spec.Pool.Generation = 2
	other := slice("node-2-vgpu-x1", "node-2", "vgpu.tessera.io")
	nvidia := slice("node-1-gpu-x1", "node-1", "gpu.nvidia.com")
	run(t, ps, []tcase{
		{"the agent publishes its node's slice", sliceRequest(admission.Create, nil, own, agentSA, on("node-1")), nil},
		{"the agent updates its node's slice", sliceRequest(admission.Update, own, own2, agentSA, on("node-1")), nil},
		{"the agent deletes its node's slice", sliceRequest(admission.Delete, own, nil, agentSA, on("node-1")), nil},
		{"the agent publishes a slice for another node", sliceRequest(admission.Create, nil, other, agentSA, on("node-1")),
			[]string{"node-1 may only write ResourceSlices of driver vgpu.tessera.io on its own node, not ResourceSlice node-2-vgpu-x1"}},
		{"the agent deletes another node's slice", sliceRequest(admission.Delete, other, nil, agentSA, on("node-1")),
			[]string{"not ResourceSlice node-2-vgpu-x1"}},
		{"the agent moves its slice to another node", sliceRequest(admission.Update, own, other, agentSA, on("node-1")),
			[]string{"on its own node"}},
		{"the agent writes another driver's slice on its node", sliceRequest(admission.Update, nvidia, nvidia, agentSA, on("node-1")),
			[]string{"not ResourceSlice node-1-gpu-x1"}},
		{"the agent's token has no node claim", sliceRequest(admission.Create, nil, own, agentSA, nil), []string{"no node claim"}},
	})
	if refusals, saw := admit(t, ps, sliceRequest(admission.Create, nil, other, "system:node:node-2", nil)); len(refusals) > 0 || len(saw) == 0 {
		t.Errorf("the kubelet of node-2 writing a slice: refusals %v (policies %v), want the agent's policy to pass it by", refusals, saw)
	}
	if _, ok := policies(t, "")["gpu-tessera-agent-resourceslices"]; ok {
		t.Error("the ResourceSlice policy is rendered in device-plugin mode")
	}
}

// Turned off, nothing is rendered; the agent's node scope alone can be turned off.
func TestThePoliciesCanBeTurnedOffAndTheirActionsSet(t *testing.T) {
	if ps := policies(t, "admissionPolicy: {enabled: false}\n"); len(ps) != 0 {
		t.Errorf("admissionPolicy.enabled=false renders %d policies", len(ps))
	}
	ps := policies(t, "admissionPolicy: {restrictAgentToItsNode: false}\n")
	if _, ok := ps["gpu-tessera-agent-node"]; ok || len(ps) != 3 {
		t.Errorf("restrictAgentToItsNode=false renders %v", keys(ps))
	}
	if ps := policies(t, ""); len(ps) != 5 {
		t.Errorf("default policies %v, want pod-create, pod-update, pod-binding, agent-node, agent-pods", keys(ps))
	}
	r, err := charttest.RenderValues(t, "admissionPolicy: {validationActions: [Warn, Audit]}\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range r.Objs {
		if o.GetKind() == "ValidatingAdmissionPolicyBinding" {
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			r.Get(t, o.GetKind(), o.GetName(), &b)
			if fmt.Sprint(b.Spec.ValidationActions) != "[Warn Audit]" {
				t.Errorf("%s: actions %v", b.Name, b.Spec.ValidationActions)
			}
		}
	}
	if _, err := charttest.RenderValues(t, "admissionPolicy: {validationActions: [Allow]}\n"); err == nil {
		t.Error("the schema accepts validationActions [Allow]")
	}
}

func keys(m map[string]compiledPolicy) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}

// Every expression type-checks against the OpenAPI schemas of the kinds the policy
// selects, as the API server's type-checking controller does (it writes what it finds
// to status.typeChecking): no misspelt field, no wrong type, where an evaluation on an
// object without the field would silently pass.
func TestThePoliciesTypeCheckAgainstTheKubernetesSchemas(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper(nil)
	for _, k := range []string{"Pod", "Node", "Binding"} {
		mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: k}, meta.RESTScopeNamespace)
	}
	mapper.Add(schema.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceSlice"}, meta.RESTScopeRoot)
	tc := &validating.TypeChecker{SchemaResolver: resolver.NewDefinitionsSchemaResolver(k8sopenapi.GetOpenAPIDefinitions, scheme.Scheme),
		RestMapper: mapper}
	for _, values := range []string{"", "devicePlugin:\n  config: {volcanoCompat: true}\n", "devicePlugin:\n  config: {cardAPI: dra}\n"} {
		for name, p := range policies(t, values) {
			ctx := tc.CreateContext(p.policy)
			checked := 0
			// Check alone skips the variables (a variable that does not type-check becomes
			// dyn), so each variable's expression is checked as an expression too.
			var exprs []string
			for _, v := range p.policy.Spec.Variables {
				exprs = append(exprs, v.Expression)
			}
			for _, m := range p.policy.Spec.MatchConditions {
				exprs = append(exprs, m.Expression)
			}
			for _, v := range p.policy.Spec.Validations {
				exprs = append(exprs, v.Expression, v.MessageExpression)
			}
			{
				for _, e := range exprs {
					if e == "" {
						continue
					}
					checked++
					if res := tc.CheckExpression(ctx, e); len(res) > 0 && res.String() != "" {
						t.Errorf("%s: %s\n  %s", name, strings.TrimSpace(e), res)
					}
				}
			}
			for _, w := range tc.Check(p.policy) {
				t.Errorf("%s: %s: %s", name, w.FieldRef, w.Warning)
			}
			if checked == 0 {
				t.Errorf("%s: nothing type-checked", name)
			}
		}
	}
}

// With only one of the components installed (a migration), the policies still compile
// and name the users they should: Volcano's scheduler as an extra scheduler user, no
// agent rules without an agent.
func TestThePoliciesWithOneComponent(t *testing.T) {
	volcano := "system:serviceaccount:volcano-system:volcano-scheduler"
	ps := policies(t, "scheduler: {enabled: false}\nadmissionPolicy:\n  extraSchedulerUsers: ["+volcano+"]\n")
	pending := vgpuPod("p")
	assigned := vgpuPod("p", annotate("volcano.sh/vgpu-ids-new", "GPU-1,NVIDIA,8000,30:;"))
	run(t, ps, []tcase{
		{"Volcano's scheduler writes its card list", updatePod(pending, assigned, volcano, nil), nil},
		{"the uninstalled Tessera scheduler's account may not", updatePod(pending, assigned, schedulerSA, nil), []string{"volcano.sh/vgpu-ids-new"}},
		{"the agent marks the handoff", updatePod(bound(), bound(annotate("tessera.io/handoff", "done")), agentSA, on("node-1")), nil},
	})
	ps = policies(t, "devicePlugin: {enabled: false}\n")
	if _, ok := ps["gpu-tessera-agent-pods"]; ok || len(ps) != 3 {
		t.Errorf("without the agent: %v", keys(ps))
	}
	run(t, ps, []tcase{
		{"no agent: its old account may not mark a handoff", updatePod(bound(), bound(annotate("tessera.io/handoff", "done")), agentSA, on("node-1")),
			[]string{"tessera.io/handoff"}},
		{"the scheduler still may", updatePod(pending, vgpuPod("p", annotate("tessera.io/assignment", "{}")), schedulerSA, nil), nil},
	})
}
