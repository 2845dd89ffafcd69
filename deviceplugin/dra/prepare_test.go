package dra

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/hookenv"
)

type staticCards []api.Card

func (s staticCards) Inventory() *api.NodeInventory { return &api.NodeInventory{Cards: s} }

func TestPrepareRefusesOvercommit(t *testing.T) {
	dir := t.TempDir()
	p, err := NewPreparer(PrepareConfig{StateDir: filepath.Join(dir, "dra"), CDISpecDir: filepath.Join(dir, "cdi"), CardKind: "nvidia.com/gpu",
		Pool: "node-a", Container: hookenv.Container{HookLibrary: "/usr/lib/libvgpu.so", PreloadHostFile: filepath.Join(dir, "preload")}},
		staticCards(testCards), nil)
	if err != nil {
		t.Fatal(err)
	}
	claim := func(uid, mem, cores string) *resourceapi.ResourceClaim {
		c := claimWith(result("card-0", consumedOf(mem, cores)))
		c.Name, c.UID = "c-"+uid[len(uid)-1:], types.UID(uid)
		return c
	}
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  string // "" for success
	}{
		{"a first share of 60 cores fits", claim("3f0c1e9a-0000-4000-8000-000000000011", "4Gi", "60"), ""},
		{"a second share of 60 cores would make 120", claim("3f0c1e9a-0000-4000-8000-000000000012", "4Gi", "60"),
			"120 of 100 cores with the claims already prepared there (team-a/c-1)"},
		{"memory beyond the card's rest is refused too", claim("3f0c1e9a-0000-4000-8000-000000000013", "20481Mi", "0"),
			"24577 of 24576 MiB"},
		{"the rest of the card fits exactly", claim("3f0c1e9a-0000-4000-8000-000000000014", "20480Mi", "40"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{tt.claim})
			if err != nil {
				t.Fatal(err)
			}
			got := res[tt.claim.UID].Err
			switch {
			case tt.want == "" && got != nil:
				t.Errorf("refused: %v", got)
			case tt.want != "" && (!errors.Is(got, ErrOvercommit) || !strings.Contains(got.Error(), tt.want)):
				t.Errorf("err = %v, want ErrOvercommit mentioning %q", got, tt.want)
			}
		})
	}
}
