package api

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func resourceQ(v int64) *resource.Quantity { return resource.NewQuantity(v, resource.DecimalSI) }

// A pod with tessera.io/mig-profile asks for whole instances: each vGPU container
// names only its count, and gets MemoryPercent and Cores of 100 (what a whole
// instance is, and what the node agent checks an assignment against); memory or
// cores beside the profile, and a name that is no profile, are refused by name.
func TestContainerRequestsForMIGInstances(t *testing.T) {
	n := DefaultResourceNames()
	q := func(v int64) corev1.ResourceList { return corev1.ResourceList{ResourceNumber: *resourceQ(v)} }
	for _, tc := range []struct {
		name    string
		profile string
		limits  corev1.ResourceList
		want    ContainerRequest
		wantErr string
	}{
		{name: "the count alone asks for that many whole instances", profile: "3g.40gb", limits: q(2),
			want: ContainerRequest{Name: "train", Cards: 2, MemoryPercent: 100, Cores: 100, MIGProfile: "3g.40gb"}},
		{name: "a media-engine profile is a profile", profile: "1g.10gb+me", limits: q(1),
			want: ContainerRequest{Name: "train", Cards: 1, MemoryPercent: 100, Cores: 100, MIGProfile: "1g.10gb+me"}},
		{name: "memory beside a profile is refused", profile: "3g.40gb",
			limits:  corev1.ResourceList{ResourceNumber: *resourceQ(1), ResourceMemory: *resourceQ(4096)},
			wantErr: `container "train" sets volcano.sh/vgpu-memory to 4096, but annotation tessera.io/mig-profile asks for whole MIG instances of 3g.40gb: remove volcano.sh/vgpu-memory`},
		{name: "a memory percentage beside a profile is refused, even 100", profile: "3g.40gb",
			limits:  corev1.ResourceList{ResourceNumber: *resourceQ(1), ResourceMemoryPercentage: *resourceQ(100)},
			wantErr: "sets volcano.sh/vgpu-memory-percentage to 100"},
		{name: "cores beside a profile are refused, even 100", profile: "3g.40gb",
			limits:  corev1.ResourceList{ResourceNumber: *resourceQ(1), ResourceCores: *resourceQ(100)},
			wantErr: "sets volcano.sh/vgpu-cores to 100"},
		{name: "a value that is no profile name is quoted", profile: "3g", limits: q(1),
			wantErr: `annotation tessera.io/mig-profile: "3g" is not a MIG profile name`},
		{name: "an empty profile is refused", profile: "", limits: q(1),
			wantErr: `annotation tessera.io/mig-profile: "" is not a MIG profile name`},
		{name: "an over-long value is refused by its size", profile: strings.Repeat("7", 100) + "g.80gb", limits: q(1),
			wantErr: "is 106 bytes, not a MIG profile name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := podWith(tc.limits)
			pod.Annotations = map[string]string{AnnotationMIGProfile: tc.profile}
			got, err := n.ContainerRequests(pod)
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				if len(err.Error()) > 400 {
					t.Fatalf("error repeats the whole value: %d bytes", len(err.Error()))
				}
				return
			}
			if err != nil || len(got) != 1 || got[0] != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
			o, err := ParsePodOptions(pod.Annotations)
			if err != nil || o.MIGProfile != tc.profile {
				t.Fatalf("options %+v, %v; want MIGProfile %q", o, err, tc.profile)
			}
		})
	}
}

// The reader attaches each MIG card's instances from tessera.io/mig-instances; one
// it cannot read leaves every card's layout unknown (placement then hands out no
// instance of the node, saying why) and the rest of the inventory as it was.
func TestReadNodeInventoryAttachesTheMIGLayout(t *testing.T) {
	inv := sampleInventory()
	inv.Cards[1].Healthy = true
	s, err := EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	layout := &NodeMIGInstances{Version: MIGInstancesVersion, Cards: map[string][]MIGInstance{
		"GPU-bbbb": {{UUID: "MIG-1111", Profile: "3g.20gb", GI: 1, Start: 4, Size: 4, MemoryMiB: 19968}},
	}}
	m, err := EncodeMIGInstances(layout)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	node := func(mig string, has bool) *corev1.Node {
		ann := map[string]string{AnnotationInventory: s, AnnotationHeartbeat: now.Format(time.RFC3339)}
		if has {
			ann[AnnotationMIGInstances] = mig
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: ann}}
	}
	d := &Decoders{}
	for _, read := range []func(*corev1.Node) (*NodeInventory, error){
		func(n *corev1.Node) (*NodeInventory, error) { return ReadNodeInventory(n, now, time.Minute) },
		func(n *corev1.Node) (*NodeInventory, error) { return d.NodeInventory(n, now, time.Minute) },
	} {
		got, err := read(node(m, true))
		if err != nil {
			t.Fatal(err)
		}
		if l := got.Cards[1].MIGInstances; len(l) != 1 || l[0].UUID != "MIG-1111" || got.Cards[0].MIGInstances != nil {
			t.Fatalf("layout not attached: %+v", got.Cards)
		}
		if MIGLayoutError(node(m, true)) != nil {
			t.Fatal("a readable layout is called unreadable")
		}
		for _, bad := range []struct {
			value string
			has   bool
			says  string
		}{
			{`{"version":"v1","cards":{"GPU-bbbb":[{"uuid":"MIG-1111"}]}}`, true, AnnotationMIGInstances},
			{"not json", true, AnnotationMIGInstances},
			{"", false, "is absent"},
		} {
			got, err := read(node(bad.value, bad.has))
			if err != nil {
				t.Fatalf("a bad MIG layout made the whole node unusable: %v", err)
			}
			if got.Cards[1].MIGInstances != nil || !got.Cards[0].Healthy || got.Cards[0].MIG {
				t.Fatalf("layout %q: cards %+v", bad.value, got.Cards)
			}
			if err := MIGLayoutError(node(bad.value, bad.has)); err == nil || !strings.Contains(err.Error(), bad.says) {
				t.Fatalf("layout %q: MIGLayoutError %v, want it to say %q", bad.value, err, bad.says)
			}
		}
	}
	// The memo keys the merged inventory by the layout too: a new layout is read.
	layout.Cards["GPU-bbbb"][0].UUID = "MIG-2222"
	m2, _ := EncodeMIGInstances(layout)
	got, _ := d.NodeInventory(node(m2, true), now, time.Minute)
	if got.Cards[1].MIGInstances[0].UUID != "MIG-2222" {
		t.Fatalf("the memo kept the old layout: %+v", got.Cards[1].MIGInstances)
	}
}
