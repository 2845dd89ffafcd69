package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"
)

func untarGz(t *testing.T, b []byte) map[string]string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[h.Name] = string(data)
	}
}

func TestPackagedChartIsTheChartAtTheReleaseVersion(t *testing.T) {
	dir := filepath.Join("..", "..", "charts", "tessera")
	a, err := packageChart(dir, "9.8.7", testTime, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := packageChart(dir, "9.8.7", testTime, nil)
	if !bytes.Equal(a, b) {
		t.Error("two packagings of the chart differ")
	}
	files := untarGz(t, a)
	var meta struct{ Name, Version, AppVersion string }
	if err := yaml.Unmarshal([]byte(files["tessera/Chart.yaml"]), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Name != "tessera" || meta.Version != "9.8.7" || meta.AppVersion != "9.8.7" {
		t.Errorf("packaged Chart.yaml: %+v", meta)
	}
	for _, want := range []string{"tessera/values.yaml", "tessera/templates/device-plugin.yaml", "tessera/templates/_helpers.tpl"} {
		if _, ok := files[want]; !ok {
			t.Errorf("the package lacks %s", want)
		}
	}
	src, _ := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if files["tessera/values.yaml"] != string(src) {
		t.Error("values.yaml changed in the package")
	}
}

// krewPackages are the krew packages of a release of fake programs, one per platform,
// and the manifest naming them.
func krewPackages(t *testing.T) (manifest []byte, archives map[string]map[string]string, sums map[string]string) {
	t.Helper()
	o := &buildOptions{Version: "1.2.3", Source: "https://example.test/tessera"}
	extra := krewFiles{License: []byte("Apache License"), Completion: []byte("#!/usr/bin/env sh\n")}
	archives, sums = map[string]map[string]string{}, map[string]string{}
	var platforms []krewPlatform
	programs := map[string]map[string][]byte{}
	for _, tg := range binaryTargets(o) {
		plat := tg.os + "/" + tg.arch
		if n := krewName(tg.prog, tg.os); n != "" {
			if programs[plat] == nil {
				programs[plat] = map[string][]byte{}
			}
			programs[plat][n] = []byte(n + " for " + plat)
		}
	}
	for _, plat := range cliPlatforms() {
		goos, arch, _ := strings.Cut(plat, "/")
		files := krewArchive(goos, programs[plat], extra)
		tgz, err := tarGz(files, testTime)
		if err != nil {
			t.Fatal(err)
		}
		sums[plat] = fmt.Sprintf("%x", sha256.Sum256(tgz))
		archives[plat] = untarGz(t, tgz)
		platforms = append(platforms, newKrewPlatform(goos, arch, "https://example.test/"+krewArchiveName(o.Version, goos, arch), sums[plat], files))
	}
	manifest, err := krewManifest(o, platforms)
	if err != nil {
		t.Fatal(err)
	}
	return manifest, archives, sums
}

func TestKrewManifestNamesEachPlatformsArchiveAndDigest(t *testing.T) {
	b, archives, sums := krewPackages(t)
	var m struct {
		Kind string
		Spec struct {
			Version   string
			Caveats   string
			Platforms []struct {
				Selector         struct{ MatchLabels map[string]string } `json:"selector"`
				URI, Sha256, Bin string
				Files            []struct{ From, To string }
			}
		}
	}
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if m.Kind != "Plugin" || m.Spec.Version != "v1.2.3" || len(m.Spec.Platforms) != len(cliPlatforms()) ||
		!strings.Contains(m.Spec.Caveats, "completion kubectl-plugin") {
		t.Fatalf("krew manifest:\n%s", b)
	}
	for _, p := range m.Spec.Platforms {
		plat := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		files := archives[plat]
		if p.Sha256 != sums[plat] || !strings.HasSuffix(p.URI, "kubectl-tessera_1.2.3_"+strings.ReplaceAll(plat, "/", "_")+".tar.gz") {
			t.Errorf("%s: uri %s sha256 %s, want its archive's", plat, p.URI, p.Sha256)
		}
		if _, ok := files[p.Bin]; !ok {
			t.Errorf("%s: bin %s is not in the archive %v", plat, p.Bin, files)
		}
		// krew copies only what files names: every file of the archive, into the plugin's directory.
		var from []string
		for _, f := range p.Files {
			from = append(from, f.From)
			if _, ok := files[f.From]; !ok || f.To != "." {
				t.Errorf("%s: files entry %+v is not a file of the archive copied to .", plat, f)
			}
		}
		if len(from) != len(files) {
			t.Errorf("%s: files %v, archive %v", plat, from, files)
		}
	}
}

// krew-index takes a plugin only with its licence; kubectl completes through
// kubectl_complete-tessera; Windows runs .exe files.
func TestKrewArchivesCarryTheLicenseTheCompletionAndWindowsExecutables(t *testing.T) {
	_, archives, _ := krewPackages(t)
	for plat, files := range archives {
		var names []string
		for n := range files {
			names = append(names, n)
		}
		sort.Strings(names)
		want := "LICENSE kubectl-tessera kubectl_complete-tessera tessera-simulate"
		if strings.HasPrefix(plat, "windows/") {
			want = "LICENSE kubectl-tessera.exe" // no tessera-simulate: Volcano's scheduler does not build for Windows
		}
		if got := strings.Join(names, " "); got != want {
			t.Errorf("%s package holds %s, want %s", plat, got, want)
		}
		if files["LICENSE"] != "Apache License" {
			t.Errorf("%s: LICENSE %q", plat, files["LICENSE"])
		}
	}
	if _, ok := archives["windows/amd64"]; !ok {
		t.Error("no Windows package")
	}
}

// The simulator everywhere Volcano's scheduler builds: not on Windows.
func TestReleaseShipsTheSimulatorBesideTheCLIOnEveryPlatform(t *testing.T) {
	o := &buildOptions{SchedulerPlatforms: []string{"linux/amd64"}, AgentPlatforms: []string{"linux/amd64"}}
	inKrew := map[string][]string{}
	for _, tg := range binaryTargets(o) {
		if n := krewName(tg.prog, tg.os); n != "" {
			inKrew[tg.os+"/"+tg.arch] = append(inKrew[tg.os+"/"+tg.arch], n)
		}
	}
	for _, plat := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64"} {
		want := "kubectl-tessera tessera-simulate"
		if plat == "windows/amd64" {
			want = "kubectl-tessera.exe"
		}
		if got := strings.Join(inKrew[plat], " "); got != want {
			t.Errorf("krew package for %s holds %q, want %s", plat, got, want)
		}
	}
	if len(inKrew) != 5 {
		t.Errorf("krew packages for %d platforms, want 5: %v", len(inKrew), inKrew)
	}
	if krewName(scheduler, "linux") != "" || krewName(agent, "linux") != "" {
		t.Error("a daemon is packaged in the CLI's krew archive")
	}
}

func TestSHA256SUMSCoversEveryFile(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "images"), 0o755)
	os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644)
	os.WriteFile(filepath.Join(dir, "images", "b.tar"), []byte("b"), 0o644)
	if err := writeSums(dir); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	want := fmt.Sprintf("%x  a\n%x  images/b.tar\n", sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b")))
	if string(b) != want {
		t.Errorf("SHA256SUMS:\n%s\nwant:\n%s", b, want)
	}
	if strings.Contains(string(b), "SHA256SUMS") {
		t.Error("SHA256SUMS lists itself")
	}
}

