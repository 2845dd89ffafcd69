package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"sigs.k8s.io/yaml"
)

// These tests check what `make images` wrote (make image-test passes -images). They run
// every entrypoint from the image's own root file system, so a missing library, a wrong
// path or a binary for the wrong libc fails here rather than on a GPU node.
var (
	imagesDir = flag.String("images", "", "directory of images.json and the archives (make image-test sets it)")
	buildArgs = flag.String("build-flags", "", "the flags make images gave `release images`, to build again and compare")
)

func loadSummary(t *testing.T) summary {
	t.Helper()
	if *imagesDir == "" {
		t.Skip("no -images directory: run make image-test")
	}
	b, err := os.ReadFile(filepath.Join(*imagesDir, "images.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum summary
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	return sum
}

// The chart's default image references (values.yaml, an empty tag meaning appVersion)
// are the ones make images writes, so `helm install` with defaults pulls these images.
func TestChartDefaultsNameTheBuiltImages(t *testing.T) {
	sum := loadSummary(t)
	chart := filepath.Join("..", "..", "charts", "tessera")
	var meta struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Scheduler struct {
			Image struct{ Repository, Tag string }
		} `json:"scheduler"`
		DevicePlugin struct {
			Image struct{ Repository, Tag string }
		} `json:"devicePlugin"`
	}
	for file, into := range map[string]any{"Chart.yaml": &meta, "values.yaml": &values} {
		b, err := os.ReadFile(filepath.Join(chart, file))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	ref := func(repo, tag string) string {
		if tag == "" {
			tag = meta.AppVersion
		}
		return repo + ":" + tag
	}
	want := map[string]string{
		"vc-scheduler":       ref(values.Scheduler.Image.Repository, values.Scheduler.Image.Tag),
		"vgpu-device-plugin": ref(values.DevicePlugin.Image.Repository, values.DevicePlugin.Image.Tag),
	}
	if sum.Version != meta.AppVersion {
		t.Errorf("images are version %s, the chart's appVersion is %s", sum.Version, meta.AppVersion)
	}
	for _, is := range sum.Images {
		if want[is.Name] != is.Ref {
			t.Errorf("%s: make images wrote %s, the chart defaults to %s", is.Name, is.Ref, want[is.Name])
		}
		delete(want, is.Name)
	}
	for name := range want {
		t.Errorf("the chart runs %s, which make images did not build", name)
	}
}

// extract writes the image's flattened file system under dir, with its owners and modes.
func extract(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600); err == nil {
				_, err = io.Copy(f, tr)
				f.Close()
			}
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		default:
			err = fmt.Errorf("unexpected type %q", h.Typeflag)
		}
		if err == nil && h.Typeflag != tar.TypeSymlink {
			if err = os.Chmod(p, os.FileMode(h.Mode&0o777)|modeBits(h.Mode)); err == nil && os.Geteuid() == 0 {
				err = os.Lchown(p, h.Uid, h.Gid)
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
	}
}

func modeBits(m int64) os.FileMode {
	var fm os.FileMode
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

type runResult struct {
	out  string
	code int
}

// inRoot runs argv inside root (chroot, as user "uid:gid" or root), with env.
func inRoot(t *testing.T, root, user string, env []string, argv ...string) runResult {
	t.Helper()
	args := []string{}
	if user != "" {
		args = append(args, "--userspec="+user)
	}
	args = append(append(args, root), argv...)
	cmd := exec.Command("chroot", args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("chroot %v: %v", argv, err)
	}
	return runResult{string(out), code}
}

func TestEntrypointsRunFromTheImageRootFS(t *testing.T) {
	sum := loadSummary(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root for chroot")
	}
	for _, is := range sum.Images {
		for _, p := range is.Platforms {
			t.Run(is.Name+"/"+p.Platform, func(t *testing.T) {
				img, _, err := readArchive(filepath.Join(*imagesDir, p.Archive), t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				cf, err := img.ConfigFile()
				if err != nil {
					t.Fatal(err)
				}
				for k, want := range map[string]string{"version": sum.Version, "revision": sum.Revision} {
					if got := cf.Config.Labels["org.opencontainers.image."+k]; got != want {
						t.Errorf("label %s = %q, want %q", k, got, want)
					}
				}
				if got := cf.Config.Labels["org.opencontainers.image.licenses"]; got != "Apache-2.0" {
					t.Errorf("label licenses = %q, want Apache-2.0 (the repository's LICENSE)", got)
				}
				root := t.TempDir()
				extract(t, img, root)
				checkLicense(t, root)
				entry := cf.Config.Entrypoint
				if len(entry) != 1 {
					t.Fatalf("entrypoint %v", entry)
				}
				checkELF(t, root, entry[0], cf.Architecture, is.Name == "vc-scheduler")
				if cf.Architecture != runtime.GOARCH {
					t.Skipf("%s binaries do not run on this %s machine; checked their ELF headers only", cf.Architecture, runtime.GOARCH)
				}
				if is.Name == "vc-scheduler" && cf.Config.User != "65532:65532" {
					t.Errorf("scheduler runs as %q, want the non-root 65532:65532", cf.Config.User)
				}
				r := inRoot(t, root, cf.Config.User, nil, entry[0], "--version")
				if r.code != 0 || !strings.Contains(r.out, " "+sum.Version+" ") || !strings.Contains(r.out, "commit "+sum.Revision) {
					t.Errorf("%s --version: exit %d:\n%s\nwant version %s and commit %s", entry[0], r.code, r.out, sum.Version, sum.Revision)
				}
				r = inRoot(t, root, cf.Config.User, nil, entry[0], "--help")
				if r.code != 0 || !strings.Contains(r.out, "--kubeconfig") {
					t.Errorf("%s --help: exit %d:\n%.2000s", entry[0], r.code, r.out)
				}
				if is.Name == "vgpu-device-plugin" {
					checkAgentImage(t, root)
				}
				if is.Name == "vc-scheduler" {
					// The admission webhook's entrypoint (the chart's command for it).
					const hook = "/usr/bin/tessera-admission"
					checkELF(t, root, hook, cf.Architecture, true)
					r := inRoot(t, root, cf.Config.User, nil, hook, "--version")
					if r.code != 0 || !strings.Contains(r.out, "tessera-admission "+sum.Version+" ") || !strings.Contains(r.out, "commit "+sum.Revision) {
						t.Errorf("%s --version: exit %d:\n%s", hook, r.code, r.out)
					}
					r = inRoot(t, root, cf.Config.User, nil, hook, "--help")
					if r.code != 0 || !strings.Contains(r.out, "--self-signed-secret") || !strings.Contains(r.out, "--kubeconfig") {
						t.Errorf("%s --help: exit %d:\n%.2000s", hook, r.code, r.out)
					}
				}
			})
		}
	}
}

// checkLicense: the image carries the repository's LICENSE as it is at this commit.
func checkLicense(t *testing.T, root string) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join("..", "..", "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, licensePath))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s in the image: %v (%d bytes, the repository's LICENSE has %d)", licensePath, err, len(got), len(want))
	}
}

// checkELF: the right machine; a static scheduler; a dynamic agent whose loader and
// libraries are all in the image.
func checkELF(t *testing.T, root, bin, arch string, static bool) {
	t.Helper()
	f, err := elf.Open(filepath.Join(root, bin))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]; f.Machine != want {
		t.Errorf("%s is for %v, the image for %s", bin, f.Machine, arch)
	}
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, _ := io.ReadAll(p.Open())
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	libs, _ := f.ImportedLibraries()
	if static {
		if interp != "" || len(libs) > 0 {
			t.Errorf("%s is not static: interpreter %q, libraries %v", bin, interp, libs)
		}
		return
	}
	if _, err := os.Stat(filepath.Join(root, interp)); interp == "" || err != nil {
		t.Errorf("%s: loader %q is not in the image: %v", bin, interp, err)
	}
	for _, lib := range libs {
		found, _ := filepath.Glob(filepath.Join(root, "lib", "*-linux-gnu", lib))
		if len(found) == 0 {
			t.Errorf("%s needs %s, which is not in the image", bin, lib)
		}
	}
}

