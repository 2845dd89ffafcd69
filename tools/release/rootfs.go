package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// entry is one file system object of an image layer.
type entry struct {
	typ      byte // tar.TypeDir, tar.TypeReg or tar.TypeSymlink
	mode     int64
	uid, gid int
	data     []byte
	link     string
}

// rootFS is a layer's content keyed by clean absolute path. Parent directories are
// added (root-owned, 0755) when the layer is written, so callers name only what matters.
type rootFS map[string]entry

func (r rootFS) dir(p string, mode int64, uid, gid int) {
	r[clean(p)] = entry{typ: tar.TypeDir, mode: mode, uid: uid, gid: gid}
}

func (r rootFS) file(p string, mode int64, data []byte) {
	r[clean(p)] = entry{typ: tar.TypeReg, mode: mode, data: data}
}

func (r rootFS) symlink(p, target string) {
	r[clean(p)] = entry{typ: tar.TypeSymlink, mode: 0o777, link: target}
}

func clean(p string) string { return path.Clean("/" + p) }

// tarball writes the layer with every entry in path order, owned by the given ids, all
// stamped with one time and no user or group names: the same tree always gives the same
// bytes.
func (r rootFS) tarball(mtime time.Time) ([]byte, error) {
	all := map[string]entry{}
	for p, e := range r {
		all[p] = e
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := r[d]; !ok {
				all[d] = entry{typ: tar.TypeDir, mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(all))
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		e := all[p]
		h := &tar.Header{Typeflag: e.typ, Name: strings.TrimPrefix(p, "/"), Mode: e.mode, Uid: e.uid, Gid: e.gid,
			ModTime: mtime, Linkname: e.link}
		switch e.typ {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeReg:
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// layer is an image layer held in memory: its tar and that tar gzip-compressed (no name,
// no time in the gzip header), so its digest depends on the content only.
type layer struct {
	uncompressed, compressed []byte
	diffID, digest           v1.Hash
}

var _ v1.Layer = (*layer)(nil)

func newLayer(tarball []byte) (*layer, error) {
	var z bytes.Buffer
	zw, err := gzip.NewWriterLevel(&z, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(tarball); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return &layer{uncompressed: tarball, compressed: z.Bytes(), diffID: sha(tarball), digest: sha(z.Bytes())}, nil
}

func sha(b []byte) v1.Hash {
	s := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", s)}
}

func (l *layer) Digest() (v1.Hash, error) { return l.digest, nil }
func (l *layer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l *layer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.compressed)), nil
}
func (l *layer) Uncompressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.uncompressed)), nil
}
func (l *layer) Size() (int64, error)                { return int64(len(l.compressed)), nil }
func (l *layer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
