package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// chartDigestValues names, for each image `release images` builds, the values.yaml key
// that pins it by digest in the packaged chart. admission.image.digest stays empty: the
// webhook runs from the vc-scheduler image and, while admission.image.repository is
// empty, the chart takes scheduler.image.digest for it; pinning it too would pin a user's
// own webhook image (admission.image.repository set) to the scheduler's digest.
var chartDigestValues = map[string][]string{
	"vc-scheduler":       {"scheduler", "image", "digest"},
	"vgpu-device-plugin": {"devicePlugin", "image", "digest"},
}

// valueSetting is one scalar of values.yaml that the packaged chart sets.
type valueSetting struct {
	Path  []string
	Value string
}

func (s valueSetting) key() string { return strings.Join(s.Path, ".") }

var sha256Digest = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// chartDigests reads the images.json `release images` wrote into dir and returns the
// values that pin the chart to those images: each image's index digest, the multi-platform
// index `release push` publishes byte for byte, so repository@digest pulls on every
// platform the image was built for.
func chartDigests(dir, version string) ([]valueSetting, error) {
	b, err := os.ReadFile(filepath.Join(dir, "images.json"))
	if err != nil {
		return nil, fmt.Errorf("the packaged chart pins the images by digest: %w (run make images first)", err)
	}
	var sum summary
	if err := json.Unmarshal(b, &sum); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "images.json"), err)
	}
	if sum.Version != version {
		return nil, fmt.Errorf("images.json holds the images of version %q, the release is %q", sum.Version, version)
	}
	var out []valueSetting
	seen := map[string]bool{}
	for _, is := range sum.Images {
		path, ok := chartDigestValues[is.Name]
		if !ok {
			return nil, fmt.Errorf("images.json lists %s, which the chart has no digest value for (tools/release chartDigestValues)", is.Name)
		}
		if seen[is.Name] {
			return nil, fmt.Errorf("images.json lists %s twice", is.Name)
		}
		seen[is.Name] = true
		d := is.Index.String()
		if !sha256Digest.MatchString(d) {
			return nil, fmt.Errorf("images.json: %s has index digest %q, want sha256:<64 hex>", is.Name, d)
		}
		out = append(out, valueSetting{Path: path, Value: d})
	}
	for name := range chartDigestValues {
		if !seen[name] {
			return nil, fmt.Errorf("images.json lacks %s, which the chart runs", name)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out, nil
}

// setValues sets each scalar of values.yaml in place, line by line, so that the rest of
// the file (its comments, which helm-docs and readers use, and its layout) is unchanged;
// then it parses the result and checks that each path holds its value.
func setValues(src []byte, settings []valueSetting) ([]byte, error) {
	out := src
	for _, s := range settings {
		var err error
		if out, err = setYAMLScalar(out, s.Path, s.Value); err != nil {
			return nil, fmt.Errorf("values.yaml %s: %w", s.key(), err)
		}
	}
	var values map[string]any
	if err := yaml.Unmarshal(out, &values); err != nil {
		return nil, fmt.Errorf("values.yaml after setting the digests: %w", err)
	}
	for _, s := range settings {
		var v any = values
		for _, k := range s.Path {
			m, ok := v.(map[string]any)
			if !ok {
				v = nil
				break
			}
			v = m[k]
		}
		if v != s.Value {
			return nil, fmt.Errorf("values.yaml %s is %v after setting it to %q", s.key(), v, s.Value)
		}
	}
	return out, nil
}

var yamlKeyLine = regexp.MustCompile(`^( *)([A-Za-z0-9_.-]+):(?:[ \t](.*))?$`)

// setYAMLScalar replaces the value of the one block-mapping key at path (an existing
// scalar) with the quoted value, keeping a trailing comment. Keys inside sequences and the
// text of block scalars are never matched; a path found nowhere or twice is an error.
func setYAMLScalar(src []byte, path []string, value string) ([]byte, error) {
	type open struct {
		indent int
		key    string // "-" for a sequence item
	}
	lines := strings.SplitAfter(string(src), "\n")
	var stack []open
	block := -1 // inside a block scalar (| or >) opened at this indentation
	found := -1
	for i, line := range lines {
		text := strings.TrimRight(line, "\r\n")
		trimmed := strings.TrimLeft(text, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		indent := len(text) - len(trimmed)
		if block >= 0 {
			if indent > block {
				continue
			}
			block = -1
		}
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		if trimmed == "-" || strings.HasPrefix(trimmed, "- ") {
			stack = append(stack, open{indent, "-"})
			continue
		}
		m := yamlKeyLine.FindStringSubmatch(text)
		if m == nil {
			continue // a flow collection's continuation line, or a plain scalar's
		}
		stack = append(stack, open{indent, m[2]})
		rest := strings.TrimSpace(m[3])
		if strings.HasPrefix(rest, "|") || strings.HasPrefix(rest, ">") {
			block = indent
		}
		if len(stack) != len(path) {
			continue
		}
		match := true
		for j, o := range stack {
			if o.key != path[j] {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		if found >= 0 {
			return nil, fmt.Errorf("set on lines %d and %d", found+1, i+1)
		}
		found = i
		val, comment := rest, ""
		if c := strings.Index(rest, " #"); c >= 0 {
			val, comment = strings.TrimSpace(rest[:c]), " "+strings.TrimSpace(rest[c:])
		}
		if val == "" || strings.ContainsAny(val[:1], "{[|>&*!") {
			return nil, fmt.Errorf("line %d: %q is not a scalar", i+1, rest)
		}
		lines[i] = m[1] + m[2] + ": " + strconv.Quote(value) + comment + line[len(text):]
	}
	if found < 0 {
		return nil, fmt.Errorf("not found")
	}
	return []byte(strings.Join(lines, "")), nil
}
