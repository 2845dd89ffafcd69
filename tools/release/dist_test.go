package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	a, err := packageChart(dir, "9.8.7", testTime)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := packageChart(dir, "9.8.7", testTime)
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

func TestKrewManifestNamesEachPlatformsArchiveAndDigest(t *testing.T) {
	o := &buildOptions{Version: "1.2.3", Source: "https://example.test/tessera"}
	tgz, err := tarGz(map[string]tarFile{"kubectl-tessera": {mode: 0o755, data: []byte("bin")}}, testTime)
	if err != nil {
		t.Fatal(err)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(tgz))
	b, err := krewManifest(o, []krewPlatform{{OS: "linux", Arch: "amd64", URI: "https://example.test/k.tar.gz", SHA256: sum}})
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Kind string
		Spec struct {
			Version   string
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
	p := m.Spec.Platforms
	if m.Kind != "Plugin" || m.Spec.Version != "v1.2.3" || len(p) != 1 || p[0].Sha256 != sum || p[0].Bin != "kubectl-tessera" ||
		p[0].Selector.MatchLabels["os"] != "linux" || len(p[0].Files) != 2 || p[0].Files[0].From != "kubectl-tessera" ||
		p[0].Files[1].From != "tessera-simulate" || p[0].Files[1].To != "." {
		t.Errorf("krew manifest:\n%s", b)
	}
	if files := untarGz(t, tgz); files["kubectl-tessera"] != "bin" {
		t.Errorf("krew archive holds %v", files)
	}
}

func TestReleaseShipsTheSimulatorBesideTheCLIOnEveryPlatform(t *testing.T) {
	o := &buildOptions{SchedulerPlatforms: []string{"linux/amd64"}, AgentPlatforms: []string{"linux/amd64"}}
	inKrew := map[string][]string{}
	for _, tg := range binaryTargets(o) {
		if n := krewName(tg.prog); n != "" {
			inKrew[tg.os+"/"+tg.arch] = append(inKrew[tg.os+"/"+tg.arch], n)
		}
	}
	for _, plat := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"} {
		if got := strings.Join(inKrew[plat], " "); got != "kubectl-tessera tessera-simulate" {
			t.Errorf("krew package for %s holds %q, want kubectl-tessera tessera-simulate", plat, got)
		}
	}
	if len(inKrew) != 4 {
		t.Errorf("krew packages for %d platforms, want 4: %v", len(inKrew), inKrew)
	}
	if krewName(scheduler) != "" || krewName(agent) != "" {
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