// writeImagesJSON writes an images.json like `release images` does, with made-up digests.
func writeImagesJSON(t *testing.T, dir, version string, names ...string) map[string]string {
	t.Helper()
	sum := summary{Version: version, Revision: "abc"}
	digests := map[string]string{}
	for i, n := range names {
		h := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sha256.Sum256([]byte(fmt.Sprint(n, i))))}
		sum.Images = append(sum.Images, imageSummary{Name: n, Ref: "ghcr.io/tessera-gpu/" + n + ":" + version, Index: h})
		digests[n] = h.String()
	}
	b, _ := json.MarshalIndent(sum, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "images.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return digests
}

// A released chart pulls the release's images by digest by default: values.yaml in the
// package has scheduler.image.digest and devicePlugin.image.digest set to the indexes
// images.json records, admission.image.digest left to follow the scheduler's, and not
// one other line changed.
func TestPackagedChartPinsTheReleasedImagesByDigest(t *testing.T) {
	images := t.TempDir()
	want := writeImagesJSON(t, images, "9.8.7", "vc-scheduler", "vgpu-device-plugin")
	settings, err := chartDigests(images, "9.8.7")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", "charts", "tessera")
	a, err := packageChart(dir, "9.8.7", testTime, settings)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := packageChart(dir, "9.8.7", testTime, settings); !bytes.Equal(a, b) {
		t.Error("two packagings of the chart differ")
	}
	got := untarGz(t, a)["tessera/values.yaml"]
	var values struct {
		Scheduler, DevicePlugin, Admission struct {
			Image struct{ Repository, Tag, Digest string }
		}
	}
	if err := yaml.Unmarshal([]byte(got), &values); err != nil {
		t.Fatal(err)
	}
	if values.Scheduler.Image.Digest != want["vc-scheduler"] || values.DevicePlugin.Image.Digest != want["vgpu-device-plugin"] {
		t.Errorf("packaged digests: scheduler %q, devicePlugin %q; want %v", values.Scheduler.Image.Digest, values.DevicePlugin.Image.Digest, want)
	}
	if values.Admission.Image.Digest != "" || values.Admission.Image.Repository != "" {
		t.Errorf("admission.image is %+v: it should follow the scheduler's image and digest", values.Admission.Image)
	}
	// The chart's schema accepts the digests.
	schema, _ := os.ReadFile(filepath.Join(dir, "values.schema.json"))
	pat := regexp.MustCompile(`"pattern": "(\^\(sha256[^"]*)"`).FindSubmatch(schema)
	if pat == nil {
		t.Fatal("values.schema.json has no digest pattern")
	}
	for _, d := range want {
		if !regexp.MustCompile(string(pat[1])).MatchString(d) {
			t.Errorf("%s does not match the schema's %s", d, pat[1])
		}
	}
	src, _ := os.ReadFile(filepath.Join(dir, "values.yaml"))
	srcLines, gotLines := strings.Split(string(src), "\n"), strings.Split(got, "\n")
	if len(srcLines) != len(gotLines) {
		t.Fatalf("values.yaml has %d lines in the package, %d in the chart", len(gotLines), len(srcLines))
	}
	var changed []string
	for i := range srcLines {
		if srcLines[i] != gotLines[i] {
			changed = append(changed, gotLines[i])
		}
	}
	wantChanged := []string{`    digest: "` + want["vc-scheduler"] + `"`, `    digest: "` + want["vgpu-device-plugin"] + `"`}
	if strings.Join(changed, "\n") != strings.Join(wantChanged, "\n") {
		t.Errorf("changed lines of values.yaml:\n%s\nwant:\n%s", strings.Join(changed, "\n"), strings.Join(wantChanged, "\n"))
	}
}

