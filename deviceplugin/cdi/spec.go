// Package cdi holds Tessera's policy for Container Device Interface specs: the kind,
// device and cdiVersion of the agent's own spec (which injects the hook library), where
// it is written and when it is rewritten, and how the cards' names are found in the
// NVIDIA Container Toolkit's specs. The spec types, the validation rules, name parsing
// and the atomic writer are those of the CDI project's own library
// (tags.cncf.io/container-device-interface), the one containerd and CRI-O read specs
// with, so that a spec the agent writes is one they accept.
package cdi

import (
	"errors"
	"fmt"
	"reflect"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// Version is the cdiVersion the agent writes: the oldest that has everything it uses
// (bind mounts with a type), so runtimes with older CDI libraries read it too.
const Version = "0.5.0"

// HookKind is the kind of the agent's own spec; HookDevice is its one device.
const (
	HookKind   = "tessera.io/vgpu"
	HookDevice = "hook"
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid CDI spec")

// QualifiedName is the fully-qualified CDI device name vendor/class=name, as the
// kubelet passes it to the runtime. kind is vendor/class (ValidateKind).
func QualifiedName(kind, name string) string {
	vendor, class := parser.ParseQualifier(kind)
	return parser.QualifiedName(vendor, class, name)
}

// ValidateKind checks that kind is vendor/class by the CDI library's naming rules.
func ValidateKind(kind string) error {
	vendor, class := parser.ParseQualifier(kind)
	if vendor == "" {
		return fmt.Errorf("kind %q is not vendor/class", kind)
	}
	if err := parser.ValidateVendorName(vendor); err != nil {
		return fmt.Errorf("kind %q: %w", kind, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return fmt.Errorf("kind %q: %w", kind, err)
	}
	return nil
}

// Validate checks a spec with the CDI library's rules (the version against the
// features used, the names, every container edit) and returns every problem at once.
// The library checks a whole spec only while reading or writing a file; this runs its
// exported checks on a spec in memory, so that a bad spec is refused before any file
// is touched and the error names each field.
func Validate(s *specs.Spec) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...)))
	}
	if err := specs.ValidateVersion(s); err != nil {
		bad("cdiVersion %q: %v", s.Version, err)
	}
	if err := ValidateKind(s.Kind); err != nil {
		bad("%v", err)
	}
	if len(s.Devices) == 0 {
		bad("devices: none")
	}
	seen := map[string]bool{}
	for i := range s.Devices {
		d := &s.Devices[i]
		if err := parser.ValidateDeviceName(d.Name); err != nil {
			bad("devices[%d]: %v", i, err)
		}
		if seen[d.Name] {
			bad("devices[%d]: name %q twice", i, d.Name)
		}
		seen[d.Name] = true
		// A device must change the container; the spec's own edits may be empty.
		if reflect.ValueOf(d.ContainerEdits).IsZero() {
			bad("devices[%d] (%s): containerEdits empty", i, d.Name)
		}
		if err := (&cdiapi.ContainerEdits{ContainerEdits: &d.ContainerEdits}).Validate(); err != nil {
			bad("devices[%d] (%s): %v", i, d.Name, err)
		}
	}
	if err := (&cdiapi.ContainerEdits{ContainerEdits: &s.ContainerEdits}).Validate(); err != nil {
		bad("containerEdits: %v", err)
	}
	return errors.Join(errs...)
}
