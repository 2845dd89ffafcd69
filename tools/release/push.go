package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// push publishes every image of dir/images.json as <registry>/<name>:<version>: one
// multi-platform index made of the archives' images, byte for byte, so the pushed
// digest is the one images.json recorded. Credentials come from the docker/podman
// config files (docker login), as `docker push` would use them.
func push(dir, registry string, insecure bool) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "images.json"))
	if err != nil {
		return nil, fmt.Errorf("%w (run make images first)", err)
	}
	var sum summary
	if err := json.Unmarshal(b, &sum); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "tessera-push-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	var pushed []string
	for _, is := range sum.Images {
		var imgs []v1.Image
		for _, p := range is.Platforms {
			img, _, err := readArchive(filepath.Join(dir, p.Archive), tmp)
			if err != nil {
				return nil, err
			}
			imgs = append(imgs, img)
		}
		idx, err := platformIndex(imgs)
		if err != nil {
			return nil, err
		}
		d, err := idx.Digest()
		if err != nil {
			return nil, err
		}
		if d != is.Index {
			return nil, fmt.Errorf("%s: the archives make index %s, images.json says %s", is.Name, d, is.Index)
		}
		ref, err := name.ParseReference(registry+"/"+is.Name+":"+sum.Version, opts...)
		if err != nil {
			return nil, err
		}
		if err := remote.WriteIndex(ref, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return nil, fmt.Errorf("push %s: %w", ref, err)
		}
		fmt.Fprintf(os.Stderr, "pushed %s@%s\n", ref, d)
		pushed = append(pushed, ref.String()+"@"+d.String())
	}
	return pushed, nil
}
