package api

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func sampleInventory() *NodeInventory {
	return &NodeInventory{
		Version: InventoryVersion,
		Cards: []Card{
			{UUID: "GPU-aaaa", Index: 0, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, SMCount: 108, NUMA: 0, Shares: 10, Healthy: true},
			{UUID: "GPU-bbbb", Index: 1, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, SMCount: 108, NUMA: 1, Shares: 10, Healthy: false, MIG: true},
		},
		Links: [][]LinkType{{"X", "NV12"}, {"NV12", "X"}},
	}
}

func TestInventoryRoundTrip(t *testing.T) {
	in := sampleInventory()
	s, err := EncodeInventory(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeInventory(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip changed the inventory:\n in %+v\nout %+v", in, out)
	}
}

func TestInventoryDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
		unsupported     bool
	}{
		{"a newer version is reported as unsupported", `{"version":"v2","cards":[],"extra":1}`, `version "v2"`, true},
		{"a missing version is rejected", `{"cards":[]}`, "missing version", false},
		{"an unknown field is rejected, not dropped", `{"version":"v1","cards":[],"colour":"red"}`, "colour", false},
		{"trailing data is rejected", `{"version":"v1","cards":[]} {}`, "after top-level value", false},
		{"a zero-memory card names the field", `{"version":"v1","cards":[{"uuid":"GPU-1","index":0,"model":"m","memoryMiB":0,"numa":0,"shares":1,"healthy":true}]}`, "cards[0].memoryMiB", false},
		{"duplicate UUIDs are rejected", `{"version":"v1","cards":[{"uuid":"G","index":0,"model":"m","memoryMiB":1,"numa":0,"shares":1,"healthy":true},{"uuid":"G","index":1,"model":"m","memoryMiB":1,"numa":0,"shares":1,"healthy":true}]}`, "repeats cards[0]", false},
		{"a UUID with a separator is rejected", `{"version":"v1","cards":[{"uuid":"G,1","index":0,"model":"m","memoryMiB":1,"numa":0,"shares":1,"healthy":true}]}`, "cards[0].uuid", false},
		{"zero shares are rejected", `{"version":"v1","cards":[{"uuid":"G","index":0,"model":"m","memoryMiB":1,"numa":0,"shares":0,"healthy":true}]}`, "cards[0].shares", false},
		{"an asymmetric link matrix is rejected", `{"version":"v1","cards":[{"uuid":"A","index":0,"model":"m","memoryMiB":1,"numa":0,"shares":1,"healthy":true},{"uuid":"B","index":1,"model":"m","memoryMiB":1,"numa":0,"shares":1,"healthy":true}],"links":[["X","NV1"],["PIX","X"]]}`, "links[0][1]", false},
		{"an unknown link type is rejected", `{"version":"v1","cards":[{"uuid":"A","index":0,"model":"m","memoryMiB":1,"numa":0,"shares":1,"healthy":true}],"links":[["Q"]]}`, `unknown link type "Q"`, false},
		{"a context reserve inside the inventory is an unknown field", `{"version":"v1","cards":[{"uuid":"G","index":0,"model":"m","memoryMiB":1,"numa":0,"shares":1,"healthy":true,"contextReserveMiB":518}]}`, "contextReserveMiB", false},
		{"a short link matrix is rejected", `{"version":"v1","cards":[{"uuid":"A","index":0,"model":"m","memoryMiB":1,"numa":0,"shares":1,"healthy":true}],"links":[]}`, "0 rows", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeInventory(tc.doc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if got := errors.Is(err, ErrUnsupportedVersion); got != tc.unsupported {
				t.Fatalf("errors.Is(ErrUnsupportedVersion) = %v, want %v", got, tc.unsupported)
			}
		})
	}
}

// previousInventory is the inventory's shape in the release before context reserves,
// as that release's scheduler decodes it: strictly.
type previousInventory struct {
	Version string `json:"version"`
	Cards   []struct {
		UUID      string `json:"uuid"`
		Index     int    `json:"index"`
		Model     string `json:"model"`
		MemoryMiB int64  `json:"memoryMiB"`
		SMCount   int    `json:"smCount,omitempty"`
		NUMA      int    `json:"numa"`
		Shares    int    `json:"shares"`
		Healthy   bool   `json:"healthy"`
		MIG       bool   `json:"mig,omitempty"`
	} `json:"cards"`
	Links [][]LinkType `json:"links,omitempty"`
}

