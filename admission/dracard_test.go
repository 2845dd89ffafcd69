package admission

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	internalresource "k8s.io/kubernetes/pkg/apis/resource"
	resourcev1conv "k8s.io/kubernetes/pkg/apis/resource/v1"
	"k8s.io/kubernetes/pkg/apis/resource/validation"
	"k8s.io/kubernetes/pkg/features"

	"github.com/tessera-gpu/tessera/api"
)

func conversionOn() DRAConversion {
	d := DefaultConfig().DRAConversion
	d.Enabled = true
	return d
}

// shape is what a template asks of each card, read back from it.
type shape struct {
	name        string
	count       int64
	memory      string // "" when the template names none (all of the card)
	cores       string
	distinct    bool
	cardSizeCEL string
}

func shapeOf(t *testing.T, tmpl resourcev1.ResourceClaimTemplate) shape {
	t.Helper()
	reqs := tmpl.Spec.Spec.Devices.Requests
	if len(reqs) != 1 || reqs[0].Exactly == nil || reqs[0].Name != claimRequestName {
		t.Fatalf("template %s: requests %+v, want one exact request %q", tmpl.Name, reqs, claimRequestName)
	}
	e := reqs[0].Exactly
	if e.DeviceClassName != api.DRADriver || e.AllocationMode != resourcev1.DeviceAllocationModeExactCount || e.AdminAccess != nil {
		t.Errorf("template %s: class %q, mode %q, admin access %v", tmpl.Name, e.DeviceClassName, e.AllocationMode, e.AdminAccess)
	}
	if tmpl.Labels[ManagedByLabel] != ManagedByValue {
		t.Errorf("template %s: labels %v", tmpl.Name, tmpl.Labels)
	}
	s := shape{name: tmpl.Name, count: e.Count}
	if m, ok := e.Capacity.Requests[api.DRACapacityMemory]; ok {
		s.memory = m.String()
	}
	c := e.Capacity.Requests[api.DRACapacityCores]
	s.cores = c.String()
	for _, k := range tmpl.Spec.Spec.Devices.Constraints {
		s.distinct = k.DistinctAttribute != nil && string(*k.DistinctAttribute) == api.DRADriver+"/uuid"
	}
	for _, sel := range e.Selectors {
		s.cardSizeCEL = sel.CEL.Expression
	}
	return s
}

