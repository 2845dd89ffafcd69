package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"
)

// distOptions is what `release dist` adds to an image build.
type distOptions struct {
	Dist    string // output directory
	Images  string // where `release images` wrote (copied into Dist/images unless it is already there)
	BaseURL string // where the release's files are downloaded from (the krew manifest's uris)
}

// cliPlatforms are where the CLI and its simulator are released (and krew packages them).
func cliPlatforms() []string {
	return []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64"}
}

// binaryTargets are the release's binaries: the CLI and its simulator everywhere they
// build, the daemons on the Linux platforms their images have.
func binaryTargets(o *buildOptions) []struct {
	prog     program
	os, arch string
} {
	type target = struct {
		prog     program
		os, arch string
	}
	var ts []target
	for _, p := range cliPlatforms() {
		goos, arch, _ := strings.Cut(p, "/")
		ts = append(ts, target{cliTool, goos, arch})
		// tessera-simulate links Volcano's scheduler, which does not build for Windows
		// (volcano.sh/volcano/pkg/util uses unix.Umask).
		if goos != "windows" {
			ts = append(ts, target{simulator, goos, arch})
		}
	}
	for _, p := range o.SchedulerPlatforms {
		os, arch, _ := strings.Cut(p, "/")
		ts = append(ts, target{scheduler, os, arch})
	}
	for _, p := range o.AgentPlatforms {
		os, arch, _ := strings.Cut(p, "/")
		ts = append(ts, target{agent, os, arch})
	}
	return ts
}

func distMain(args []string) error {
	fset := flag.NewFlagSet("dist", flag.ExitOnError)
	o := &buildOptions{}
	created, sched, agents, libs := addBuildFlags(fset, o)
	var d distOptions
	fset.StringVar(&d.Dist, "dist", "dist", "release directory")
	fset.StringVar(&d.Images, "images", "dist/images", "directory of the image archives and images.json (make images); the packaged chart pins their digests")
	fset.StringVar(&d.BaseURL, "base-url", "", "download URL of the release files (default: the source's GitHub release for v<version>)")
	_ = fset.Parse(args)
	if err := o.finish(*created, *sched, *agents, *libs); err != nil {
		return err
	}
	if d.BaseURL == "" {
		d.BaseURL = strings.TrimSuffix(o.Source, "/") + "/releases/download/v" + o.Version
	}
	return buildDist(o, d)
}

func buildDist(o *buildOptions, d distOptions) error {
	if err := os.MkdirAll(d.Dist, 0o755); err != nil {
		return err
	}
	// Read before the long build: the chart pins the images this release's images.json names.
	digests, err := chartDigests(d.Images, o.Version)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "tessera-dist-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// The CLI's programs per platform, for its krew package: kubectl-tessera (the same
	// binary as tessera) and tessera-simulate, which it runs from beside itself.
	cli := map[string]map[string][]byte{}
	var platforms []string
	for _, t := range binaryTargets(o) {
		dir := filepath.Join(work, t.os+"-"+t.arch)
		bin, err := goBuild(o, t.prog, t.os, t.arch, dir)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("%s_%s_%s_%s%s", t.prog.Name, o.Version, t.os, t.arch, exeSuffix(t.os))
		if err := os.WriteFile(filepath.Join(d.Dist, name), b, 0o755); err != nil {
			return err
		}
		if inKrew := krewName(t.prog, t.os); inKrew != "" {
			plat := t.os + "/" + t.arch
			if cli[plat] == nil {
				cli[plat] = map[string][]byte{}
				platforms = append(platforms, plat)
			}
			cli[plat][inKrew] = b
		}
	}
	extra, err := krewExtras(o, filepath.Join(work, runtime.GOOS+"-"+runtime.GOARCH, cliTool.Name+exeSuffix(runtime.GOOS)))
	if err != nil {
		return err
	}
	var plugins []krewPlatform
	for _, plat := range platforms {
		goos, arch, _ := strings.Cut(plat, "/")
		archive := krewArchiveName(o.Version, goos, arch)
		files := krewArchive(goos, cli[plat], extra)
		tgz, err := tarGz(files, o.Created)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d.Dist, archive), tgz, 0o644); err != nil {
			return err
		}
		plugins = append(plugins, newKrewPlatform(goos, arch, d.BaseURL+"/"+archive, fmt.Sprintf("%x", sha256.Sum256(tgz)), files))
	}
	chart, err := packageChart(filepath.Join(o.Root, "charts", "tessera"), o.Version, o.Created, digests)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d.Dist, "tessera-"+o.Version+".tgz"), chart, 0o644); err != nil {
		return err
	}
	krew, err := krewManifest(o, plugins)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d.Dist, "tessera.yaml"), krew, 0o644); err != nil {
		return err
	}
	if err := copyImages(d); err != nil {
		return err
	}
	return writeSums(d.Dist)
}

