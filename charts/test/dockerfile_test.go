package charttest

import (
	"os"
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
	fromRe := regexp.MustCompile(`^FROM\s+\S+(\s+AS\s+(\S+))?$`)
	buildRe := regexp.MustCompile(`go build .* (\./cmd/\S+)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		stages := map[string]bool{}
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
			}
			entry = entry || strings.HasPrefix(line, "ENTRYPOINT")
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
