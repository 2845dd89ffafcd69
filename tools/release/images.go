package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// buildOptions is what an image build depends on; the same options on the same commit
// give the same bytes.
type buildOptions struct {
	Root       string    // repository root
	Out        string    // directory of the archives and images.json
	Repository string    // image name prefix, e.g. ghcr.io/tessera-gpu
	Version    string    // release version: the image tag and what --version prints
	Revision   string    // commit
	Source     string    // org.opencontainers.image.source
	Licenses   string    // org.opencontainers.image.licenses (SPDX expression)
	Created    time.Time // the commit's time: every file, history entry and config
	DebDir     string    // downloaded .debs (make image-debs)
	Lock       string    // build/image-packages.lock
	// Platforms per image ("linux/amd64"); the agent's need a C compiler, libc6 and
	// libvgpu.so for the architecture.
	SchedulerPlatforms, AgentPlatforms []string
	LibVGPU                            map[string]string // GOARCH -> libvgpu.so built for it
}

// imageDef is one image of the release: its name, platforms and what goes in it.
type imageDef struct {
	Name        string
	Description string
	Platforms   []string
	// Layers returns the layers (base first) and the run configuration for one architecture.
	Layers func(o *buildOptions, arch string, bins string) ([]rootFS, v1.Config, error)
}

const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func imageDefs(o *buildOptions) []imageDef {
	return []imageDef{
		{Name: "vc-scheduler", Platforms: o.SchedulerPlatforms,
			Description: "Tessera's vc-scheduler: Volcano's scheduler with the vgpu plugin compiled in",
			Layers:      schedulerLayers},
		{Name: "vgpu-device-plugin", Platforms: o.AgentPlatforms,
			Description: "Tessera's vGPU node agent (kubelet device plugin) and the libvgpu.so hook library",
			Layers:      agentLayers},
	}
}

// The scheduler: static binaries run as 65532 (the chart's runAsUser), nothing else:
// vc-scheduler, the entrypoint, and tessera-admission, the admission webhook the chart
// runs from this image with its own command.
func schedulerLayers(o *buildOptions, arch, bins string) ([]rootFS, v1.Config, error) {
	base := usersFS()
	app := rootFS{}
	for _, name := range []string{"vc-scheduler", admissionWebhook.Name} {
		bin, err := os.ReadFile(filepath.Join(bins, name))
		if err != nil {
			return nil, v1.Config{}, err
		}
		app.file("/usr/bin/"+name, 0o755, bin)
	}
	if err := addLicense(app, o); err != nil {
		return nil, v1.Config{}, err
	}
	return []rootFS{base, app}, v1.Config{
		Entrypoint: []string{"/usr/bin/vc-scheduler"},
		User:       "65532:65532",
		Env:        []string{pathEnv},
		WorkingDir: "/",
	}, nil
}

// The node agent: a cgo binary (go-nvml dlopens the libnvidia-ml.so.1 the NVIDIA container
// toolkit injects), so it carries Debian's glibc; busybox gives the init container sh,
// cp, chmod and mv; libvgpu.so sits where the chart's hookLibrarySource says.
func agentLayers(o *buildOptions, arch, bins string) ([]rootFS, v1.Config, error) {
	bin, err := os.ReadFile(filepath.Join(bins, "vgpu-device-plugin"))
	if err != nil {
		return nil, v1.Config{}, err
	}
	libPath := o.LibVGPU[arch]
	if libPath == "" {
		return nil, v1.Config{}, fmt.Errorf("no libvgpu.so for %s", arch)
	}
	lib, err := os.ReadFile(libPath)
	if err != nil {
		return nil, v1.Config{}, err
	}
	pkgs, err := readLock(o.Lock)
	if err != nil {
		return nil, v1.Config{}, err
	}
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[arch]
	loader := map[string]string{"amd64": "/lib64", "arm64": "/lib/ld-linux-aarch64.so.1"}[arch]
	if triplet == "" {
		return nil, v1.Config{}, fmt.Errorf("no Debian triplet for %s", arch)
	}
	base := usersFS()
	libc, err := findPackage(pkgs, "libc6", arch)
	if err != nil {
		return nil, v1.Config{}, err
	}
	if err := unpackDeb(base, o.DebDir, libc, under("/etc/ld.so.conf.d", "/lib/"+triplet, loader,
		"/usr/share/doc/libc6/copyright")); err != nil {
		return nil, v1.Config{}, err
	}
	bb, err := findPackage(pkgs, "busybox-static", arch)
	if err != nil {
		return nil, v1.Config{}, err
	}
	if err := unpackDeb(base, o.DebDir, bb, under("/bin/busybox", "/usr/share/doc/busybox-static/copyright")); err != nil {
		return nil, v1.Config{}, err
	}
	for _, applet := range []string{"sh", "cp", "mv", "chmod", "rm", "ls", "cat", "mkdir"} {
		base.symlink("/bin/"+applet, "busybox")
	}
	base.file("/etc/ld.so.conf", 0o644, []byte("include /etc/ld.so.conf.d/*.conf\n"))
	// The toolkit mounts the driver's libraries here (Debian layout) and runs ldconfig.
	base.dir("/usr/lib/"+triplet, 0o755, 0, 0)
	base.file("/usr/share/doc/tessera/image-packages", 0o644, lockLines(pkgs, arch))

	app := rootFS{}
	app.file("/usr/bin/vgpu-device-plugin", 0o755, bin)
	app.file("/opt/tessera/lib/libvgpu.so", 0o755, lib)
	if err := addLicense(app, o); err != nil {
		return nil, v1.Config{}, err
	}
	return []rootFS{base, app}, v1.Config{
		Entrypoint: []string{"/usr/bin/vgpu-device-plugin"},
		Env:        []string{pathEnv},
		WorkingDir: "/",
	}, nil
}