func TestConvertToClaimsAsksForWhatTheDevicePluginPathGives(t *testing.T) {
	enableDRAGates(t)
	a30 := conversionOn()
	a30.CardMemoryMiB = 24576
	sidecar := map[string]int64{"cpu": 1}
	for _, c := range []struct {
		name  string
		conf  DRAConversion
		pod   *corev1.Pod
		want  []shape
		claim []string // each container's claim, "" for none
	}{
		{"one card of 4096 MiB and 30 cores becomes a claim of that share", conversionOn(),
			vgpuPod(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemory: 4096, api.ResourceCores: 30}),
			[]shape{{name: "tessera-vgpu-1x-4096mi-30c", count: 1, memory: "4Gi", cores: "30"}}, []string{"tessera-vgpu-0"}},
		{"a card count alone takes all of the card's memory and reserves no cores", conversionOn(),
			vgpuPod(nil, map[string]int64{api.ResourceNumber: 1}),
			[]shape{{name: "tessera-vgpu-1x-whole-0c", count: 1, cores: "0"}}, []string{"tessera-vgpu-0"}},
		{"two cards ask for two distinct cards of that share", conversionOn(),
			vgpuPod(nil, map[string]int64{api.ResourceNumber: 2, api.ResourceMemory: 8192, api.ResourceCores: 50}),
			[]shape{{name: "tessera-vgpu-2x-8192mi-50c", count: 2, memory: "8Gi", cores: "50", distinct: true}}, []string{"tessera-vgpu-0"}},
		{"100 cores asks for whole cards, whatever memory it names", conversionOn(),
			vgpuPod(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemory: 4096, api.ResourceCores: 100}),
			[]shape{{name: "tessera-vgpu-1x-whole-100c", count: 1, cores: "100"}}, []string{"tessera-vgpu-0"}},
		{"100 percent of the memory is the whole card without a card size", conversionOn(),
			vgpuPod(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemoryPercentage: 100, api.ResourceCores: 20}),
			[]shape{{name: "tessera-vgpu-1x-whole-20c", count: 1, cores: "20"}}, []string{"tessera-vgpu-0"}},
		{"a percentage becomes MiB of the configured card size, on cards of that size only", a30,
			vgpuPod(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemoryPercentage: 50, api.ResourceCores: 50}),
			[]shape{{name: "tessera-vgpu-1x-50pct-of-24576mi-50c", count: 1, memory: "12Gi", cores: "50",
				cardSizeCEL: `device.capacity["vgpu.tessera.io"].memory.compareTo(quantity("24576Mi")) == 0`}}, []string{"tessera-vgpu-0"}},
		{"two containers of one shape share a template, each with its claim; the CPU sidecar keeps none", conversionOn(),
			vgpuPod(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemory: 2048}, sidecar,
				map[string]int64{api.ResourceNumber: 1, api.ResourceMemory: 2048}),
			[]shape{{name: "tessera-vgpu-1x-2048mi-0c", count: 1, memory: "2Gi", cores: "0"}},
			[]string{"tessera-vgpu-0", "", "tessera-vgpu-2"}},
		{"containers of two shapes get two templates, sorted by name", conversionOn(),
			vgpuPod(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemory: 4096, api.ResourceCores: 30},
				map[string]int64{api.ResourceNumber: 1, api.ResourceMemory: 1024, api.ResourceCores: 10}),
			[]shape{{name: "tessera-vgpu-1x-1024mi-10c", count: 1, memory: "1Gi", cores: "10"},
				{name: "tessera-vgpu-1x-4096mi-30c", count: 1, memory: "4Gi", cores: "30"}},
			[]string{"tessera-vgpu-0", "tessera-vgpu-1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conv, err := ConvertToClaims(c.pod, api.DefaultResourceNames(), c.conf)
			if err != nil {
				t.Fatal(err)
			}
			var got []shape
			for _, tmpl := range conv.Templates {
				if tmpl.Namespace != c.pod.Namespace {
					t.Errorf("template %s in namespace %q, want the pod's %q", tmpl.Name, tmpl.Namespace, c.pod.Namespace)
				}
				got = append(got, shapeOf(t, tmpl))
			}
			if !equalShapes(got, c.want) {
				t.Errorf("templates %+v, want %+v", got, c.want)
			}
			checkConverted(t, c.pod, conv)
			for i, want := range c.claim {
				cs := conv.Pod.Spec.Containers[i].Resources.Claims
				if (want == "") != (len(cs) == 0) || (want != "" && (len(cs) != 1 || cs[0].Name != want)) {
					t.Errorf("container %d references %+v, want %q", i, cs, want)
				}
			}
		})
	}
}

