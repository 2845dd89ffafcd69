package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// The runtime's side of CDI, as containerd (enable_cdi) and CRI-O do it: every device
// name the kubelet passes in ContainerConfig.CDIDevices must be defined by a spec file
// in the spec directories, or the container is not created ("unresolvable CDI
// devices"); the edits of each named device, and of its spec as a whole, are applied to
// the container. Specs are read afresh for every container, so a spec written or
// changed while the node runs is seen, as the runtimes' directory watch sees it.

type cdiSpec struct {
	Kind           string      `json:"kind"`
	Devices        []cdiDevice `json:"devices"`
	ContainerEdits *cdiEdits   `json:"containerEdits"`
}

type cdiDevice struct {
	Name           string   `json:"name"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

type cdiEdits struct {
	Env         []string `json:"env"`
	DeviceNodes []struct {
		Path        string `json:"path"`
		HostPath    string `json:"hostPath"`
		Permissions string `json:"permissions"`
	} `json:"deviceNodes"`
	Mounts []struct {
		HostPath      string   `json:"hostPath"`
		ContainerPath string   `json:"containerPath"`
		Options       []string `json:"options"`
	} `json:"mounts"`
}

// resolveCDI returns the edits for the named devices, in order: each spec's common
// edits once, then each device's. As in the CDI library's cache, the files of one kind
// add up (a driver may write one spec per claim), a device a later directory defines
// replaces an earlier directory's, and one defined twice within a directory is a
// conflict that leaves it unresolvable.
func resolveCDI(dirs, names []string) ([]cdiEdits, error) {
	if len(names) == 0 {
		return nil, nil
	}
	type found struct {
		spec     *cdiSpec
		file     string
		dir, dev int
	}
	devices := map[string]found{} // kind=name -> where it is defined
	conflicts := map[string][]string{}
	for di, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		sort.Strings(files)
		for _, f := range files {
			if ext := filepath.Ext(f); ext != ".yaml" && ext != ".json" {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			s := &cdiSpec{}
			if err := yaml.Unmarshal(b, s); err != nil {
				return nil, fmt.Errorf("CDI spec %s: %w", f, err)
			}
			for i, d := range s.Devices {
				name := s.Kind + "=" + d.Name
				if prev, ok := devices[name]; ok && prev.dir == di {
					conflicts[name] = append(conflicts[name], prev.file, f)
					continue
				}
				devices[name] = found{spec: s, file: f, dir: di, dev: i}
			}
		}
	}
	var out []cdiEdits
	var missing []string
	common := map[string]bool{} // spec files whose common edits are in out
	for _, name := range names {
		if files, ok := conflicts[name]; ok {
			return nil, fmt.Errorf("failed to inject CDI devices: %s is defined by more than one spec (%s)", name, strings.Join(files, ", "))
		}
		d, ok := devices[name]
		if !ok {
			missing = append(missing, name)
			continue
		}
		if d.spec.ContainerEdits != nil && !common[d.file] {
			common[d.file] = true
			out = append(out, *d.spec.ContainerEdits)
		}
		out = append(out, d.spec.Devices[d.dev].ContainerEdits)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("failed to inject CDI devices: unresolvable CDI devices %s", strings.Join(missing, ", "))
	}
	return out, nil
}

// apply adds the edits to what the record says the container got: environment entries
// override the kubelet's, mounts and device nodes are added.
func (r *Record) apply(edits []cdiEdits) {
	for _, e := range edits {
		for _, kv := range e.Env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				r.Env[k] = v
			}
		}
		for _, m := range e.Mounts {
			r.Mounts = append(r.Mounts, Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: slices.Contains(m.Options, "ro")})
		}
		for _, d := range e.DeviceNodes {
			host, perm := d.HostPath, d.Permissions
			if host == "" {
				host = d.Path
			}
			if perm == "" {
				perm = "rwm"
			}
			r.Devices = append(r.Devices, Device{ContainerPath: d.Path, HostPath: host, Permissions: perm})
		}
	}
}
