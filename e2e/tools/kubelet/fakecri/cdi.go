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
// edits once, then each device's.
func resolveCDI(dirs, names []string) ([]cdiEdits, error) {
	if len(names) == 0 {
		return nil, nil
	}
	specs := map[string]*cdiSpec{} // kind -> spec; later directories win, as in the CDI cache
	for _, dir := range dirs {
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
			specs[s.Kind] = s
		}
	}
	var out []cdiEdits
	var missing []string
	common := map[string]bool{}
	for _, name := range names {
		kind, dev, _ := strings.Cut(name, "=")
		s := specs[kind]
		i := -1
		if s != nil {
			i = slices.IndexFunc(s.Devices, func(d cdiDevice) bool { return d.Name == dev })
		}
		if i < 0 {
			missing = append(missing, name)
			continue
		}
		if s.ContainerEdits != nil && !common[kind] {
			common[kind] = true
			out = append(out, *s.ContainerEdits)
		}
		out = append(out, s.Devices[i].ContainerEdits)
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