func equalShapes(a, b []shape) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkConverted checks what every conversion must give: the patch turns the pod as the
// API server sends it into the converted pod; no vGPU resource is left, every converted
// container references exactly one claim of the pod, made from one of the templates;
// nothing else of the pod changed; the templates pass the API server's validation.
func checkConverted(t *testing.T, pod *corev1.Pod, conv *ClaimConversion) {
	t.Helper()
	n := api.DefaultResourceNames()
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var patched corev1.Pod
	if err := json.Unmarshal(applyPatch(t, doc, ClaimPatch(pod, conv, n)), &patched); err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(&patched, conv.Pod) {
		t.Errorf("the patch gives\n%+v\nwant the converted pod\n%+v", patched.Spec, conv.Pod.Spec)
	}
	if n.HasVGPURequest(conv.Pod) {
		t.Errorf("the converted pod still asks for vGPU resources: %+v", conv.Pod.Spec.Containers)
	}
	templates := map[string]bool{}
	for _, tmpl := range conv.Templates {
		templates[tmpl.Name] = true
		checkTemplateValid(t, tmpl)
	}
	claims := map[string]string{}
	for _, pc := range conv.Pod.Spec.ResourceClaims {
		if pc.ResourceClaimTemplateName == nil || !templates[*pc.ResourceClaimTemplateName] {
			t.Errorf("pod claim %s is from %v, not one of the templates", pc.Name, pc.ResourceClaimTemplateName)
		}
		claims[pc.Name] = ""
	}
	converted := 0
	for i, c := range pod.Spec.Containers {
		got := conv.Pod.Spec.Containers[i]
		if !n.HasVGPURequest(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}) {
			if !apiequality.Semantic.DeepEqual(c, got) {
				t.Errorf("container %s without vGPU resources changed: %+v", c.Name, got)
			}
			continue
		}
		converted++
		if len(got.Resources.Claims) != 1 {
			t.Errorf("container %s references claims %+v, want one", c.Name, got.Resources.Claims)
			continue
		}
		if _, ok := claims[got.Resources.Claims[0].Name]; !ok {
			t.Errorf("container %s references %s, which the pod does not list", c.Name, got.Resources.Claims[0].Name)
		}
		want := c.DeepCopy()
		for _, r := range []corev1.ResourceName{n.Number, n.Memory, n.MemoryPercentage, n.Cores} {
			delete(want.Resources.Limits, r)
			delete(want.Resources.Requests, r)
		}
		want.Resources.Claims = got.Resources.Claims
		if !apiequality.Semantic.DeepEqual(want, &got) {
			t.Errorf("container %s changed beyond its vGPU resources: %+v", c.Name, got)
		}
	}
	if converted != len(conv.Pod.Spec.ResourceClaims) {
		t.Errorf("%d containers converted, %d pod claims", converted, len(conv.Pod.Spec.ResourceClaims))
	}
	rest, restConv := pod.DeepCopy(), conv.Pod.DeepCopy()
	rest.Spec.Containers, restConv.Spec.Containers, restConv.Spec.ResourceClaims = nil, nil, nil
	if !apiequality.Semantic.DeepEqual(rest, restConv) {
		t.Errorf("the conversion changed more than containers and claims")
	}
}

// checkTemplateValid runs the API server's validation (CEL selectors compiled) with the
// gates docs/dra.md asks for.
func checkTemplateValid(t *testing.T, tmpl resourcev1.ResourceClaimTemplate) {
	t.Helper()
	v := tmpl.DeepCopy()
	resourcev1conv.SetObjectDefaults_ResourceClaimTemplate(v)
	if !apiequality.Semantic.DeepEqual(v.Spec, tmpl.Spec) {
		t.Errorf("template %s: the API server's defaults change it, so SameTemplate would refuse what it stored:\n%+v\n%+v", tmpl.Name, v.Spec, tmpl.Spec)
	}
	var it internalresource.ResourceClaimTemplate
	if err := resourcev1conv.Convert_v1_ResourceClaimTemplate_To_resource_ResourceClaimTemplate(v, &it, nil); err != nil {
		t.Fatal(err)
	}
	if errs := validation.ValidateResourceClaimTemplate(&it); len(errs) > 0 {
		t.Errorf("template %s: the API server would refuse it: %v", tmpl.Name, errs.ToAggregate())
	}
}

func enableDRAGates(t testing.TB) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.DRAConsumableCapacity, true)
}

