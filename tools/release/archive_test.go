package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

var testTime = time.Unix(1_700_000_000, 0).UTC()

// testImage assembles a small image the way buildImages does, without building binaries.
func testImage(t *testing.T, payload string) v1.Image {
	t.Helper()
	o := &buildOptions{Repository: "example.test/tessera", Version: "1.2.3", Revision: "abc", Source: "https://example.test/src",
		Licenses: "Apache-2.0", Created: testTime}
	base := usersFS()
	app := rootFS{}
	app.file("/usr/bin/prog", 0o755, []byte(payload))
	app.symlink("/usr/bin/alias", "prog")
	img, err := o.assemble(imageDef{Name: "prog", Description: "a test image"}, v1.Platform{OS: "linux", Architecture: "amd64"},
		[]rootFS{base, app}, v1.Config{Entrypoint: []string{"/usr/bin/prog"}, User: "65532:65532"})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func tarEntries(t *testing.T, file string) (names []string, files map[string][]byte) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files = map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, files
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(testTime) || h.Uid != 0 || h.Uname != "" {
			t.Errorf("%s: mtime %v uid %d uname %q; want the image's time and anonymous root", h.Name, h.ModTime, h.Uid, h.Uname)
		}
		names = append(names, h.Name)
		files[h.Name], _ = io.ReadAll(tr)
	}
}

func TestArchiveIsAnOCILayoutAndADockerSaveTarball(t *testing.T) {
	img := testImage(t, "binary")
	if err := validate.Image(img); err != nil {
		t.Fatalf("the assembled image is not valid: %v", err)
	}
	file := filepath.Join(t.TempDir(), "prog.tar")
	const ref = "example.test/tessera/prog:1.2.3"
	if err := writeArchive(file, ref, img, testTime); err != nil {
		t.Fatal(err)
	}
	names, files := tarEntries(t, file)
	if !sort.StringsAreSorted(names) {
		t.Errorf("entries are not in order: %v", names)
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %s", files["oci-layout"])
	}
	var index v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	digest, _ := img.Digest()
	if len(index.Manifests) != 1 || index.Manifests[0].Digest != digest ||
		index.Manifests[0].Annotations[annotationImageName] != ref || index.Manifests[0].Annotations[annotationRefName] != ref ||
		index.Manifests[0].Platform == nil || index.Manifests[0].Platform.Architecture != "amd64" {
		t.Errorf("index.json = %s; want one manifest %s named %s for amd64", files["index.json"], digest, ref)
	}
	var dm []dockerManifest
	if err := json.Unmarshal(files["manifest.json"], &dm); err != nil {
		t.Fatal(err)
	}
	if len(dm) != 1 || len(dm[0].RepoTags) != 1 || dm[0].RepoTags[0] != ref || len(dm[0].Layers) != 2 {
		t.Fatalf("manifest.json = %s", files["manifest.json"])
	}
	for _, p := range append([]string{dm[0].Config}, dm[0].Layers...) {
		if _, ok := files[p]; !ok {
			t.Errorf("manifest.json names %s, which is not in the archive", p)
		}
	}

	// docker load's reading (manifest.json) and the OCI layout's give the same image.
	docker, err := tarball.ImageFromPath(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(docker); err != nil {
		t.Errorf("docker-save view is not valid: %v", err)
	}
	oci, name, err := readArchive(file, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := oci.Digest(); d != digest || name != ref {
		t.Errorf("read back %s named %s, wrote %s named %s", d, name, digest, ref)
	}
	dockerCfg, _ := docker.ConfigName()
	ociCfg, _ := oci.ConfigName()
	if dockerCfg != ociCfg {
		t.Errorf("config %s through manifest.json, %s through index.json", dockerCfg, ociCfg)
	}
}

func TestImageCarriesTheOCILabelsAndRunsAsTheGivenUser(t *testing.T) {
	img := testImage(t, "binary")
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	m, _ := img.Manifest()
	for k, want := range map[string]string{
		"org.opencontainers.image.source": "https://example.test/src", "org.opencontainers.image.revision": "abc",
		"org.opencontainers.image.version": "1.2.3", "org.opencontainers.image.licenses": "Apache-2.0",
	} {
		if cf.Config.Labels[k] != want || m.Annotations[k] != want {
			t.Errorf("%s: label %q, annotation %q, want %q", k, cf.Config.Labels[k], m.Annotations[k], want)
		}
	}
	if cf.Config.User != "65532:65532" || !cf.Created.Time.Equal(testTime) || len(cf.History) != 2 {
		t.Errorf("config: user %q, created %v, %d history entries", cf.Config.User, cf.Created, len(cf.History))
	}
}

func TestSameInputsGiveTheSameBytes(t *testing.T) {
	dir := t.TempDir()
	var sums [2][]byte
	var digests [2]v1.Hash
	for i := range sums {
		img := testImage(t, "binary")
		file := filepath.Join(dir, "a.tar")
		if err := writeArchive(file, "example.test/p:1", img, testTime); err != nil {
			t.Fatal(err)
		}
		sums[i], _ = os.ReadFile(file)
		digests[i], _ = img.Digest()
	}
	if digests[0] != digests[1] || !bytes.Equal(sums[0], sums[1]) {
		t.Errorf("two assemblies differ: %s and %s", digests[0], digests[1])
	}
	if d, _ := testImage(t, "other binary").Digest(); d == digests[0] {
		t.Errorf("a different binary gave the same digest %s", d)
	}
}

func TestLayerTarHasParentsOwnersAndModes(t *testing.T) {
	fs := usersFS()
	fs.file("/a/b/c", 0o640, []byte("x"))
	b, err := fs.tarball(testTime)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	got := map[string]*tar.Header{}
	var order []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name], order = h, append(order, h.Name)
	}
	if !sort.StringsAreSorted(order) {
		t.Errorf("not sorted: %v", order)
	}
	for name, want := range map[string]int64{"a/": 0o755, "a/b/": 0o755, "a/b/c": 0o640, "tmp/": 0o1777} {
		if h := got[name]; h == nil || h.Mode != want {
			t.Errorf("%s: %+v, want mode %o", name, h, want)
		}
	}
	if h := got["home/nonroot/"]; h == nil || h.Uid != 65532 || h.Gid != 65532 {
		t.Errorf("home/nonroot: %+v, want owned by 65532", h)
	}
}
