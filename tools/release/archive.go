package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// An image archive is one tar that every common loader takes: an OCI image layout
// (oci-layout, index.json, blobs/sha256/...) for `ctr images import`, `podman load` and
// Docker 25+, plus a docker-save manifest.json naming the same blobs for older
// `docker load`. It holds one platform's image, so loading it never picks the wrong
// architecture; `make push` joins the platforms into one index in the registry.

const (
	// containerd reads the image name from this index.json annotation; podman and the OCI
	// layout readers from the second (we give the full reference there too).
	annotationImageName = "io.containerd.image.name"
	annotationRefName   = "org.opencontainers.image.ref.name"
)

// dockerManifest is one entry of docker save's manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// writeArchive writes img, named ref, to file. Every tar entry has the image's creation
// time, root ownership and a fixed order, so equal images give equal archives.
func writeArchive(file, ref string, img v1.Image, created time.Time) error {
	blobs := map[string][]byte{}
	add := func(h v1.Hash, b []byte) string {
		name := path.Join("blobs", h.Algorithm, h.Hex)
		blobs[name] = b
		return name
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	add(digest, manifest)
	dm := dockerManifest{Config: add(cfgName, cfg), RepoTags: []string{ref}}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		dm.Layers = append(dm.Layers, add(d, b))
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	index := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1,
			Size:      int64(len(manifest)),
			Digest:    digest,
			Platform:  &v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant},
			Annotations: map[string]string{
				annotationImageName: ref,
				annotationRefName:   ref,
			},
		}},
	}
	files := map[string][]byte{"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`)}
	if files["index.json"], err = json.Marshal(index); err != nil {
		return err
	}
	if files["manifest.json"], err = json.Marshal([]dockerManifest{dm}); err != nil {
		return err
	}
	for name, b := range blobs {
		files[name] = b
	}
	return writeTar(file, files, []string{"blobs/", "blobs/sha256/"}, created)
}

func writeTar(file string, files map[string][]byte, dirs []string, mtime time.Time) error {
	names := append([]string(nil), dirs...)
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		h := &tar.Header{Name: n, Mode: 0o644, ModTime: mtime, Typeflag: tar.TypeReg, Size: int64(len(files[n]))}
		if strings.HasSuffix(n, "/") {
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(files[n]); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(file, buf.Bytes(), 0o644)
}

// readArchive opens an archive written by writeArchive as the OCI layout it contains
// (extracted under tmp): the image exactly as written, and its name.
func readArchive(file, tmp string) (v1.Image, string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	dir, err := os.MkdirTemp(tmp, "layout-")
	if err != nil {
		return nil, "", err
	}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", file, err)
		}
		name := filepath.Join(dir, filepath.FromSlash(path.Clean("/"+h.Name)))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, 0o755)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(name, b, 0o644)
			}
		default:
			err = fmt.Errorf("%s: unexpected entry %s", file, h.Name)
		}
		if err != nil {
			return nil, "", err
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", file, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, "", err
	}
	if len(im.Manifests) != 1 {
		return nil, "", fmt.Errorf("%s: index.json has %d manifests, want 1", file, len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		return nil, "", err
	}
	return img, im.Manifests[0].Annotations[annotationImageName], nil
}