// checkAgentImage: libvgpu.so loads on old glibc; the chart's init container command
// works with the image's shell; the agent loads NVML where the NVIDIA toolkit puts it.
func checkAgentImage(t *testing.T, root string) {
	t.Helper()
	lib := filepath.Join(root, "opt", "tessera", "lib", "libvgpu.so")
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatalf("libvgpu.so: %v", err)
	}
	syms, _ := f.ImportedSymbols()
	f.Close()
	for _, s := range syms {
		if v, ok := strings.CutPrefix(s.Version, "GLIBC_2."); ok {
			if minor, _ := strconv.Atoi(strings.Split(v, ".")[0]); minor > 17 {
				t.Errorf("libvgpu.so imports %s@%s: it would not load in CUDA images with glibc 2.17", s.Name, s.Version)
			}
		}
	}

	b, err := os.ReadFile(filepath.Join("..", "..", "charts", "tessera", "templates", "device-plugin.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`- /bin/sh\s+- -c\s+- (.+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the chart's install-hook-library command (/bin/sh -c ...) is not found")
	}
	if err := os.MkdirAll(filepath.Join(root, "host", "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := inRoot(t, root, "", []string{"SRC=/opt/tessera/lib/libvgpu.so", "DST=/host/lib/libvgpu.so"}, "/bin/sh", "-c", string(m[1]))
	if st, err := os.Stat(filepath.Join(root, "host", "lib", "libvgpu.so")); r.code != 0 || err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("the init container's %q: exit %d, %v:\n%s", m[1], r.code, err, r.out)
	}
	checkAgentStartsOnNVML(t, root)
}

// Two builds of one commit give the same images, byte for byte: the test builds again
// with the flags make images used (binaries come from Go's build cache) and compares.
func TestTwoBuildsOfOneCommitGiveTheSameDigests(t *testing.T) {
	sum := loadSummary(t)
	if *buildArgs == "" {
		t.Skip("no -build-flags: run make image-test")
	}
	o, err := parseBuildFlags("images", strings.Fields(*buildArgs))
	if err != nil {
		t.Fatal(err)
	}
	o.Out = t.TempDir()
	again, err := buildImages(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Images) != len(sum.Images) {
		t.Fatalf("%d images, then %d", len(sum.Images), len(again.Images))
	}
	for i, is := range sum.Images {
		js := again.Images[i]
		if js.Index != is.Index {
			t.Errorf("%s: index %s, then %s", is.Name, is.Index, js.Index)
		}
		for k, p := range is.Platforms {
			a, _ := os.ReadFile(filepath.Join(*imagesDir, p.Archive))
			b, _ := os.ReadFile(filepath.Join(o.Out, js.Platforms[k].Archive))
			if p.Manifest != js.Platforms[k].Manifest || sha(a) != sha(b) {
				t.Errorf("%s %s: manifest %s, then %s; archive %s, then %s", is.Name, p.Platform, p.Manifest,
					js.Platforms[k].Manifest, sha(a), sha(b))
			}
		}
	}
}
