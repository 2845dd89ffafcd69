package cdi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// FileName is the spec file for a kind, vendor-class.yaml, as the CDI library names it.
func FileName(kind string) string {
	vendor, class := parser.ParseQualifier(kind)
	return cdiapi.GenerateSpecName(vendor, class) + ".yaml"
}

// Write validates the spec and writes it to dir/FileName(kind) with the CDI library's
// writer, which replaces the file atomically: runtimes that read the directory at any
// moment see the old file or the new one, never a part. A file that already holds the
// same spec is left alone (changed is false), whoever formatted it.
func Write(dir string, s *specs.Spec) (changed bool, err error) {
	if err := Validate(s); err != nil {
		return false, err
	}
	path := filepath.Join(dir, FileName(s.Kind))
	if same, err := holds(path, s); err != nil || same {
		return false, err
	}
	// No watcher and no refresh of its own: the cache is only the library's way to write.
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return false, fmt.Errorf("write CDI spec %s: %w", path, err)
	}
	if err := cache.WriteSpec(s, filepath.Base(path)); err != nil {
		return false, fmt.Errorf("write CDI spec %s: %w", path, err)
	}
	// The library creates the file 0600; specs are read by tools that are not root too
	// (nvidia-ctk cdi list), and the agent has always written them world-readable.
	if err := os.Chmod(path, 0o644); err != nil {
		return true, fmt.Errorf("write CDI spec %s: %w", path, err)
	}
	return true, nil
}

// holds reports whether the file at path is a spec equal to s. A missing, unreadable
// or invalid file does not hold it (and is replaced); only a failure to encode s is an
// error.
func holds(path string, s *specs.Spec) (bool, error) {
	old, err := cdiapi.ReadSpec(path, 0)
	if err != nil {
		return false, nil
	}
	a, err := json.Marshal(old.Spec)
	if err != nil {
		return false, nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return false, fmt.Errorf("encode CDI spec %s: %w", s.Kind, err)
	}
	return bytes.Equal(a, b), nil
}

// DeviceNames lists the devices of the kind that the spec files in dirs define, read
// as runtimes read them (the CDI library's cache: .yaml and .json files, later
// directories overriding earlier ones); a missing directory has none. Files the
// library refuses are skipped, as runtimes skip them, and reported in problems.
func DeviceNames(dirs []string, kind string) (names map[string]string, problems []string) {
	names = map[string]string{} // device name -> file
	for _, dir := range dirs {
		if _, err := os.ReadDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			problems = append(problems, err.Error())
		}
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dirs...), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return names, append(problems, err.Error())
	}
	for _, qualified := range cache.ListDevices() {
		vendor, class, name, err := parser.ParseQualifiedName(qualified)
		if err != nil || vendor+"/"+class != kind {
			continue
		}
		if d := cache.GetDevice(qualified); d != nil {
			names[name] = d.GetSpec().GetPath()
		}
	}
	var files []string
	errs := cache.GetErrors()
	for file := range errs {
		files = append(files, file)
	}
	sort.Strings(files)
	for _, file := range files {
		msg := errors.Join(errs[file]...).Error()
		if !strings.Contains(msg, file) {
			msg = file + ": " + msg
		}
		problems = append(problems, msg)
	}
	return names, problems
}
