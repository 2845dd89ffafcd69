// Command fakenvidiaruntime is the OCI runtime containerd's runc shim executes on the
// e2e harness's real-runtime nodes, in place of NVIDIA's nvidia-container-runtime: it edits
// a container's OCI spec at `create` and then executes runc with the same arguments.
//
//   - In env mode (cardHandoff: env) the node agent names the cards in
//     NVIDIA_VISIBLE_DEVICES. As nvidia-container-runtime does in its CDI mode, each entry
//     becomes the CDI device nvidia.com/gpu=<entry> ("all": every card by index; "void",
//     "none" or empty: nothing), injected from the node's CDI specs (the fake toolkit's).
//     In cdi mode the variable is "void": containerd's CRI has injected the CDI devices the
//     kubelet named, and nothing changes here.
//   - For each workload container (not a sandbox) it writes a record of the spec runc gets
//     (environment, bind mounts, device nodes, annotations, the Tessera limits file read
//     through the mounts) as <namespace>_<pod>_<uid>_<container>.json, in the JSON shape of
//     the in-memory runtime's records (e2e/internal/workload.CRIRecord), so the scenarios'
//     handoff checks read what a real runtime ran.
//
// Its settings come from the environment containerd was started with, which the shim and
// so this program inherit: TESSERA_RUNC (runc), TESSERA_CDI_DIR (the node's spec
// directory), TESSERA_RECORD_DIR and TESSERA_NODE.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

func main() {
	runc := os.Getenv("TESSERA_RUNC")
	if runc == "" {
		fmt.Fprintln(os.Stderr, "fakenvidiaruntime: TESSERA_RUNC is not set")
		os.Exit(1)
	}
	if bundle, id, ok := createArgs(os.Args[1:]); ok {
		if err := prepare(bundle, id); err != nil {
			fmt.Fprintln(os.Stderr, "fakenvidiaruntime:", err)
			os.Exit(1)
		}
	}
	err := syscall.Exec(runc, append([]string{runc}, os.Args[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "fakenvidiaruntime: exec %s: %v\n", runc, err)
	os.Exit(1)
}

// runcGlobalsWithValue are runc's global flags that take a separate value.
var runcGlobalsWithValue = map[string]bool{"--root": true, "--log": true, "--log-format": true, "--criu": true,
	"--rootless": true}

// createArgs finds a `create` command among runc's arguments and returns its bundle
// (--bundle, -b, or the working directory) and the container ID (its last argument).
func createArgs(args []string) (bundle, id string, ok bool) {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			break
		}
		if runcGlobalsWithValue[a] {
			i++
		}
	}
	if i >= len(args) || args[i] != "create" || len(args) < i+2 {
		return "", "", false
	}
	rest := args[i+1:]
	for j := 0; j < len(rest); j++ {
		switch a := rest[j]; {
		case (a == "--bundle" || a == "-b") && j+1 < len(rest):
			bundle = rest[j+1]
		case strings.HasPrefix(a, "--bundle="):
			bundle = strings.TrimPrefix(a, "--bundle=")
		}
	}
	if bundle == "" {
		bundle = "."
	}
	return bundle, rest[len(rest)-1], true
}

// prepare injects the env-mode cards into the bundle's spec and records the container.
func prepare(bundle, id string) error {
	path := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the OCI spec: %w", err)
	}
	var spec oci.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	if devices := envDevices(&spec); len(devices) > 0 {
		if err := inject(&spec, os.Getenv("TESSERA_CDI_DIR"), devices); err != nil {
			return err
		}
		out, err := json.Marshal(&spec)
		if err != nil {
			return err
		}
		if err := os.WriteFile(path, out, 0o600); err != nil {
			return fmt.Errorf("write the OCI spec: %w", err)
		}
	}
	if dir := os.Getenv("TESSERA_RECORD_DIR"); dir != "" && spec.Annotations[annotationType] == "container" {
		return newRecord(id, os.Getenv("TESSERA_NODE"), &spec).write(dir)
	}
	return nil
}

const cardKind = "nvidia.com/gpu"

// envDevices are the CDI devices NVIDIA_VISIBLE_DEVICES names.
func envDevices(spec *oci.Spec) []string {
	if spec.Process == nil {
		return nil
	}
	var value string
	for _, kv := range spec.Process.Env {
		if k, v, _ := strings.Cut(kv, "="); k == "NVIDIA_VISIBLE_DEVICES" {
			value = v // the last one wins, as in the process's environment
		}
	}
	switch value {
	case "", "void", "none":
		return nil
	}
	var out []string
	for _, d := range strings.Split(value, ",") {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, cardKind+"="+d)
		}
	}
	return out
}

// inject applies the CDI devices' edits from the spec directory; "all" is every card by
// index (the fake toolkit names each card by index and by UUID).
func inject(spec *oci.Spec, dir string, devices []string) error {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return fmt.Errorf("CDI specs in %s: %w", dir, err)
	}
	var names []string
	for _, d := range devices {
		if d != cardKind+"=all" {
			names = append(names, d)
			continue
		}
		for _, known := range cache.ListDevices() {
			if k, n, _ := strings.Cut(known, "="); k == cardKind && strings.Trim(n, "0123456789") == "" {
				names = append(names, known)
			}
		}
	}
	if unresolved, err := cache.InjectDevices(spec, names...); err != nil {
		return fmt.Errorf("NVIDIA_VISIBLE_DEVICES: CDI devices %v unresolvable in %s: %w", unresolved, dir, err)
	}
	return nil
}
