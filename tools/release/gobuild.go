package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

const buildinfoPkg = "github.com/tessera-gpu/tessera/internal/buildinfo"

// program is one binary of the repository and how it is built.
type program struct {
	Name string // binary name
	Pkg  string // ./cmd/...
	Cgo  bool   // needs a C compiler for the target (the node agent: go-nvml)
}

var (
	scheduler = program{Name: "vc-scheduler", Pkg: "./cmd/vc-scheduler"}
	agent     = program{Name: "vgpu-device-plugin", Pkg: "./cmd/vgpu-device-plugin", Cgo: true}
	cliTool   = program{Name: "tessera", Pkg: "./cmd/tessera"}
	// The admission webhook ships in the scheduler's image as a second entrypoint.
	admissionWebhook = program{Name: "tessera-admission", Pkg: "./cmd/tessera-admission"}
	// simulator is what `tessera simulate` runs from beside the CLI (it links Volcano's
	// scheduler; the CLI does not).
	simulator = program{Name: "tessera-simulate", Pkg: "./cmd/tessera-simulate"}
)

// crossCC is the C compiler for a cgo build on another architecture (Debian's cross
// toolchain names).
var crossCC = map[string]string{"arm64": "aarch64-linux-gnu-gcc", "amd64": "x86_64-linux-gnu-gcc"}

// goBuild builds prog for goos/goarch into dir/<name> reproducibly: -trimpath, no VCS
// stamp (the revision comes from -X), stripped, and static unless the program needs cgo.
func goBuild(o *buildOptions, prog program, goos, goarch, dir string) (string, error) {
	out := filepath.Join(dir, prog.Name+exeSuffix(goos))
	ldflags := []string{"-s", "-w", "-buildid=",
		"-X", buildinfoPkg + ".Version=" + o.Version,
		"-X", buildinfoPkg + ".Revision=" + o.Revision,
	}
	if prog == scheduler {
		// Volcano's own --version lines (printed after Tessera's): the release of Volcano it is built on.
		v, err := exec.Command("go", "list", "-C", o.Root, "-m", "-f", "{{.Version}}", "volcano.sh/volcano").Output()
		if err != nil {
			return "", fmt.Errorf("go list -m volcano.sh/volcano: %w", err)
		}
		ldflags = append(ldflags, "-X", "volcano.sh/volcano/pkg/version.Version="+strings.TrimSpace(string(v)),
			"-X", "volcano.sh/volcano/pkg/version.Built="+o.Created.UTC().Format(time.RFC3339))
	}
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", strings.Join(ldflags, " "), "-o", out, prog.Pkg}
	cmd := exec.Command("go", args...)
	cmd.Dir = o.Root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "GOFLAGS=-mod=readonly")
	if prog.Cgo {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=1")
		if goarch != hostArch() || goos != "linux" {
			cc := crossCC[goarch]
			if _, err := exec.LookPath(cc); err != nil || goos != "linux" {
				return "", fmt.Errorf("%s for %s/%s needs cgo and the cross compiler %s, which is not installed", prog.Name, goos, goarch, cc)
			}
			cmd.Env = append(cmd.Env, "CC="+cc)
		}
	} else {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	}
	fmt.Fprintf(os.Stderr, "go build %s for %s/%s\n", prog.Pkg, goos, goarch)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s for %s/%s: %w", prog.Pkg, goos, goarch, err)
	}
	return out, nil
}

func hostArch() string {
	out, err := exec.Command("go", "env", "GOHOSTARCH").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// exeSuffix is what an executable's name ends in on goos: ".exe" on Windows.
func exeSuffix(goos string) string {
	if goos == "windows" {
		return ".exe"
	}
	return ""
}
