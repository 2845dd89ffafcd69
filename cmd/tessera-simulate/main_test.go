package main

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tessera-gpu/tessera/cli"
)

func TestSimulateRefusesAnUnknownOutput(t *testing.T) {
	if err := simulate(&bytes.Buffer{}, "", "yaml"); !errors.Is(err, cli.ErrUsage) {
		t.Errorf("-o yaml: %v, want a usage error", err)
	}
}
