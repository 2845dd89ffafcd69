package main

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// writeTestRelease writes what `release images` would for one two-platform image.
func writeTestRelease(t *testing.T, dir string) summary {
	t.Helper()
	is := imageSummary{Name: "prog", Ref: "example.test/tessera/prog:1.2.3"}
	var imgs []v1.Image
	for _, arch := range []string{"amd64", "arm64"} {
		o := &buildOptions{Version: "1.2.3", Revision: "abc", Created: testTime}
		app := rootFS{}
		app.file("/usr/bin/prog", 0o755, []byte("binary for "+arch))
		img, err := o.assemble(imageDef{Name: "prog"}, v1.Platform{OS: "linux", Architecture: arch}, []rootFS{usersFS(), app}, v1.Config{})
		if err != nil {
			t.Fatal(err)
		}
		file := fmt.Sprintf("prog-1.2.3-linux-%s.tar", arch)
		if err := writeArchive(filepath.Join(dir, file), is.Ref, img, testTime); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		is.Platforms = append(is.Platforms, platformSummary{Platform: "linux/" + arch, Archive: file, Manifest: d})
		imgs = append(imgs, img)
	}
	idx, err := platformIndex(imgs)
	if err != nil {
		t.Fatal(err)
	}
	is.Index, _ = idx.Digest()
	sum := summary{Version: "1.2.3", Revision: "abc", Images: []imageSummary{is}}
	b, _ := json.Marshal(sum)
	if err := os.WriteFile(filepath.Join(dir, "images.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return sum
}

func TestPushPublishesOneMultiArchIndexWithTheRecordedDigest(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials of the machine's user
	dir := t.TempDir()
	sum := writeTestRelease(t, dir)
	host := strings.TrimPrefix(srv.URL, "http://")
	pushed, err := push(dir, host+"/team/tessera", true)
	if err != nil {
		t.Fatal(err)
	}
	want := host + "/team/tessera/prog:1.2.3@" + sum.Images[0].Index.String()
	if len(pushed) != 1 || pushed[0] != want {
		t.Fatalf("pushed %v, want %s", pushed, want)
	}
	ref, err := name.ParseReference(host+"/team/tessera/prog:1.2.3", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(ref)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); d != sum.Images[0].Index {
		t.Errorf("registry has index %s, images.json says %s", d, sum.Images[0].Index)
	}
	im, _ := idx.IndexManifest()
	if len(im.Manifests) != 2 {
		t.Fatalf("index has %d manifests, want amd64 and arm64", len(im.Manifests))
	}
	for i, m := range im.Manifests {
		p := sum.Images[0].Platforms[i]
		if m.Digest != p.Manifest || m.Platform == nil || "linux/"+m.Platform.Architecture != p.Platform {
			t.Errorf("manifest %d: %s for %v, want %s for %s", i, m.Digest, m.Platform, p.Manifest, p.Platform)
		}
	}
}

func TestPushRefusesArchivesThatDoNotMatchImagesJSON(t *testing.T) {
	dir := t.TempDir()
	sum := writeTestRelease(t, dir)
	sum.Images[0].Index = v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}
	b, _ := json.Marshal(sum)
	if err := os.WriteFile(filepath.Join(dir, "images.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := push(dir, "127.0.0.1:1/x", true); err == nil || !strings.Contains(err.Error(), "images.json says") {
		t.Errorf("push of a changed archive: %v, want a digest mismatch", err)
	}
}