// licensePath is where each image carries the repository's LICENSE (Apache-2.0 asks that
// a copy go with every redistribution), beside Debian's copyright files.
const licensePath = "/usr/share/doc/tessera/LICENSE"

func addLicense(fs rootFS, o *buildOptions) error {
	b, err := os.ReadFile(filepath.Join(o.Root, "LICENSE"))
	if err != nil {
		return fmt.Errorf("the images carry the repository's LICENSE: %w", err)
	}
	fs.file(licensePath, 0o644, b)
	return nil
}

// usersFS is what every image has besides its programs: root and the non-root user
// 65532 (as distroless names it), their home directories and a sticky /tmp.
func usersFS() rootFS {
	fs := rootFS{}
	fs.file("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
	fs.file("/etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n"))
	fs.dir("/root", 0o700, 0, 0)
	fs.dir("/home/nonroot", 0o700, 65532, 65532)
	fs.dir("/tmp", 0o1777, 0, 0)
	return fs
}

func lockLines(pkgs []debPackage, arch string) []byte {
	var b strings.Builder
	b.WriteString("# Debian packages unpacked into this image (name version arch sha256)\n")
	for _, p := range pkgs {
		if p.Arch == arch {
			fmt.Fprintf(&b, "%s %s %s %s\n", p.Name, p.Version, p.Arch, p.SHA256)
		}
	}
	return []byte(b.String())
}

// labels are the OCI annotations of the image, as config labels and manifest annotations.
func (o *buildOptions) labels(def imageDef) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       def.Name,
		"org.opencontainers.image.description": def.Description,
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.licenses":    o.Licenses,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
}

// assemble makes the OCI image for one platform from its layers and run configuration.
func (o *buildOptions) assemble(def imageDef, plat v1.Platform, layers []rootFS, cfg v1.Config) (v1.Image, error) {
	labels := o.labels(def)
	cfg.Labels = labels
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: plat.Architecture,
		OS:           plat.OS,
		Variant:      plat.Variant,
		Created:      v1.Time{Time: o.Created.UTC()},
		Config:       cfg,
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	names := []string{"users, directories and system files", "Tessera " + def.Name}
	for i, fs := range layers {
		tb, err := fs.tarball(o.Created.UTC())
		if err != nil {
			return nil, err
		}
		l, err := newLayer(tb)
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{
			Created: v1.Time{Time: o.Created.UTC()}, CreatedBy: "tools/release: " + names[i%len(names)]}})
		if err != nil {
			return nil, err
		}
	}
	out, ok := mutate.Annotations(img, labels).(v1.Image)
	if !ok {
		return nil, fmt.Errorf("annotating %s: not an image", def.Name)
	}
	return out, nil
}

// ref is the image reference the chart uses by default: <repository>/<name>:<version>.
func (o *buildOptions) ref(name string) string {
	return o.Repository + "/" + name + ":" + o.Version
}

func parsePlatform(s string) (v1.Platform, error) {
	p, err := v1.ParsePlatform(s)
	if err != nil {
		return v1.Platform{}, err
	}
	if p.OS != "linux" || (p.Architecture != "amd64" && p.Architecture != "arm64") {
		return v1.Platform{}, fmt.Errorf("platform %s: want linux/amd64 or linux/arm64", s)
	}
	return *p, nil
}
