package api

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func sampleMIGInstances() *NodeMIGInstances {
	return &NodeMIGInstances{Version: MIGInstancesVersion, Cards: map[string][]MIGInstance{
		"GPU-00000001-0000-4000-8000-000000000001": {
			{UUID: "MIG-aaaa", Profile: "3g.20gb", GI: 1, CI: 0, Start: 4, Size: 4, MemoryMiB: 19968, SMCount: 42},
			{UUID: "MIG-bbbb", Profile: "2g.10gb", GI: 2, CI: 0, Start: 0, Size: 2, MemoryMiB: 9856, SMCount: 28},
			{UUID: "MIG-cccc", Profile: "1g.5gb+me", GI: 3, CI: 0, Start: 2, Size: 1, MemoryMiB: 4864, SMCount: 14},
		},
		"GPU-00000003-0000-4000-8000-000000000003": {},
	}}
}

func TestMIGInstancesRoundTrip(t *testing.T) {
	in := sampleMIGInstances()
	s, err := EncodeMIGInstances(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeMIGInstances(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip changed the MIG instances:\n in %+v\nout %+v", in, out)
	}
}

func TestMIGInstancesDecodeErrors(t *testing.T) {
	const card = `"GPU-1"`
	inst := func(fields string) string { return `{"version":"v1","cards":{` + card + `:[` + fields + `]}}` }
	one := `{"uuid":"MIG-1","profile":"1g.5gb","gi":1,"ci":0,"start":0,"size":1,"memoryMiB":4864}`
	for _, tc := range []struct {
		name, doc, want string
		unsupported     bool
	}{
		{"a newer version is reported as unsupported", `{"version":"v2","cards":{},"x":1}`, `version "v2"`, true},
		{"missing cards are rejected", `{"version":"v1"}`, "cards: missing", false},
		{"an unknown field is rejected", inst(strings.Replace(one, `"ci":0`, `"ci":0,"extra":1`, 1)), `unknown field "extra"`, false},
		{"a bad profile name is quoted", inst(strings.Replace(one, "1g.5gb", "1g.5GB", 1)), `profile: "1g.5GB"`, false},
		{"a negative start is named", inst(strings.Replace(one, `"start":0`, `"start":-1`, 1)), "start: -1", false},
		{"a zero size is named", inst(strings.Replace(one, `"size":1`, `"size":0`, 1)), "size: 0", false},
		{"memory must be positive", inst(strings.Replace(one, `"memoryMiB":4864`, `"memoryMiB":0`, 1)), "memoryMiB: 0", false},
		{"a repeated MIG UUID is rejected", inst(one + "," + strings.Replace(one, `"gi":1`, `"gi":2`, 1)), `"MIG-1" repeats`, false},
		{"two GPU instances on one slice overlap",
			inst(one + "," + strings.NewReplacer(`"gi":1`, `"gi":2`, "MIG-1", "MIG-2").Replace(one)), "overlap gi 1", false},
		{"one GPU instance cannot change shape between its compute instances",
			inst(one + "," + strings.NewReplacer(`"ci":0`, `"ci":1`, "MIG-1", "MIG-2", `"size":1`, `"size":2`).Replace(one)), "gi 1 is 1g.5gb at 0+2", false},
		{"a bad card UUID is rejected", `{"version":"v1","cards":{"GPU 1":[]}}`, `uuid "GPU 1"`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeMIGInstances(tc.doc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if got := errors.Is(err, ErrUnsupportedVersion); got != tc.unsupported {
				t.Fatalf("errors.Is(ErrUnsupportedVersion) = %v, want %v", got, tc.unsupported)
			}
			if !tc.unsupported && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
		})
	}
}

func TestMIGProfileNames(t *testing.T) {
	for _, ok := range []string{"1g.5gb", "1g.10gb+me", "7g.180gb", "4g.24gb", "1g.23gb+me", "1g.24gb+me.all", "1g.24gb-me", "1g.24gb+gfx"} {
		if err := ValidateMIGProfileName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1g", "g.5gb", "0g.5gb", "1g.05gb", "1g.5gb+", "1g.5gb+ME", "1g.5gb+me+x", "1g.5gb+me.", "1g.5gb-", "-1g.5gb", "mig-1g.5gb", "1g.5", "+1g.5gb"} {
		if err := ValidateMIGProfileName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// An inventory written by the release before MIG instances (the stored sample is
// byte for byte what commit 3a90dcc's EncodeInventory wrote) still decodes, and an
// inventory of this build whose cards carry MIG instances is written as exactly that
// document: a scheduler of either release reads what the other writes. The instances
// travel in AnnotationMIGInstances.
func TestTheInventoryWithMIGInstancesIsWhatThePreviousReleaseWrote(t *testing.T) {
	stored, err := os.ReadFile("testdata/inventory-v1-before-mig.json")
	if err != nil {
		t.Fatal(err)
	}
	old, err := DecodeInventory(string(stored))
	if err != nil {
		t.Fatalf("this build cannot read the previous release's inventory: %v", err)
	}
	if old.Cards[0].MIGInstances != nil || !old.Cards[0].MIG {
		t.Fatalf("the previous inventory read back as %+v", old.Cards[0])
	}

	migs := sampleMIGInstances()
	withMIG := old.WithMIGInstances(migs)
	if len(withMIG.Cards[0].MIGInstances) != 3 || old.Cards[0].MIGInstances != nil {
		t.Fatal("WithMIGInstances did not fill a copy of the inventory")
	}
	enc, err := EncodeInventory(withMIG)
	if err != nil {
		t.Fatal(err)
	}
	if enc != string(stored) {
		t.Fatalf("the inventory changed shape:\n got %s\nwant %s", enc, stored)
	}
	var prev previousInventory
	if err := decodeStrict(enc, &prev); err != nil {
		t.Fatalf("the previous release's strict reader refuses this build's inventory: %v", err)
	}

	published := withMIG.MIGInstances()
	if published == nil || !reflect.DeepEqual(published.Cards["GPU-00000001-0000-4000-8000-000000000001"], migs.Cards["GPU-00000001-0000-4000-8000-000000000001"]) {
		t.Fatalf("published MIG instances %+v", published)
	}
	// Card 3 of the sample names no card of this node; card 1 of the node is not in MIG mode.
	if _, ok := published.Cards["GPU-00000002-0000-4000-8000-000000000002"]; ok || len(published.Cards) != 1 {
		t.Fatalf("published MIG instances for a card not in MIG mode: %+v", published.Cards)
	}
}

func TestAnInventoryWithoutMIGPublishesNoMIGAnnotation(t *testing.T) {
	if m := sampleInventory().MIGInstances(); m != nil {
		t.Fatalf("a MIG card whose layout was never read published %+v", m)
	}
}
