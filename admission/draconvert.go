package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcev1client "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
)

// The webhook's adapter for the DRA conversion (dracard.go). With draConversion on, the
// mutating path is served by a Converter: a vGPU pod being created that its namespace
// (or, with podOptIn, its own annotation) sends to DRA nodes is routed as any vGPU pod,
// checked against the same rules the validating webhook applies (once converted it has
// no vGPU resources and the validating webhook no longer sees it), converted, and its
// templates made; every other review goes to the mutating Handler unchanged.

// NamespaceCardAPIs tells a namespace's api.AnnotationCardAPI, "" when it has none.
type NamespaceCardAPIs interface {
	NamespaceCardAPI(ctx context.Context, namespace string) (string, error)
}

// NamespaceCardAPI implements NamespaceCardAPIs from the same cache as the queues.
func (l *ListerQueues) NamespaceCardAPI(ctx context.Context, namespace string) (string, error) {
	ns, err := l.Lister.Get(namespace)
	if apierrors.IsNotFound(err) {
		ns, err = l.Client.Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	}
	if err != nil {
		return "", err
	}
	return ns.Annotations[api.AnnotationCardAPI], nil
}

// ClaimTemplates makes sure a conversion's template exists as the conversion wants it.
type ClaimTemplates interface {
	Ensure(ctx context.Context, want *resourcev1.ResourceClaimTemplate) error
}

// TemplateClient implements ClaimTemplates with the API: it creates a missing template
// and accepts an existing one only if its spec is the conversion's.
type TemplateClient struct {
	Client resourcev1client.ResourceClaimTemplatesGetter
}

// Ensure implements ClaimTemplates.
func (c *TemplateClient) Ensure(ctx context.Context, want *resourcev1.ResourceClaimTemplate) error {
	ts := c.Client.ResourceClaimTemplates(want.Namespace)
	got, err := ts.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		got, err = ts.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = ts.Get(ctx, want.Name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("ResourceClaimTemplate %s/%s: %w", want.Namespace, want.Name, err)
	}
	if !SameTemplate(got, want) {
		return fmt.Errorf("ResourceClaimTemplate %s/%s exists with a spec other than the conversion's (made by someone else, or the API server dropped fields: is DRAConsumableCapacity on?); delete it and create the pod again",
			want.Namespace, want.Name)
	}
	return nil
}

// Converter serves the mutating path when draConversion is on.
type Converter struct {
	// Mutate answers every review that is not converted.
	Mutate *Handler
	// CardAPIs reads namespaces' choice; Templates makes the templates. Without
	// Templates, a pod to convert is refused with the reason.
	CardAPIs  NamespaceCardAPIs
	Templates ClaimTemplates
}

func (c *Converter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		c.Mutate.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil || len(body) > maxReviewBytes {
		r.Body = io.NopCloser(bytes.NewReader(body))
		c.Mutate.ServeHTTP(w, r)
		return
	}
	out, converted := c.Review(r.Context(), body)
	if !converted {
		r.Body = io.NopCloser(bytes.NewReader(body))
		c.Mutate.ServeHTTP(w, r)
		return
	}
	writeReview(w, out)
}

