package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// Paths the webhook serves; the chart's webhook configurations name them.
const (
	PathMutate   = "/mutate-pods"
	PathValidate = "/validate-pods"
)

// maxReviewBytes bounds a request body: the API server's own limit on an object is
// 3 MiB, and a review of an Update carries the pod twice.
const maxReviewBytes = 7 << 20

// errBadReview is wrapped by every problem with an AdmissionReview itself (not with
// the pod under review); the handler answers it with HTTP 400.
var errBadReview = errors.New("bad AdmissionReview")

// NamespaceQueues tells a namespace's default queue (its PodQueueAnnotation), "" for
// none. The command's implementation reads an informer's cache.
type NamespaceQueues interface {
	NamespaceQueue(ctx context.Context, namespace string) (string, error)
}

// Handler answers the API server's AdmissionReviews for pods, mutating or validating.
type Handler struct {
	Policy     *Policy
	Namespaces NamespaceQueues
	// Claims reads the claims and templates of pods that name claims (claims.go); without
	// it such a pod being created is refused with the reason.
	Claims ClaimSpecs
	// Mutating picks Policy.Mutate; otherwise Policy.Validate.
	Mutating bool
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an admission.k8s.io/v1 AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		http.Error(w, fmt.Sprintf("Content-Type %q: want application/json", r.Header.Get("Content-Type")), http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > maxReviewBytes {
		http.Error(w, fmt.Sprintf("request body over %d bytes", maxReviewBytes), http.StatusRequestEntityTooLarge)
		return
	}
	out, err := h.Review(r.Context(), body)
	if err != nil {
		klog.V(2).InfoS("Refusing a malformed admission request", "err", err, "remote", r.RemoteAddr)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	writeReview(w, out)
}

// writeReview sends an AdmissionReview answer as JSON.
func writeReview(w http.ResponseWriter, out *admissionv1.AdmissionReview) {
	b, err := json.Marshal(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// Review answers one AdmissionReview, given as the JSON the API server posts. An error
// means the review itself is unusable; a pod the webhook refuses is an answer.
func (h *Handler) Review(ctx context.Context, body []byte) (*admissionv1.AdmissionReview, error) {
	in, err := DecodeReview(body)
	if err != nil {
		return nil, err
	}
	req := in.Request
	out := &admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Response: &admissionv1.AdmissionResponse{UID: req.UID}}
	rv, err := h.reviewOf(ctx, req)
	if err != nil {
		out.Response.Result = &metav1.Status{Status: metav1.StatusFailure, Message: err.Error(),
			Reason: metav1.StatusReasonBadRequest, Code: http.StatusBadRequest}
		var nsErr *namespaceError
		switch {
		case errors.As(err, &nsErr):
			out.Response.Result.Reason, out.Response.Result.Code = metav1.StatusReasonInternalError, http.StatusInternalServerError
		}
		klog.V(3).InfoS("Cannot review a pod", "pod", klog.KRef(req.Namespace, req.Name), "operation", req.Operation, "err", err)
		return out, nil
	}
	var d Decision
	if h.Mutating {
		d = h.Policy.Mutate(rv)
	} else {
		d = h.Policy.Validate(rv)
	}
	ref := klog.KRef(req.Namespace, podName(rv.Pod))
	if !d.Allowed {
		klog.V(3).InfoS("Refused a vGPU pod", "pod", ref, "operation", req.Operation, "reason", d.Message)
		out.Response.Result = &metav1.Status{Status: metav1.StatusFailure, Message: d.Message,
			Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden}
		return out, nil
	}
	out.Response.Allowed = true
	out.Response.Warnings = rv.ClaimWarnings
	if len(d.Patch) > 0 {
		patch, err := json.Marshal(d.Patch)
		if err != nil {
			return nil, err
		}
		pt := admissionv1.PatchTypeJSONPatch
		out.Response.Patch, out.Response.PatchType = patch, &pt
		klog.V(4).InfoS("Routed a vGPU pod", "pod", ref, "patch", string(patch))
	}
	return out, nil
}

// DecodeReview reads an admission.k8s.io/v1 AdmissionReview of a pod.
func DecodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadReview, err)
	}
	if in.APIVersion != admissionv1.SchemeGroupVersion.String() || in.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("%w: apiVersion %q, kind %q: want %s AdmissionReview", errBadReview, in.APIVersion, in.Kind,
			admissionv1.SchemeGroupVersion)
	}
	req := in.Request
	if req == nil {
		return nil, fmt.Errorf("%w: no request", errBadReview)
	}
	if req.UID == "" {
		return nil, fmt.Errorf("%w: request.uid is empty", errBadReview)
	}
	if req.Resource.Group != "" || req.Resource.Resource != "pods" || req.SubResource != "" {
		return nil, fmt.Errorf("%w: resource %q, subresource %q: this webhook reviews pods only", errBadReview,
			req.Resource.String(), req.SubResource)
	}
	return &in, nil
}

// namespaceError is a failure to read the namespace's default queue.
type namespaceError struct{ err error }

func (e *namespaceError) Error() string { return e.err.Error() }

func (h *Handler) reviewOf(ctx context.Context, req *admissionv1.AdmissionRequest) (Review, error) {
	rv := Review{Operation: Operation(req.Operation)}
	var err error
	if rv.Pod, err = decodePod(req.Object.Raw, "object"); err != nil {
		return rv, err
	}
	// A pod being created from generateName carries no namespace of its own.
	rv.Pod.Namespace = req.Namespace
	if rv.Operation == Update {
		if rv.OldPod, err = decodePod(req.OldObject.Raw, "oldObject"); err != nil {
			return rv, err
		}
	}
	if rv.Operation == Create {
		// A pod's claims cannot change after its creation, nor can its volumes.
		rv.VGPUClaims, rv.ClaimWarnings = h.Policy.VGPUClaimEntries(ctx, h.Claims, rv.Pod, req.DryRun != nil && *req.DryRun)
	}
	if h.Policy.needsNamespaceQueue(rv) {
		if rv.NamespaceQueue, err = h.Namespaces.NamespaceQueue(ctx, req.Namespace); err != nil {
			return rv, &namespaceError{fmt.Errorf("namespace %s: reading its default queue (%s): %w", req.Namespace, PodQueueAnnotation, err)}
		}
	}
	return rv, nil
}

func decodePod(raw []byte, field string) (*corev1.Pod, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("request.%s is empty", field)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		return nil, fmt.Errorf("request.%s is not a Pod: %w", field, err)
	}
	if pod.Kind != "" && pod.Kind != "Pod" {
		return nil, fmt.Errorf("request.%s: kind %q: want Pod", field, pod.Kind)
	}
	return &pod, nil
}

// needsNamespaceQueue reports whether a decision on the review reads the namespace's
// default queue: only for a vGPU pod that names no queue and is in no PodGroup.
func (p *Policy) needsNamespaceQueue(r Review) bool {
	if r.Pod == nil || !p.IsVGPU(r.Pod) || queueAnnotation(r.Pod) != "" {
		return false
	}
	_, grouped := r.Pod.Annotations[GroupAnnotation]
	return !grouped && (r.Operation == Create || r.Operation == Update)
}

func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName
}
