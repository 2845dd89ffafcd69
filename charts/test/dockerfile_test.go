package charttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// No Docker engine runs in CI; these checks catch what breaks a build file silently:
// a COPY of a path that no longer exists, a go build of a package that moved, a
// stage copied from that is not defined, a library path the chart does not expect.
func TestDockerfilesReferOnlyToWhatExists(t *testing.T) {
	root := filepath.Join(ChartDir, "..", "..")
	files, _ := filepath.Glob(filepath.Join(root, "build", "*.Dockerfile"))
	if len(files) < 3 {
		t.Fatalf("found %d Dockerfiles under build/, want vc-scheduler, vgpu-device-plugin and tessera-cli", len(files))
	}
	copyRe := regexp.MustCompile(`^COPY\s+(--from=(\S+)\s+)?(.+)\s+(\S+)$`)
	fromRe := regexp.MustCompile(`^FROM\s+(?:--platform=\S+\s+)?\S+(\s+AS\s+(\S+))?$`)
	buildRe := regexp.MustCompile(`go build .* (\./cmd/\S+)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		stages := map[string]bool{}
		copied := map[string]bool{}
		var built []string
		var entry bool
		for i, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if m := fromRe.FindStringSubmatch(line); m != nil && m[2] != "" {
				stages[m[2]] = true
			}
			if m := copyRe.FindStringSubmatch(line); m != nil {
				if m[2] != "" {
					if !stages[m[2]] {
						t.Errorf("%s:%d copies from undefined stage %s", filepath.Base(f), i+1, m[2])
					}
					continue
				}
				for _, src := range strings.Fields(m[3]) {
					copied[strings.TrimSuffix(src, "/")] = true
					if _, err := os.Stat(filepath.Join(root, src)); err != nil {
						t.Errorf("%s:%d copies %s, which is not in the repository", filepath.Base(f), i+1, src)
					}
				}
			}
			if m := buildRe.FindStringSubmatch(line); m != nil {
				mains, _ := filepath.Glob(filepath.Join(root, m[1], "*.go"))
				if len(mains) == 0 {
					t.Errorf("%s:%d builds %s, which has no Go files", filepath.Base(f), i+1, m[1])
				}
				built = append(built, m[1])
			}
			entry = entry || strings.HasPrefix(line, "ENTRYPOINT")
		}
		// Every directory of this module that the built command imports must be copied in.
		for _, pkg := range built {
			for _, dir := range moduleDirs(t, root, pkg) {
				if !copied[dir] && !copied[filepath.Dir(dir)] && !copied["."] {
					t.Errorf("%s builds %s, which imports from %s/, but the file does not COPY it", filepath.Base(f), pkg, dir)
				}
			}
		}
		if !entry {
			t.Errorf("%s has no ENTRYPOINT", filepath.Base(f))
		}
	}
	dp, err := os.ReadFile(filepath.Join(root, "build", "vgpu-device-plugin.Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// The init container copies from devicePlugin.hookLibrarySource; the image must put the library there.
	if !strings.Contains(string(dp), "/opt/tessera/lib/libvgpu.so") {
		t.Errorf("the agent image does not put libvgpu.so at the chart's hookLibrarySource /opt/tessera/lib/libvgpu.so")
	}
}

// moduleDirs lists the top-level directories (and cmd/<name>) of the product module
// that pkg depends on.
func moduleDirs(t *testing.T, root, pkg string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if eq .Module.Path \"github.com/tessera-gpu/tessera\"}}{{.Dir}}{{end}}{{end}}", pkg)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	seen := map[string]bool{}
	var dirs []string
	for _, d := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			continue
		}
		parts := strings.Split(rel, string(filepath.Separator))
		top := parts[0]
		if top == "cmd" && len(parts) > 1 {
			top = filepath.Join("cmd", parts[1])
		}
		if !seen[top] {
			seen[top] = true
			dirs = append(dirs, top)
		}
	}
	return dirs
}
