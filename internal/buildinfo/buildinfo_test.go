package buildinfo

import (
	"strings"
	"testing"
)

func TestStringNamesProgramVersionAndCommit(t *testing.T) {
	oldV, oldR := Version, Revision
	defer func() { Version, Revision = oldV, oldR }()
	Version, Revision = "1.2.3", "0123456789abcdef0123456789abcdef01234567"
	got := String("vgpu-device-plugin")
	for _, want := range []string{"vgpu-device-plugin 1.2.3", "commit 0123456789abcdef0123456789abcdef01234567"} {
		if !strings.Contains(got, want) {
			t.Errorf("String() = %q, want it to contain %q", got, want)
		}
	}
}

func TestCommitWithoutLinkerValueIsNeverEmpty(t *testing.T) {
	oldR := Revision
	defer func() { Revision = oldR }()
	Revision = ""
	if Commit() == "" {
		t.Fatal("Commit() is empty without a linker value")
	}
}