// Each card's context reserve never reaches the inventory document: a scheduler of the
// previous release decodes what this build writes (during an upgrade or a rollback,
// agents and scheduler of both releases run side by side), and an in-memory reserve
// reads back as unknown.
func TestAnInventoryWithReservesIsWhatThePreviousReleaseWrote(t *testing.T) {
	inv := sampleInventory()
	inv.Cards[0].ContextReserveMiB = 518
	enc, err := EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(enc), "reserve") {
		t.Fatalf("the inventory carries the reserve: %s", enc)
	}
	var old previousInventory
	if err := decodeStrict(enc, &old); err != nil {
		t.Fatalf("the previous release's scheduler refuses this build's inventory: %v\n%s", err, enc)
	}
	back, err := DecodeInventory(enc)
	if err != nil || back.Cards[0].ContextReserveMiB != 0 {
		t.Fatalf("decoded %+v (%v), want the reserve unknown (0): it travels in %s", back, err, AnnotationContextReserve)
	}
}

func sampleAssignment() *PodAssignment {
	return &PodAssignment{Version: AssignmentVersion, Node: "node-1", QoS: QoSBurstShare, Containers: []ContainerAssignment{
		{Name: "trainer", Cards: []CardAssignment{{UUID: "GPU-a", MemoryMiB: 4096, Cores: 30}, {UUID: "GPU-b", MemoryMiB: 4096, Cores: 30}}},
		{Name: "sidecar", Cards: []CardAssignment{{UUID: "GPU-a", MemoryMiB: 1024, Cores: 0}}},
	}}
}

