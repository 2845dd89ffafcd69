package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// summary is images.json: what `make images` wrote, and the digests `make push` will
// publish.
type summary struct {
	Version  string         `json:"version"`
	Revision string         `json:"revision"`
	Images   []imageSummary `json:"images"`
}

type imageSummary struct {
	Name string `json:"name"`
	Ref  string `json:"ref"`
	// Index is the digest of the multi-platform index `make push` writes under Ref.
	Index     v1.Hash           `json:"index"`
	Platforms []platformSummary `json:"platforms"`
}

type platformSummary struct {
	Platform string  `json:"platform"`
	Archive  string  `json:"archive"` // file name in the output directory
	Manifest v1.Hash `json:"manifest"`
	Bytes    int64   `json:"bytes"` // archive size
}

// buildImages builds every image for every platform, writes the archives and
// images.json into o.Out, and returns the summary.
func buildImages(o *buildOptions) (*summary, error) {
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "tessera-images-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	sum := &summary{Version: o.Version, Revision: o.Revision}
	for _, def := range imageDefs(o) {
		is := imageSummary{Name: def.Name, Ref: o.ref(def.Name)}
		var imgs []v1.Image
		for _, ps := range def.Platforms {
			plat, err := parsePlatform(ps)
			if err != nil {
				return nil, err
			}
			bins := filepath.Join(work, plat.Architecture)
			progs := map[string][]program{scheduler.Name: {scheduler, admissionWebhook}, agent.Name: {agent}}[def.Name]
			for _, prog := range progs {
				if _, err := goBuild(o, prog, plat.OS, plat.Architecture, bins); err != nil {
					return nil, err
				}
			}
			layers, cfg, err := def.Layers(o, plat.Architecture, bins)
			if err != nil {
				return nil, fmt.Errorf("%s for %s: %w", def.Name, ps, err)
			}
			img, err := o.assemble(def, plat, layers, cfg)
			if err != nil {
				return nil, fmt.Errorf("%s for %s: %w", def.Name, ps, err)
			}
			name := fmt.Sprintf("%s-%s-%s-%s.tar", def.Name, o.Version, plat.OS, plat.Architecture)
			file := filepath.Join(o.Out, name)
			if err := writeArchive(file, is.Ref, img, o.Created); err != nil {
				return nil, err
			}
			d, err := img.Digest()
			if err != nil {
				return nil, err
			}
			st, err := os.Stat(file)
			if err != nil {
				return nil, err
			}
			is.Platforms = append(is.Platforms, platformSummary{Platform: ps, Archive: name, Manifest: d, Bytes: st.Size()})
			imgs = append(imgs, img)
			fmt.Fprintf(os.Stderr, "%s (%s): %s, %d bytes, %s\n", is.Ref, ps, name, st.Size(), d)
		}
		idx, err := platformIndex(imgs)
		if err != nil {
			return nil, err
		}
		if is.Index, err = idx.Digest(); err != nil {
			return nil, err
		}
		sum.Images = append(sum.Images, is)
	}
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return nil, err
	}
	return sum, os.WriteFile(filepath.Join(o.Out, "images.json"), append(b, '\n'), 0o644)
}

// platformIndex joins one image per platform into an OCI index, in the given order.
func platformIndex(imgs []v1.Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}}})
	}
	return idx, nil
}
