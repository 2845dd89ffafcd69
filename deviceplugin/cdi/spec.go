// Package cdi writes and checks Container Device Interface specs: the agent's own spec,
// which injects the hook library, and the names of the cards in the NVIDIA Container
// Toolkit's spec. The types follow the CDI specification (cdiVersion, kind, devices[],
// containerEdits); Validate applies its rules, so a spec the agent writes is one a
// CDI-enabled runtime (containerd, CRI-O) accepts.
package cdi

import (
	"errors"
	"fmt"
	"path"
	"strings"
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

// knownVersions are the cdiVersion values the CDI specification has defined.
var knownVersions = map[string]bool{"0.3.0": true, "0.4.0": true, "0.5.0": true, "0.6.0": true,
	"0.7.0": true, "0.8.0": true, "1.0.0": true}

// Spec is one CDI spec file.
type Spec struct {
	Version        string          `json:"cdiVersion"`
	Kind           string          `json:"kind"`
	Devices        []Device        `json:"devices"`
	ContainerEdits *ContainerEdits `json:"containerEdits,omitempty"`
}

// Device is one named device of a spec and what the runtime does to a container that
// asks for it.
type Device struct {
	Name           string         `json:"name"`
	ContainerEdits ContainerEdits `json:"containerEdits"`
}

// ContainerEdits are the changes applied to a container's OCI spec.
type ContainerEdits struct {
	Env         []string      `json:"env,omitempty"`
	DeviceNodes []*DeviceNode `json:"deviceNodes,omitempty"`
	Mounts      []*Mount      `json:"mounts,omitempty"`
	Hooks       []*Hook       `json:"hooks,omitempty"`
}

// DeviceNode is a device file made in the container.
type DeviceNode struct {
	Path        string `json:"path"`
	HostPath    string `json:"hostPath,omitempty"`
	Type        string `json:"type,omitempty"`
	Permissions string `json:"permissions,omitempty"`
}

// Mount is a mount added to the container.
type Mount struct {
	HostPath      string   `json:"hostPath"`
	ContainerPath string   `json:"containerPath"`
	Type          string   `json:"type,omitempty"`
	Options       []string `json:"options,omitempty"`
}

// Hook is an OCI hook run for the container.
type Hook struct {
	HookName string   `json:"hookName"`
	Path     string   `json:"path"`
	Args     []string `json:"args,omitempty"`
	Env      []string `json:"env,omitempty"`
	Timeout  *int     `json:"timeout,omitempty"`
}

// hookNames are the OCI hook points a CDI hook may name.
var hookNames = map[string]bool{"prestart": true, "createRuntime": true, "createContainer": true,
	"startContainer": true, "poststart": true, "poststop": true}

// QualifiedName is the fully-qualified CDI device name kind=name, as the kubelet passes it
// to the runtime.
func QualifiedName(kind, name string) string { return kind + "=" + name }

// ValidateKind checks vendor/class: the vendor a domain-like name (letters, digits, '-',
// '_', '.'), the class a name of letters, digits, '-' and '_'; both start with a letter
// and end with a letter or digit.
func ValidateKind(kind string) error {
	vendor, class, ok := strings.Cut(kind, "/")
	if !ok {
		return fmt.Errorf("kind %q is not vendor/class", kind)
	}
	if err := validateName("vendor", vendor, "-_.", false); err != nil {
		return fmt.Errorf("kind %q: %w", kind, err)
	}
	if err := validateName("class", class, "-_", false); err != nil {
		return fmt.Errorf("kind %q: %w", kind, err)
	}
	return nil
}

// ValidateDeviceName checks a device name: letters, digits, '-', '_', '.', ':', starting
// with a letter or digit and ending with one.
func ValidateDeviceName(name string) error {
	return validateName("device name", name, "-_.:", true)
}

func validateName(what, s, extra string, digitFirst bool) error {
	if s == "" {
		return fmt.Errorf("empty %s", what)
	}
	for i, r := range s {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		digit := r >= '0' && r <= '9'
		switch {
		case i == 0 && !letter && !(digitFirst && digit):
			return fmt.Errorf("%s %q must start with a letter%s", what, s, map[bool]string{true: " or digit"}[digitFirst])
		case !letter && !digit && !strings.ContainsRune(extra, r):
			return fmt.Errorf("%s %q has %q, allowed are letters, digits and %q", what, s, r, extra)
		case i == len(s)-1 && !letter && !digit:
			return fmt.Errorf("%s %q must end with a letter or digit", what, s)
		}
	}
	return nil
}

// Validate applies the CDI specification's rules to a spec and returns every problem.
func Validate(s *Spec) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...)))
	}
	if !knownVersions[s.Version] {
		bad("cdiVersion %q is not a CDI version", s.Version)
	}
	if err := ValidateKind(s.Kind); err != nil {
		bad("%v", err)
	}
	if len(s.Devices) == 0 {
		bad("devices: none")
	}
	seen := map[string]bool{}
	for i, d := range s.Devices {
		if err := ValidateDeviceName(d.Name); err != nil {
			bad("devices[%d]: %v", i, err)
		}
		if seen[d.Name] {
			bad("devices[%d]: name %q twice", i, d.Name)
		}
		seen[d.Name] = true
		if d.ContainerEdits.empty() {
			bad("devices[%d] (%s): containerEdits empty", i, d.Name)
		}
		for _, err := range d.ContainerEdits.validate() {
			bad("devices[%d] (%s): %v", i, d.Name, err)
		}
	}
	if s.ContainerEdits != nil {
		for _, err := range s.ContainerEdits.validate() {
			bad("containerEdits: %v", err)
		}
	}
	return errors.Join(errs...)
}

func (e *ContainerEdits) empty() bool {
	return len(e.Env)+len(e.DeviceNodes)+len(e.Mounts)+len(e.Hooks) == 0
}

func (e *ContainerEdits) validate() []error {
	var errs []error
	for i, kv := range e.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("env[%d] %q is not NAME=value", i, kv))
		}
	}
	for i, d := range e.DeviceNodes {
		if !path.IsAbs(d.Path) {
			errs = append(errs, fmt.Errorf("deviceNodes[%d]: path %q is not absolute", i, d.Path))
		}
		if d.Type != "" && !strings.Contains("bcup", d.Type) || len(d.Type) > 1 {
			errs = append(errs, fmt.Errorf("deviceNodes[%d]: type %q, want b, c, u or p", i, d.Type))
		}
	}
	for i, m := range e.Mounts {
		if m.HostPath == "" {
			errs = append(errs, fmt.Errorf("mounts[%d]: empty hostPath", i))
		}
		if !path.IsAbs(m.ContainerPath) {
			errs = append(errs, fmt.Errorf("mounts[%d]: containerPath %q is not absolute", i, m.ContainerPath))
		}
	}
	for i, h := range e.Hooks {
		if !hookNames[h.HookName] {
			errs = append(errs, fmt.Errorf("hooks[%d]: hookName %q is not an OCI hook point", i, h.HookName))
		}
		if h.Path == "" {
			errs = append(errs, fmt.Errorf("hooks[%d]: empty path", i))
		}
	}
	return errs
}
