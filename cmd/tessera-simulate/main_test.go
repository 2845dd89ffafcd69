package main

import (
	"errors"
	"testing"

	"github.com/tessera-gpu/tessera/cli"
)

func TestSimulateRefusesAnUnknownOutput(t *testing.T) {
	if err := simulate("", "yaml"); !errors.Is(err, cli.ErrUsage) {
		t.Errorf("-o yaml: %v, want a usage error", err)
	}
}