func TestConvertToClaimsRefusesWhatClaimsCannotCarry(t *testing.T) {
	one := map[string]int64{api.ResourceNumber: 1, api.ResourceMemory: 4096}
	withClaims := vgpuPod(nil, one)
	tmpl := "mine"
	withClaims.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "nic", ResourceClaimTemplateName: &tmpl}}
	ctrClaims := vgpuPod(nil, one)
	ctrClaims.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "nic"}}
	initVGPU := vgpuPod(nil, one)
	initVGPU.Spec.InitContainers = []corev1.Container{*initVGPU.Spec.Containers[0].DeepCopy()}
	initVGPU.Spec.InitContainers[0].Name = "warm"
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"a memory percentage without a card size", vgpuPod(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemoryPercentage: 50}),
			`spec.containers[0] ("main") memory-percentage: 50%: a percentage needs the card's size`},
		{"less memory than the driver's smallest share", vgpuPod(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemory: 100}),
			`spec.containers[0] ("main") memory: 100 MiB: the DRA driver's smallest share is 256 MiB`},
		{"a pod that names claims itself", withClaims, `spec.resourceClaims[0]: "nic": a pod that names claims itself is not converted`},
		{"a container that names claims itself", ctrClaims, `spec.containers[0].resources.claims[0]: "nic"`},
		{"MIG instances", vgpuPod(map[string]string{api.AnnotationMIGProfile: "1g.10gb"}, map[string]int64{api.ResourceNumber: 1}),
			`annotation tessera.io/mig-profile: "1g.10gb": claims on DRA nodes are placed by the Kubernetes allocator`},
		{"a card type filter", vgpuPod(map[string]string{api.AnnotationGPUTypeInclude: "H100"}, one), `annotation ` + api.AnnotationGPUTypeInclude},
		{"NVIDIA's card filter", vgpuPod(map[string]string{api.NvidiaUseGPUUUID: "GPU-1"}, one), `annotation ` + api.NvidiaUseGPUUUID},
		{"NUMA binding", vgpuPod(map[string]string{api.AnnotationNUMABind: "true"}, one), `annotation ` + api.AnnotationNUMABind},
		{"a QoS class other than fixed-share", vgpuPod(map[string]string{api.AnnotationQoS: "burst-share"}, one),
			`annotation tessera.io/qos: "burst-share": claims get fixed-share only`},
		{"both memory forms, with the scheduler's reader's words", vgpuPod(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemory: 4096,
			api.ResourceMemoryPercentage: 50}), `sets both volcano.sh/vgpu-memory and volcano.sh/vgpu-memory-percentage`},
		{"vGPU resources on an init container", initVGPU, `init container "warm" requests vGPU resources`},
	} {
		t.Run(c.name, func(t *testing.T) {
			conv, err := ConvertToClaims(c.pod, api.DefaultResourceNames(), conversionOn())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("conversion %+v, error %v; want one saying %q", conv, err, c.want)
			}
		})
	}
	// A fixed-share annotation is what claims give: it converts.
	if _, err := ConvertToClaims(vgpuPod(map[string]string{api.AnnotationQoS: "fixed-share"}, one), api.DefaultResourceNames(), conversionOn()); err != nil {
		t.Errorf("qos fixed-share: %v", err)
	}
	// The percentage's MiB is also held to the smallest share.
	small := conversionOn()
	small.CardMemoryMiB = 1024
	if _, err := ConvertToClaims(vgpuPod(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemoryPercentage: 10}),
		api.DefaultResourceNames(), small); err == nil || !strings.Contains(err.Error(), "10% of 1024 MiB is 102 MiB") {
		t.Errorf("10%% of a 1024 MiB card: %v", err)
	}
}