// copyImages brings the image archives and images.json into Dist/images.
func copyImages(d distOptions) error {
	to := filepath.Join(d.Dist, "images")
	if a, _ := filepath.Abs(d.Images); a == mustAbs(to) {
		return nil
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(d.Images, "*"))
	if err != nil {
		return err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, filepath.Base(f)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func mustAbs(p string) string {
	a, _ := filepath.Abs(p)
	return a
}

// writeSums writes SHA256SUMS (sha256sum's format) of every other file under dir.
func writeSums(dir string) error {
	var lines []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || filepath.Base(p) == "SHA256SUMS" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		lines = append(lines, fmt.Sprintf("%x  %s", sha256.Sum256(b), filepath.ToSlash(rel)))
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i][66:] < lines[j][66:] })
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

type tarFile struct {
	mode int64
	data []byte
}

// tarGz is a reproducible .tar.gz: sorted entries, one time, anonymous root ownership.
func tarGz(files map[string]tarFile, mtime time.Time) ([]byte, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	for _, n := range names {
		f := files[n]
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: f.mode, Size: int64(len(f.data)), ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

var (
	chartVersionLine    = regexp.MustCompile(`(?m)^version:.*$`)
	chartAppVersionLine = regexp.MustCompile(`(?m)^appVersion:.*$`)
)

// packageChart does what `helm package --version V --app-version V` does, reproducibly:
// the chart directory under "tessera/" in a .tgz, with Chart.yaml's version and
// appVersion set to the release (so the default image tags are the release's images),
// and values.yaml's settings (chartDigests: the images' digests, so that the released
// chart pulls the release's images by digest unless told otherwise) set in place.
// Files matching .helmignore lines (plain names and *.ext globs) are left out.
func packageChart(dir, version string, mtime time.Time, values []valueSetting) ([]byte, error) {
	ignore := []string{".helmignore"}
	if b, err := os.ReadFile(filepath.Join(dir, ".helmignore")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				ignore = append(ignore, strings.TrimSuffix(l, "/"))
			}
		}
	}
	files := map[string]tarFile{}
	valuesSet := false
	name := filepath.Base(dir)
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		for _, pat := range ignore {
			if ok, _ := filepath.Match(pat, e.Name()); ok || pat == rel {
				if e.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		if e.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if rel == "Chart.yaml" {
			b = chartVersionLine.ReplaceAll(b, []byte("version: "+version))
			b = chartAppVersionLine.ReplaceAll(b, []byte(fmt.Sprintf("appVersion: %q", version)))
		}
		if rel == "values.yaml" && len(values) > 0 {
			if b, err = setValues(b, values); err != nil {
				return err
			}
			valuesSet = true
		}
		files[name+"/"+filepath.ToSlash(rel)] = tarFile{mode: 0o644, data: b}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(values) > 0 && !valuesSet {
		return nil, fmt.Errorf("%s: no values.yaml to set the image digests in", dir)
	}
	return tarGz(files, mtime)
}
