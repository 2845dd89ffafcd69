package cdi

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// FileName is the spec file for a kind, vendor-class.yaml, as the CDI tools name them.
func FileName(kind string) string {
	return strings.ReplaceAll(kind, "/", "-") + ".yaml"
}

// Write validates the spec and writes it to dir/FileName(kind) atomically: runtimes
// that read the directory at any moment see the old file or the new one, never a part.
// An unchanged file is left alone (changed is false).
func Write(dir string, s *Spec) (changed bool, err error) {
	if err := Validate(s); err != nil {
		return false, err
	}
	b, err := yaml.Marshal(s)
	if err != nil {
		return false, fmt.Errorf("encode CDI spec %s: %w", s.Kind, err)
	}
	name := filepath.Join(dir, FileName(s.Kind))
	if old, err := os.ReadFile(name); err == nil && bytes.Equal(old, b) {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("create CDI spec directory: %w", err)
	}
	// The temporary name ends in neither .yaml nor .json, so no runtime parses it.
	tmp, err := os.CreateTemp(dir, "."+FileName(s.Kind)+".*.tmp")
	if err != nil {
		return false, fmt.Errorf("write CDI spec: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return false, fmt.Errorf("write CDI spec %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return false, fmt.Errorf("write CDI spec %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("write CDI spec %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return false, fmt.Errorf("write CDI spec %s: %w", name, err)
	}
	return true, nil
}

// DeviceNames lists the devices of the kind defined by the spec files (.yaml, .yml,
// .json) in dirs; a missing directory has none. Files that do not parse are skipped and
// reported in problems, as runtimes skip them.
func DeviceNames(dirs []string, kind string) (names map[string]string, problems []string) {
	names = map[string]string{} // device name -> file
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		sort.Slice(entries, func(a, b int) bool { return entries[a].Name() < entries[b].Name() })
		for _, e := range entries {
			ext := filepath.Ext(e.Name())
			if e.IsDir() || ext != ".yaml" && ext != ".yml" && ext != ".json" {
				continue
			}
			file := filepath.Join(dir, e.Name())
			b, err := os.ReadFile(file)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			var s Spec
			if err := yaml.Unmarshal(b, &s); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", file, err))
				continue
			}
			if s.Kind != kind {
				continue
			}
			for _, d := range s.Devices {
				names[d.Name] = file
			}
		}
	}
	return names, problems
}