func TestWantsDRAFollowsTheNamespaceAndRefusesWhatItDoesNotHonour(t *testing.T) {
	optIn := conversionOn()
	optIn.PodOptIn = true
	off := DefaultConfig().DRAConversion
	pod := func(v string) *corev1.Pod {
		if v == "" {
			return vgpuPod(nil, half)
		}
		return vgpuPod(map[string]string{api.AnnotationCardAPI: v}, half)
	}
	for _, c := range []struct {
		name    string
		conf    DRAConversion
		ns, pod string
		want    bool
		refusal string
	}{
		{"a namespace annotated dra sends its pods to DRA nodes", conversionOn(), "dra", "", true, ""},
		{"a pod may repeat its namespace's choice", conversionOn(), "dra", "dra", true, ""},
		{"a namespace annotated device-plugin keeps its pods there", optIn, "device-plugin", "", false, ""},
		{"a pod cannot leave its namespace's DRA nodes", optIn, "dra", "device-plugin", false, `namespace team-a runs its vGPU pods on dra nodes`},
		{"a pod cannot leave its namespace's device-plugin nodes, even with podOptIn", optIn, "device-plugin", "dra", false,
			`namespace team-a runs its vGPU pods on device-plugin nodes`},
		{"a namespace without the annotation stays on device-plugin nodes", conversionOn(), "", "", false, ""},
		{"a pod opts in where podOptIn allows it", optIn, "", "dra", true, ""},
		{"a pod's opt-in is refused without podOptIn", conversionOn(), "", "dra", false, "draConversion.podOptIn is off"},
		{"a pod may say device-plugin where that is the outcome", conversionOn(), "", "device-plugin", false, ""},
		{"with the conversion off, no pod goes to DRA nodes", off, "dra", "", false, ""},
		{"with the conversion off, a pod asking for DRA nodes is refused", off, "", "dra", false, "draConversion is off"},
		{"a malformed pod annotation is refused", optIn, "", "DRA", false, `annotation tessera.io/card-api: "DRA", want dra or device-plugin`},
		{"a malformed namespace annotation is refused", optIn, "gpu", "", false, `namespace team-a: annotation tessera.io/card-api: "gpu"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.conf.WantsDRA("team-a", c.ns, pod(c.pod))
			if c.refusal != "" {
				if err == nil || !strings.Contains(err.Error(), c.refusal) {
					t.Fatalf("%v, %v; want a refusal saying %q", got, err, c.refusal)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("%v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestSameTemplateRefusesALookalike(t *testing.T) {
	conv, err := ConvertToClaims(vgpuPod(nil, map[string]int64{api.ResourceNumber: 1, api.ResourceMemory: 4096, api.ResourceCores: 30}),
		api.DefaultResourceNames(), conversionOn())
	if err != nil {
		t.Fatal(err)
	}
	want := &conv.Templates[0]
	stored := want.DeepCopy()
	stored.UID, stored.ResourceVersion, stored.Labels = "u1", "7", nil // metadata is not the template's meaning
	if !SameTemplate(stored, want) {
		t.Error("the stored copy of the template is refused")
	}
	whole := want.DeepCopy()
	whole.Spec.Spec.Devices.Requests[0].Exactly.Capacity = nil // the whole card under the small share's name
	admin := want.DeepCopy()
	yes := true
	admin.Spec.Spec.Devices.Requests[0].Exactly.AdminAccess = &yes
	for name, bad := range map[string]*resourcev1.ResourceClaimTemplate{"whole card": whole, "admin access": admin} {
		if SameTemplate(bad, want) {
			t.Errorf("a lookalike asking for %s passes for the conversion's template", name)
		}
	}
}

// FuzzConvertToClaims converts pods with arbitrary vGPU quantities and annotations: it
// never panics; a refusal wraps errNotConverted or is the scheduler's reader's error;
// a conversion passes checkConverted and asks of each card exactly the MiB and cores the
// device-plugin path would give the container.
func FuzzConvertToClaims(f *testing.F) {
	f.Add("1", "4096", "", "30", "", "", int64(0))
	f.Add("2", "", "50", "", api.AnnotationQoS, "best-effort", int64(24576))
	f.Add("1", "", "", "100", api.AnnotationMIGProfile, "1g.10gb", int64(0))
	f.Add("64", "1Gi", "", "0", "", "", int64(81559))
	f.Add("1", "", "1", "", "", "", int64(81559))
	f.Add("", "512", "", "10", "", "", int64(0))
	f.Fuzz(func(t *testing.T, number, memory, percent, cores, annKey, annValue string, cardMiB int64) {
		enableDRAGates(t)
		c := corev1.Container{Name: "main", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}
		for name, v := range map[string]string{api.ResourceNumber: number, api.ResourceMemory: memory,
			api.ResourceMemoryPercentage: percent, api.ResourceCores: cores} {
			if q, err := resource.ParseQuantity(v); err == nil {
				c.Resources.Limits[corev1.ResourceName(name)] = q
			}
		}
		pod := vgpuPod(nil)
		pod.Spec.Containers = []corev1.Container{c, {Name: "side"}}
		if !utf8.ValidString(annKey) || !utf8.ValidString(annValue) {
			return // JSON, and so the API server's review, cannot carry it
		}
		if annKey != "" {
			pod.Annotations = map[string]string{annKey: annValue}
		}
		d := conversionOn()
		if cardMiB >= d.MinMemoryMiB && cardMiB <= 1<<30 {
			d.CardMemoryMiB = cardMiB
		}
		n := api.DefaultResourceNames()
		conv, err := ConvertToClaims(pod, n, d)
		reqs, readErr := n.ContainerRequests(pod)
		if err != nil {
			if !errors.Is(err, errNotConverted) && (readErr == nil || err.Error() != readErr.Error()) {
				t.Fatalf("refusal %v is neither a conversion's nor the reader's (%v)", err, readErr)
			}
			return
		}
		if readErr != nil {
			t.Fatalf("converted a request the scheduler refuses: %v", readErr)
		}
		checkConverted(t, pod, conv)
		if len(reqs) == 0 {
			return
		}
		r := reqs[0]
		got := shapeOf(t, conv.Templates[0])
		wantCores := r.Cores
		if got.count != int64(r.Cards) || got.cores != resource.NewQuantity(int64(wantCores), resource.DecimalSI).String() {
			t.Fatalf("request %+v: template %+v", r, got)
		}
		var wantMiB int64
		switch {
		case r.Exclusive(), r.MemoryMiB == 0 && r.MemoryPercent == 100:
		case r.MemoryMiB > 0:
			wantMiB = r.MemoryMiB
		default:
			wantMiB = max(1, d.CardMemoryMiB*int64(r.MemoryPercent)/100)
		}
		gotMiB := int64(0)
		if got.memory != "" {
			q := resource.MustParse(got.memory)
			gotMiB = q.Value() >> 20
		}
		if gotMiB != wantMiB {
			t.Fatalf("request %+v: template asks %d MiB per card, the device-plugin path gives %d", r, gotMiB, wantMiB)
		}
	})
}

func TestParseConfigReadsDRAConversionOverItsDefaults(t *testing.T) {
	c, err := ParseConfig([]byte("version: v1\ndraConversion: {enabled: true, cardMemoryMiB: 24576}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := DRAConversion{Enabled: true, DeviceClassName: api.DRADriver, CardMemoryMiB: 24576, MinMemoryMiB: DefaultDRAMinMemoryMiB}
	if c.DRAConversion != want {
		t.Errorf("draConversion %+v, want %+v", c.DRAConversion, want)
	}
	_, err = ParseConfig([]byte("version: v1\ndraConversion: {deviceClassName: Not_A_Class, cardMemoryMiB: -1, minMemoryMiB: 0}\n"))
	for _, w := range []string{`draConversion.deviceClassName: "Not_A_Class"`, `draConversion.cardMemoryMiB: -1`, `draConversion.minMemoryMiB: 0`} {
		if err == nil || !strings.Contains(err.Error(), w) || !errors.Is(err, api.ErrInvalid) {
			t.Errorf("error %v lacks %q", err, w)
		}
	}
	_, err = ParseConfig([]byte("version: v1\ndraConversion: {cardMemoryMiB: 100}\n"))
	if err == nil || !strings.Contains(err.Error(), "draConversion.cardMemoryMiB: 100: want at least minMemoryMiB (256)") {
		t.Errorf("a card smaller than the smallest share: %v", err)
	}
}
