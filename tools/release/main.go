// Command release builds Tessera's container images without a Docker engine, pushes
// them, and assembles a release. The Makefile runs it (make images, push, release);
// it is its own module so that go-containerregistry stays out of the product's go.mod.
//
//	release images  [flags]   image archives + images.json into --out
//	release push    --registry R [--insecure] [--out DIR]
//	release dist    [flags]   binaries, krew packages and manifest, chart, SHA256SUMS into --dist
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: release images|push|dist [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "images":
		var o *buildOptions
		if o, err = parseBuildFlags("images", os.Args[2:]); err == nil {
			_, err = buildImages(o)
		}
	case "push":
		fs := flag.NewFlagSet("push", flag.ExitOnError)
		out := fs.String("out", "dist/images", "directory of images.json and the archives")
		registry := fs.String("registry", "", "registry and path to push to, e.g. registry.example.com/tessera")
		insecure := fs.Bool("insecure", false, "allow plain HTTP (a registry on localhost)")
		_ = fs.Parse(os.Args[2:])
		if *registry == "" {
			err = fmt.Errorf("push: --registry is required (make push REGISTRY=...)")
		} else {
			_, err = push(*out, strings.TrimSuffix(*registry, "/"), *insecure)
		}
	case "dist":
		err = distMain(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// addBuildFlags defines the flags every build shares; the Makefile passes each.
func addBuildFlags(fs *flag.FlagSet, o *buildOptions) (created *string, sched, agents, libs *string) {
	fs.StringVar(&o.Root, "root", ".", "repository root")
	fs.StringVar(&o.Out, "out", "dist/images", "output directory")
	fs.StringVar(&o.Repository, "repository", "ghcr.io/tessera-gpu", "image name prefix")
	fs.StringVar(&o.Version, "version", "", "release version (the image tag)")
	fs.StringVar(&o.Revision, "revision", "", "source commit")
	fs.StringVar(&o.Source, "source", "https://github.com/tessera-gpu/tessera", "source repository URL")
	fs.StringVar(&o.Licenses, "licenses", "Apache-2.0", "SPDX license expression for the images")
	fs.StringVar(&o.DebDir, "debs", "build/.debs", "directory of the downloaded Debian packages")
	fs.StringVar(&o.Lock, "lock", "build/image-packages.lock", "Debian package lock")
	created = fs.String("created", "", "creation time, seconds since the epoch (the commit's time)")
	sched = fs.String("scheduler-platforms", "linux/amd64,linux/arm64", "platforms of the scheduler image")
	agents = fs.String("agent-platforms", "linux/amd64", "platforms of the node agent image")
	libs = fs.String("libvgpu", "", "ARCH=PATH,... libvgpu.so per architecture")
	return
}

func parseBuildFlags(name string, args []string) (*buildOptions, error) {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	o := &buildOptions{}
	created, sched, agents, libs := addBuildFlags(fs, o)
	_ = fs.Parse(args)
	return o, o.finish(*created, *sched, *agents, *libs)
}

func (o *buildOptions) finish(created, sched, agents, libs string) error {
	if o.Version == "" || o.Revision == "" || created == "" {
		return fmt.Errorf("--version, --revision and --created are required")
	}
	sec, err := strconv.ParseInt(created, 10, 64)
	if err != nil {
		return fmt.Errorf("--created %q: %v", created, err)
	}
	o.Created = time.Unix(sec, 0).UTC()
	o.SchedulerPlatforms = splitList(sched)
	o.AgentPlatforms = splitList(agents)
	o.LibVGPU = map[string]string{}
	for _, kv := range splitList(libs) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--libvgpu %q: want ARCH=PATH", kv)
		}
		o.LibVGPU[k] = v
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
