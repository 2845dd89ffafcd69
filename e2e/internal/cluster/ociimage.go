package cluster

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The real-runtime nodes have no registry: the harness writes their images as one OCI
// image layout archive, the format `ctr images import` reads, with the standard library.
// Each image is one uncompressed layer; every timestamp is zero, so the same files give
// the same digests.

// ociImage is one image: its reference, entrypoint and files.
type ociImage struct {
	Name       string // a full reference, e.g. tessera.local/pause:e2e
	Entrypoint []string
	Files      []imageFile
}

// imageFile is one file of an image's layer: a regular file, or a symlink with Link set.
type imageFile struct {
	Path string // inside the image, absolute
	Mode int64
	Data []byte
	Link string
}

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    map[string]string `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// writeImageArchive writes the images as one OCI image layout tar at out.
func writeImageArchive(out string, images []ociImage) error {
	blobs := map[string][]byte{}
	add := func(mediaType string, b []byte) ociDescriptor {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = b
		return ociDescriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
	}
	platform := map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	var index []ociDescriptor
	for _, img := range images {
		layer, err := layerTar(img.Files)
		if err != nil {
			return fmt.Errorf("image %s: %w", img.Name, err)
		}
		layerDesc := add("application/vnd.oci.image.layer.v1.tar", layer) // uncompressed: diff ID = digest
		config, err := json.Marshal(map[string]any{
			"architecture": runtime.GOARCH, "os": "linux", "created": time.Unix(0, 0).UTC(),
			"config": map[string]any{"Entrypoint": img.Entrypoint,
				"Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
			"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
		})
		if err != nil {
			return err
		}
		manifest, err := json.Marshal(map[string]any{"schemaVersion": 2,
			"mediaType": "application/vnd.oci.image.manifest.v1+json",
			"config":    add("application/vnd.oci.image.config.v1+json", config), "layers": []ociDescriptor{layerDesc}})
		if err != nil {
			return err
		}
		md := add("application/vnd.oci.image.manifest.v1+json", manifest)
		md.Platform = platform
		md.Annotations = map[string]string{"io.containerd.image.name": img.Name, // what ctr import names it
			"org.opencontainers.image.ref.name": img.Name[strings.LastIndex(img.Name, ":")+1:]}
		index = append(index, md)
	}
	indexJSON, err := json.Marshal(map[string]any{"schemaVersion": 2,
		"mediaType": "application/vnd.oci.image.index.v1+json", "manifests": index})
	if err != nil {
		return err
	}
	files := []imageFile{{Path: "/oci-layout", Mode: 0o644, Data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{Path: "/index.json", Mode: 0o644, Data: indexJSON}}
	for d, b := range blobs {
		files = append(files, imageFile{Path: "/blobs/sha256/" + strings.TrimPrefix(d, "sha256:"), Mode: 0o644, Data: b})
	}
	archive, err := layerTar(files)
	if err != nil {
		return err
	}
	return os.WriteFile(out, archive, 0o644)
}

// layerTar is a tar of the files, each parent directory first, in path order.
func layerTar(files []imageFile) ([]byte, error) {
	dirs := map[string]bool{}
	for _, f := range files {
		for d := path.Dir(f.Path); d != "/" && d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, Typeflag: tar.TypeDir,
			ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b imageFile) int { return strings.Compare(a.Path, b.Path) })
	for _, f := range sorted {
		h := &tar.Header{Name: strings.TrimPrefix(f.Path, "/"), Mode: f.Mode, Size: int64(len(f.Data)), Typeflag: tar.TypeReg,
			ModTime: epoch, Format: tar.FormatPAX}
		if f.Link != "" {
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, f.Link, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if f.Link == "" {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// hostFile is a file of this machine at the same path in an image.
func hostFile(hostPath, imagePath string, mode int64) (imageFile, error) {
	b, err := os.ReadFile(hostPath)
	if err != nil {
		return imageFile{}, fmt.Errorf("image file %s: %w", imagePath, err)
	}
	return imageFile{Path: imagePath, Mode: mode, Data: b}, nil
}

// libraryDirs are where this machine's dynamic loader finds its libraries by default,
// multiarch directories first (Debian's), then the lib64 and plain ones.
func libraryDirs() []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	return []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib64", "/usr/lib64", "/lib", "/usr/lib"}
}

// sharedLibraries are the files a root file system needs to run the ELF programs and
// libraries given: their dynamic loader (at its PT_INTERP path) and every library they
// need, transitively, at the path where this machine's loader finds it, except the
// libraries named in provided (the driver, which the toolkit mounts). libDir is the
// directory the C library went to, where the loader of the image looks by default.
func sharedLibraries(provided []string, elfs ...string) (files []imageFile, libDir string, err error) {
	seen := map[string]bool{}
	for _, p := range provided {
		seen[p] = true
	}
	queue := slices.Clone(elfs)
	for len(queue) > 0 {
		file := queue[0]
		queue = queue[1:]
		f, err := elf.Open(file)
		if err != nil {
			return nil, "", fmt.Errorf("read %s: %w", file, err)
		}
		needed, err := f.ImportedLibraries()
		interp := ""
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b := make([]byte, p.Filesz)
				if _, rerr := p.ReadAt(b, 0); rerr == nil {
					interp = strings.TrimRight(string(b), "\x00")
				}
			}
		}
		f.Close()
		if err != nil {
			return nil, "", fmt.Errorf("libraries of %s: %w", file, err)
		}
		if interp != "" && !seen[interp] {
			seen[interp] = true
			lf, err := hostFile(interp, interp, 0o755)
			if err != nil {
				return nil, "", err
			}
			files = append(files, lf)
		}
		for _, name := range needed {
			if seen[name] {
				continue
			}
			seen[name] = true
			found := ""
			for _, dir := range libraryDirs() {
				if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
					found = filepath.Join(dir, name)
					break
				}
			}
			if found == "" {
				return nil, "", fmt.Errorf("%s needs %s, which is in none of %v", file, name, libraryDirs())
			}
			lf, err := hostFile(found, found, 0o755)
			if err != nil {
				return nil, "", err
			}
			files = append(files, lf)
			queue = append(queue, found)
			if strings.HasPrefix(name, "libc.so") {
				libDir = filepath.Dir(found)
			}
		}
	}
	if libDir == "" {
		return nil, "", errors.New("no C library among the programs' libraries")
	}
	return files, libDir, nil
}