func TestAssignmentRoundTrip(t *testing.T) {
	in := sampleAssignment()
	s, err := EncodeAssignment(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeAssignment(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip changed the assignment:\n in %+v\nout %+v", in, out)
	}
	if out.Container("sidecar") == nil || out.Container("nope") != nil {
		t.Fatal("Container lookup by name is wrong")
	}
}

// A whole MIG instance travels as its parent card plus the instance's UUID; an
// assignment without one encodes exactly as the previous release wrote it.
func TestAMIGAssignmentRoundTripsAndPlainOnesKeepTheirShape(t *testing.T) {
	in := sampleAssignment()
	in.Containers[0].Cards = []CardAssignment{{UUID: "GPU-a", MemoryMiB: 40192, Cores: 100, MIG: "MIG-5c3a1d2e-0000-4000-8000-000000000001"}}
	s, err := EncodeAssignment(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeAssignment(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) || !out.Containers[0].Cards[0].IsMIG() || out.Containers[1].Cards[0].IsMIG() {
		t.Fatalf("round trip changed the MIG assignment:\n in %+v\nout %+v", in, out)
	}
	plain, err := EncodeAssignment(sampleAssignment())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain, "mig") {
		t.Fatalf("an assignment without MIG names the field: %s", plain)
	}
}

func TestAssignmentValidation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*PodAssignment)
		want   string
	}{
		{"cores above 100 are rejected", func(a *PodAssignment) { a.Containers[0].Cards[0].Cores = 101 }, "containers[0].cards[0].cores"},
		{"a card given twice to a container is rejected", func(a *PodAssignment) { a.Containers[0].Cards[1].UUID = "GPU-a" }, "given twice"},
		{"an empty node is rejected", func(a *PodAssignment) { a.Node = "" }, ".node"},
		{"an unknown QoS is rejected", func(a *PodAssignment) { a.QoS = "gold" }, `"gold"`},
		{"duplicate container names are rejected", func(a *PodAssignment) { a.Containers[1].Name = "trainer" }, "appears twice"},
		{"zero memory is rejected", func(a *PodAssignment) { a.Containers[1].Cards[0].MemoryMiB = 0 }, "memoryMiB"},
		{"a MIG instance shared by cores is rejected", func(a *PodAssignment) { a.Containers[0].Cards[0].MIG = "MIG-1" }, `cards[0].cores: 30, but a MIG instance is given whole`},
		{"a MIG device that is a plain card UUID is rejected", func(a *PodAssignment) {
			a.Containers[0].Cards[0].MIG, a.Containers[0].Cards[0].Cores = "GPU-b", 100
		}, `cards[0].mig: "GPU-b" is not a MIG device UUID`},
		{"an older driver's MIG-GPU-<uuid>/<gi>/<ci> form is rejected", func(a *PodAssignment) {
			a.Containers[0].Cards[0].MIG, a.Containers[0].Cards[0].Cores = "MIG-GPU-a/1/0", 100
		}, `cards[0].mig: "MIG-GPU-a/1/0" contains '/'`},
		{"one MIG instance given to two containers is rejected", func(a *PodAssignment) {
			a.Containers[0].Cards[0].MIG, a.Containers[0].Cards[0].Cores = "MIG-x", 100
			a.Containers[1].Cards[0].MIG, a.Containers[1].Cards[0].Cores = "MIG-x", 100
		}, `containers[1].cards[0].mig: "MIG-x" given twice in one pod`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := sampleAssignment()
			tc.mutate(a)
			if _, err := EncodeAssignment(a); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestVolcanoNodeRegister(t *testing.T) {
	const s = "GPU-1,10,40960,NVIDIA-A100,true:GPU-2,4,16384,NVIDIA-T4,false,hami-core:"
	cards, err := DecodeVolcanoNodeRegister(s)
	if err != nil {
		t.Fatal(err)
	}
	want := []VolcanoCard{
		{UUID: "GPU-1", Count: 10, MemoryMiB: 40960, Type: "NVIDIA-A100", Healthy: true},
		{UUID: "GPU-2", Count: 4, MemoryMiB: 16384, Type: "NVIDIA-T4", Healthy: false, Mode: "hami-core"},
	}
	if !reflect.DeepEqual(cards, want) {
		t.Fatalf("got %+v", cards)
	}
	enc, err := EncodeVolcanoNodeRegister(cards)
	if err != nil || enc != s {
		t.Fatalf("re-encoded to %q (%v), want %q", enc, err, s)
	}
	inv := InventoryFromVolcano(cards)
	if err := inv.Validate(); err != nil {
		t.Fatalf("converted inventory is invalid: %v", err)
	}
	for _, bad := range []struct{ in, want string }{
		{"", "no cards"},
		{"GPU-1,x,1,T,true", `count "x"`},
		{"GPU-1,1,-5,T,true", `memory "-5"`},
		{"GPU-1,1,5,T,maybe", `health "maybe"`},
		{"GPU-1,1,5,T", "4 fields"},
		{"GPU-1,1,5,T,true::GPU-2,1,5,T,true", "entry 1"},
		{"GPU-1,1,5,T,true:GPU-1,1,5,T,true", "repeats"},
	} {
		if _, err := DecodeVolcanoNodeRegister(bad.in); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("DecodeVolcanoNodeRegister(%q) = %v, want error containing %q", bad.in, err, bad.want)
		}
	}
}

func TestVolcanoPodDevices(t *testing.T) {
	a := sampleAssignment()
	s := EncodeVolcanoPodDevices(a)
	const want = "GPU-a,NVIDIA,4096,30:GPU-b,NVIDIA,4096,30:;GPU-a,NVIDIA,1024,0:"
	if s != want {
		t.Fatalf("encoded %q, want %q", s, want)
	}
	got, err := DecodeVolcanoPodDevices(s)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range a.Containers {
		if !reflect.DeepEqual(got[i], c.Cards) {
			t.Fatalf("container %d: got %+v want %+v", i, got[i], c.Cards)
		}
	}
	for _, bad := range []struct{ in, want string }{
		{"GPU-a,AMD,1,1:", `type "AMD"`},
		{"GPU-a,NVIDIA,1,101:", `cores "101"`},
		{"GPU-a,NVIDIA,1:", "3 fields"},
		{"GPU-a,NVIDIA,x,1:", `memory "x"`},
	} {
		if _, err := DecodeVolcanoPodDevices(bad.in); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("DecodeVolcanoPodDevices(%q) = %v, want error containing %q", bad.in, err, bad.want)
		}
	}
}

func TestLinkNVLinks(t *testing.T) {
	for in, want := range map[LinkType]int{"NV1": 1, "NV12": 12, "NV": 0, "NVx": 0, "PIX": 0, "NV0": 0, "NV123": 0} {
		if n, _ := in.NVLinks(); n != want {
			t.Errorf("%q.NVLinks() = %d, want %d", in, n, want)
		}
	}
}