// Review answers an AdmissionReview of a pod that goes to DRA nodes (converted or
// refused), and reports false for every other review, which the Handler answers.
func (c *Converter) Review(ctx context.Context, body []byte) (*admissionv1.AdmissionReview, bool) {
	in, err := DecodeReview(body)
	if err != nil || Operation(in.Request.Operation) != Create {
		return nil, false
	}
	req := in.Request
	pod, err := decodePod(req.Object.Raw, "object")
	if err != nil {
		return nil, false
	}
	pod.Namespace = req.Namespace
	p := c.Mutate.Policy
	if !p.IsVGPU(pod) {
		return nil, false
	}
	out := &admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Response: &admissionv1.AdmissionResponse{UID: req.UID}}
	refuse := func(code int32, reason metav1.StatusReason, msg string) (*admissionv1.AdmissionReview, bool) {
		klog.V(3).InfoS("Refused a vGPU pod for DRA nodes", "pod", klog.KRef(req.Namespace, podName(pod)), "reason", msg)
		out.Response.Result = &metav1.Status{Status: metav1.StatusFailure, Message: msg, Reason: reason, Code: code}
		return out, true
	}
	nsValue := ""
	if p.cfg.DRAConversion.Enabled {
		if nsValue, err = c.CardAPIs.NamespaceCardAPI(ctx, req.Namespace); err != nil {
			return refuse(http.StatusInternalServerError, metav1.StatusReasonInternalError,
				fmt.Sprintf("namespace %s: reading its %s: %v", req.Namespace, api.AnnotationCardAPI, err))
		}
	}
	toDRA, err := p.cfg.DRAConversion.WantsDRA(req.Namespace, nsValue, pod)
	if err != nil {
		return refuse(http.StatusForbidden, metav1.StatusReasonForbidden, err.Error())
	}
	if !toDRA {
		return nil, false
	}
	rv, err := c.Mutate.reviewOf(ctx, req)
	if err != nil {
		return refuse(http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
	}
	// The pod as routed is held to the same rules as any vGPU pod.
	routed := *rv.Pod
	if s := routed.Spec.SchedulerName; s == "" || s == defaultScheduler {
		routed.Spec.SchedulerName = p.cfg.SchedulerName
	}
	if d := p.Validate(Review{Operation: Create, Pod: &routed, NamespaceQueue: rv.NamespaceQueue}); !d.Allowed {
		return refuse(http.StatusForbidden, metav1.StatusReasonForbidden, d.Message)
	}
	conv, err := ConvertToClaims(pod, p.args.Resources, p.cfg.DRAConversion)
	if err != nil {
		return refuse(http.StatusForbidden, metav1.StatusReasonForbidden, SchedulerReason(pod, err))
	}
	dryRun := req.DryRun != nil && *req.DryRun
	if !dryRun {
		if c.Templates == nil {
			return refuse(http.StatusInternalServerError, metav1.StatusReasonInternalError,
				"the admission webhook was started without a ResourceClaimTemplate client, so it cannot convert pods for DRA nodes")
		}
		for i := range conv.Templates {
			if err := c.Templates.Ensure(ctx, &conv.Templates[i]); err != nil {
				return refuse(http.StatusForbidden, metav1.StatusReasonForbidden, err.Error())
			}
		}
	}
	patch := routingOps(p.Mutate(rv))
	patch = append(patch, ClaimPatch(pod, conv, p.args.Resources)...)
	b, err := json.Marshal(patch)
	if err != nil {
		return refuse(http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
	}
	pt := admissionv1.PatchTypeJSONPatch
	out.Response.Allowed, out.Response.Patch, out.Response.PatchType = true, b, &pt
	names := make([]string, len(conv.Templates))
	for i := range conv.Templates {
		names[i] = conv.Templates[i].Name
	}
	klog.V(3).InfoS("Converted a vGPU pod to claims for DRA nodes", "pod", klog.KRef(req.Namespace, podName(pod)),
		"templates", names, "dryRun", dryRun)
	return out, true
}

// routingOps keeps the routing of a Mutate decision (scheduler and queue) and the region
// volume with its mounts (the converted containers' claims are of the vGPU DeviceClass,
// whose limits name the region on that volume), leaving out the queue gate (the
// scheduler's gate is for vGPU pods).
func routingOps(d Decision) []PatchOp {
	var out []PatchOp
	for _, op := range d.Patch {
		if op.Path == "/spec/schedulerName" || strings.HasPrefix(op.Path, "/metadata/annotations") || isRegionOp(op.Path) {
			out = append(out, op)
		}
	}
	return out
}

// isRegionOp reports whether a patch path is one regionVolumeOps writes: the pod's
// volumes or a container's volume mounts.
func isRegionOp(path string) bool {
	if path == "/spec/volumes" || strings.HasPrefix(path, "/spec/volumes/") {
		return true
	}
	for _, list := range []string{"/spec/containers/", "/spec/initContainers/"} {
		if rest, ok := strings.CutPrefix(path, list); ok {
			_, field, _ := strings.Cut(rest, "/")
			if field == "volumeMounts" || strings.HasPrefix(field, "volumeMounts/") {
				return true
			}
		}
	}
	return false
}