func TestChartDigestsRefusesAnImagesJSONThatIsNotTheReleases(t *testing.T) {
	for name, c := range map[string]struct {
		version string
		images  []string
		want    string
	}{
		"other version":  {"1.0.0", []string{"vc-scheduler", "vgpu-device-plugin"}, `version "1.0.0"`},
		"missing image":  {"9.8.7", []string{"vc-scheduler"}, "lacks vgpu-device-plugin"},
		"unknown image":  {"9.8.7", []string{"vc-scheduler", "vgpu-device-plugin", "other"}, "lists other"},
		"listed twice":   {"9.8.7", []string{"vc-scheduler", "vc-scheduler", "vgpu-device-plugin"}, "twice"},
		"no images.json": {"", nil, "run make images first"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if c.images != nil {
				writeImagesJSON(t, dir, c.version, c.images...)
			}
			if _, err := chartDigests(dir, "9.8.7"); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
		})
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "images.json"), []byte(`{"version":"9.8.7","images":[{"name":"vc-scheduler"},{"name":"vgpu-device-plugin"}]}`), 0o644)
	if _, err := chartDigests(dir, "9.8.7"); err == nil || !strings.Contains(err.Error(), "index digest") {
		t.Errorf("images without digests: %v", err)
	}
}

func TestSetYAMLScalarChangesOnlyThatKey(t *testing.T) {
	src := `# top
a:
  image:
    # -- the digest
    digest: ""   # keep me
    tag: x
  list:
    - image:
        digest: ""
  text: |
    image:
      digest: ""
b:
  image:
    digest: ''
`
	got, err := setValues([]byte(src), []valueSetting{{[]string{"a", "image", "digest"}, "sha256:1"}, {[]string{"b", "image", "digest"}, "sha256:2"}})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(strings.Replace(src, `    digest: ""   # keep me`, `    digest: "sha256:1" # keep me`, 1), `    digest: ''`, `    digest: "sha256:2"`, 1)
	if string(got) != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	for path, wantErr := range map[string]string{
		"a.list.image.digest": "not found",
		"a.text":              "not a scalar",
		"a.image":             "not a scalar",
		"c.image.digest":      "not found",
	} {
		if _, err := setYAMLScalar([]byte(src), strings.Split(path, "."), "v"); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: error %v, want %q", path, err, wantErr)
		}
	}
	if _, err := setYAMLScalar([]byte("a:\n  b: 1\na:\n  b: 2\n"), []string{"a", "b"}, "v"); err == nil || !strings.Contains(err.Error(), "lines 2 and 4") {
		t.Errorf("a key set twice: %v", err)
	}
}

// The completion executable comes from the CLI built for this machine, the licence from
// the repository.
func TestKrewExtrasAskTheCLIForItsCompletionExecutable(t *testing.T) {
	root, bin := t.TempDir(), filepath.Join(t.TempDir(), "tessera")
	if err := os.WriteFile(filepath.Join(root, "LICENSE"), []byte("Apache License"), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := "#!/bin/sh\n[ \"$*\" = \"completion kubectl-plugin\" ] && echo '#!/usr/bin/env sh' && exit 0\nexit 2\n"
	if err := os.WriteFile(bin, []byte(cli), 0o755); err != nil {
		t.Fatal(err)
	}
	extra, err := krewExtras(&buildOptions{Root: root}, bin)
	if err != nil || string(extra.License) != "Apache License" || string(extra.Completion) != "#!/usr/bin/env sh\n" {
		t.Errorf("extras %q %q, %v", extra.License, extra.Completion, err)
	}
	if _, err := krewExtras(&buildOptions{Root: root}, filepath.Join(root, "missing")); err == nil {
		t.Error("no CLI to ask, no error")
	}
	if _, err := krewExtras(&buildOptions{Root: t.TempDir()}, bin); err == nil {
		t.Error("no LICENSE, no error")
	}
}
