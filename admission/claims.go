package admission

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcev1client "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
)

// Pods that ask for cards through ResourceClaims name no vGPU resource: whether one of
// their claim entries stands for a claim of the vGPU DeviceClass is in the claim or the
// template it names, which the webhook reads with ClaimSpecs. The answer
// (Review.VGPUClaims) decides whether the pod gets the region volume (region.go).

// ClaimSpecs reads the spec of a ResourceClaim or a ResourceClaimTemplate of a namespace.
// A missing object is an error for which apierrors.IsNotFound holds.
type ClaimSpecs interface {
	ClaimSpec(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaimSpec, error)
	TemplateSpec(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaimSpec, error)
}

// ClaimClient implements ClaimSpecs with the API (get on resourceclaims and
// resourceclaimtemplates). It reads the API server, not a cache: a template is often
// created a moment before its first pod.
type ClaimClient struct {
	Client interface {
		resourcev1client.ResourceClaimsGetter
		resourcev1client.ResourceClaimTemplatesGetter
	}
}

// ClaimSpec implements ClaimSpecs.
func (c *ClaimClient) ClaimSpec(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaimSpec, error) {
	rc, err := c.Client.ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return &rc.Spec, nil
}

// TemplateSpec implements ClaimSpecs.
func (c *ClaimClient) TemplateSpec(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaimSpec, error) {
	t, err := c.Client.ResourceClaimTemplates(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return &t.Spec.Spec, nil
}

// errNoClaimReader is the warning of a webhook started without ClaimSpecs.
var errNoClaimReader = errors.New("the admission webhook was started without a ResourceClaim reader, so it cannot tell whether the pod's claims need Tessera's region volume")

// vgpuClass is the DeviceClass whose claims keep a region: the class the conversion
// writes, the chart's api.DRADriver by default.
func (p *Policy) vgpuClass() string {
	if c := p.cfg.DRAConversion.DeviceClassName; c != "" {
		return c
	}
	return api.DRADriver
}

// VGPUClaimEntries reads the claim or template behind each of a pod's claim entries
// (spec.resourceClaims) and returns the entries whose spec asks for a device of the vGPU
// DeviceClass, nil for a pod without claims. An entry that names neither a claim nor a
// template is left to the API server's validation, which refuses it. An entry whose class
// cannot be read (the claim or template does not exist yet, the API server does not
// answer, no reader) counts as not of the vGPU class, with a warning for the pod's
// author: the pod is admitted without the region volume, which costs its claims their
// usage series only (the agent then keeps their region in the pod's /dev/shm, and a
// lookalike volume is refused there too, api.CheckRegionVolume), while refusing would
// hold back the claim pods of every driver while the API server or the webhook's RBAC
// misbehaves. One exception: on a dry run, a missing template named as the DRA
// conversion names its templates (ClaimTemplatePrefix) is the conversion's, which makes
// none on a dry run.
func (p *Policy) VGPUClaimEntries(ctx context.Context, specs ClaimSpecs, pod *corev1.Pod, dryRun bool) (entries map[string]bool, warnings []string) {
	if len(pod.Spec.ResourceClaims) == 0 {
		return nil, nil
	}
	if specs == nil {
		return nil, []string{errNoClaimReader.Error() + "; the pod gets no region volume"}
	}
	out := map[string]bool{}
	for i, prc := range pod.Spec.ResourceClaims {
		var (
			kind, name string
			spec       *resourcev1.ResourceClaimSpec
			err        error
		)
		switch {
		case prc.ResourceClaimName != nil:
			kind, name = "ResourceClaim", *prc.ResourceClaimName
			spec, err = specs.ClaimSpec(ctx, pod.Namespace, name)
		case prc.ResourceClaimTemplateName != nil:
			kind, name = "ResourceClaimTemplate", *prc.ResourceClaimTemplateName
			spec, err = specs.TemplateSpec(ctx, pod.Namespace, name)
		default:
			continue
		}
		if err != nil {
			at := fmt.Sprintf("spec.resourceClaims[%d] (%q): %s %s/%s", i, prc.Name, kind, pod.Namespace, name)
			if apierrors.IsNotFound(err) && dryRun && kind == "ResourceClaimTemplate" && strings.HasPrefix(name, ClaimTemplatePrefix) {
				out[prc.Name] = true
				continue
			}
			if apierrors.IsNotFound(err) {
				warnings = append(warnings, fmt.Sprintf("%s does not exist yet: if it asks for Tessera's cards, the pod's containers keep their accounting region in /dev/shm and report no usage (create claims and templates before their pods)", at))
			} else {
				warnings = append(warnings, fmt.Sprintf("%s: reading its device class: %v; the pod gets no region volume for it", at, err))
			}
			klog.InfoS("Admitting a claim pod without knowing its claim's device class", "pod", klog.KRef(pod.Namespace, pod.Name), "claim", at, "err", err)
			continue
		}
		if ClaimRequestsClass(spec, p.vgpuClass()) {
			out[prc.Name] = true
		}
	}
	return out, warnings
}
