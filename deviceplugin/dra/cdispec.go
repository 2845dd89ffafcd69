package dra

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cdi"
	"github.com/tessera-gpu/tessera/deviceplugin/hookenv"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

// ClaimKind is the CDI kind of the per-claim specs. Each prepared claim has its own spec
// file holding one device per share (<claim UID>-<device>); what every container of the
// claim needs (the limits file, the hook library, the environment) is in the
// spec's own edits, which a runtime applies once however many of its devices a container
// gets.
const ClaimKind = "vgpu.tessera.io/claim"

// EnvClaim names the claim in a container given one of its devices (for people reading
// a container's environment; vgpu-core does not read it).
const EnvClaim = "TESSERA_DRA_CLAIM"

// CDIDeviceIDs are the CDI devices the kubelet passes to the runtime for a share: the
// card, as the NVIDIA toolkit's spec names it by UUID (cardKind, nvidia.com/gpu), and the
// share's device of the claim's spec.
func CDIDeviceIDs(uid string, s Share, cardKind string) []string {
	return []string{cdi.QualifiedName(cardKind, s.UUID), cdi.QualifiedName(ClaimKind, claimDevice(uid, s.Device))}
}

func claimDevice(uid, device string) string { return uid + "-" + device }

// ClaimSpecFile is the file name of a claim's spec in the CDI spec directory.
func ClaimSpecFile(uid string) string {
	vendor, class := parser.ParseQualifier(ClaimKind)
	return cdiapi.GenerateTransientSpecName(vendor, class, uid) + ".yaml"
}

// ClaimSpec is a claim's CDI spec. limits is the claim's limits file as
// hookenv.Container.LimitsFile renders it; hostDir is the claim's directory in the
// records store, mounted file by file as hookenv.ContainerMounts says. The environment repeats the limits file's values, as the device
// plugin's Allocate response does, and sets NVIDIA_VISIBLE_DEVICES to void so that a
// runtime in legacy mode adds no card beyond the CDI ones.
func ClaimSpec(uid string, shares []Share, c *hookenv.Container, limits, hostDir string) *specs.Spec {
	env := []string{
		api.EnvLimitsFile + "=" + hookenv.LimitsPath,
		"CUDA_DEVICE_ORDER=PCI_BUS_ID",
		"NVIDIA_VISIBLE_DEVICES=" + hookenv.VoidDevices,
	}
	for _, line := range strings.Split(limits, "\n") {
		if line != "" && !strings.HasPrefix(line, "version=") {
			env = append(env, line)
		}
	}
	edits := specs.ContainerEdits{Env: env}
	for _, m := range hookenv.ContainerMounts(hostDir) {
		opt := "rw"
		if m.ReadOnly {
			opt = "ro"
		}
		edits.Mounts = append(edits.Mounts, &specs.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Type: "bind",
			Options: []string{opt, "nosuid", "nodev", "bind"}})
	}
	hook := c.HookSpec().Devices[0].ContainerEdits
	edits.Env = append(edits.Env, hook.Env...)
	edits.Mounts = append(edits.Mounts, hook.Mounts...)
	s := &specs.Spec{Version: cdi.Version, Kind: ClaimKind, ContainerEdits: edits}
	for _, sh := range shares {
		s.Devices = append(s.Devices, specs.Device{Name: claimDevice(uid, sh.Device),
			ContainerEdits: specs.ContainerEdits{Env: []string{EnvClaim + "=" + uid}}})
	}
	return s
}

// limitsRecord is the record hookenv renders a claim's limits file from: the claim's
// cards in index order, the default QoS class (a claim has no way to ask for another
// yet), and its region (region.go: the record's container names the region file).
func limitsRecord(uid string, p PreparedClaim) *records.Record {
	rec := &records.Record{Namespace: p.Namespace, Pod: p.Name, UID: uid, Container: regionContainer(uid, p.Region), QoS: api.DefaultQoS,
		RegionVolume: p.Region == RegionVolume}
	for _, d := range p.Devices {
		rec.Cards = append(rec.Cards, api.CardAssignment{UUID: d.UUID, MemoryMiB: d.MemoryMiB, Cores: d.Cores})
	}
	return rec
}

// writeClaimSpec validates the spec and writes it atomically with the CDI library's
// writer, world-readable as the agent's other specs.
func writeClaimSpec(dir, uid string, s *specs.Spec) error {
	if err := cdi.Validate(s); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write CDI spec of claim %s: %w", uid, err)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return fmt.Errorf("write CDI spec of claim %s: %w", uid, err)
	}
	name := ClaimSpecFile(uid)
	if err := cache.WriteSpec(s, name); err != nil {
		return fmt.Errorf("write CDI spec of claim %s: %w", uid, err)
	}
	if err := os.Chmod(filepath.Join(dir, name), 0o644); err != nil {
		return fmt.Errorf("write CDI spec of claim %s: %w", uid, err)
	}
	return nil
}

// removeClaimSpec deletes a claim's spec; a missing file is not an error.
func removeClaimSpec(dir, uid string) error {
	err := os.Remove(filepath.Join(dir, ClaimSpecFile(uid)))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove CDI spec of claim %s: %w", uid, err)
	}
	return nil
}
