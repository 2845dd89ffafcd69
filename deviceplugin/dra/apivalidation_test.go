package dra

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/apis/resource"
	resourcev1 "k8s.io/kubernetes/pkg/apis/resource/v1"
	"k8s.io/kubernetes/pkg/apis/resource/validation"
	"k8s.io/kubernetes/pkg/features"

	"github.com/tessera-gpu/tessera/api"
)

// enableGates turns on, for this test, the Kubernetes 1.34 alpha gates docs/dra.md asks for.
func enableGates(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.DRAConsumableCapacity, true)
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.DRADeviceTaints, true)
}

// TestPublishedSlicesPassAPIValidation runs the API server's own validation over what the
// driver publishes (through the ResourceSlice controller into the fake API server) on a
// node with an unhealthy and a cordoned card, so that a real API server accepts it.
func TestPublishedSlicesPassAPIValidation(t *testing.T) {
	enableGates(t)
	n := newNode(t)
	n.reg.SetHealth(n.res.Devices[0].Card.UUID, false, "fatal XID 79 — the card fell off the bus; "+strings.Repeat("and more words ", 10))
	n.start(t)
	n.setCordons(t, cordon(t, n.res.Devices[1].Card.UUID, "RMA: fan noise, ticket 42 "+strings.Repeat("and more words ", 10)))
	got := n.slices(t, func(s []*resourceapi.ResourceSlice) bool {
		return len(s[0].Spec.Devices) == 4 && len(s[0].Spec.Devices[0].Taints) == 1 && len(s[0].Spec.Devices[1].Taints) == 1
	})
	for _, s := range got {
		if s.Name == "" {
			s.Name = s.GenerateName + "x1" // the API server's job, which the fake skips
		}
		var internal resource.ResourceSlice
		if err := resourcev1.Convert_v1_ResourceSlice_To_resource_ResourceSlice(s, &internal, nil); err != nil {
			t.Fatal(err)
		}
		if errs := validation.ValidateResourceSlice(&internal); len(errs) > 0 {
			t.Errorf("the API server would refuse the slice: %v", errs.ToAggregate())
		}
	}
	// Every card size from a small T4 partition to the largest cards.
	for _, mib := range []int64{1, 255, 256, 257, 15360, 24576, 81559, 183359} {
		inv := &api.NodeInventory{Cards: []api.Card{{UUID: "GPU-x", Model: "NVIDIA Test", MemoryMiB: mib, NUMA: -1, Healthy: true}}}
		v1 := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: DriverName, NodeName: strPtr("node-a"),
			Pool: resourceapi.ResourcePool{Name: "node-a", ResourceSliceCount: 1}, Devices: Devices(inv, nil, Options{Pool: "node-a"})}}
		v1.Name = "node-a-vgpu"
		var internal resource.ResourceSlice
		if err := resourcev1.Convert_v1_ResourceSlice_To_resource_ResourceSlice(v1, &internal, nil); err != nil {
			t.Fatal(err)
		}
		if errs := validation.ValidateResourceSlice(&internal); len(errs) > 0 {
			t.Errorf("a card of %d MiB: the API server would refuse the slice: %v", mib, errs.ToAggregate())
		}
	}
}

// TestDocumentedObjectsPassAPIValidation validates the DeviceClass and claim templates
// docs/dra.md shows (testdata/), CEL selectors included, as the API server would.
func TestDocumentedObjectsPassAPIValidation(t *testing.T) {
	enableGates(t)
	var class resourceapi.DeviceClass
	readYAML(t, "deviceclass.yaml", &class)
	var ic resource.DeviceClass
	if err := resourcev1.Convert_v1_DeviceClass_To_resource_DeviceClass(&class, &ic, nil); err != nil {
		t.Fatal(err)
	}
	if errs := validation.ValidateDeviceClass(&ic); len(errs) > 0 {
		t.Errorf("deviceclass.yaml: %v", errs.ToAggregate())
	}
	for _, f := range []string{"claimtemplate.yaml", "claimtemplate-whole.yaml", "claimtemplate-nvlink-pair.yaml"} {
		var tmpl resourceapi.ResourceClaimTemplate
		readYAML(t, f, &tmpl)
		resourcev1.SetObjectDefaults_ResourceClaimTemplate(&tmpl)
		var it resource.ResourceClaimTemplate
		if err := resourcev1.Convert_v1_ResourceClaimTemplate_To_resource_ResourceClaimTemplate(&tmpl, &it, nil); err != nil {
			t.Fatal(err)
		}
		if errs := validation.ValidateResourceClaimTemplate(&it); len(errs) > 0 {
			t.Errorf("%s: %v", f, errs.ToAggregate())
		}
	}
}

func strPtr(s string) *string { return &s }
