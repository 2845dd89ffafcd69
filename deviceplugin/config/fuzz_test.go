package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadFile feeds arbitrary config files to Load: it never panics, every refusal wraps
// ErrInvalid, and what it accepts validates (a card API it accepts is one of the two).
func FuzzLoadFile(f *testing.F) {
	example, err := os.ReadFile("../../config/device-plugin.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(example),
		"version: v1\nnodeName: n\ncardAPI: dra\n",
		"version: v1\nnodeName: n\ncardAPI: dra\ndraPluginDir: /data/kubelet/plugins\ndraRegistrationDir: /data/kubelet/plugins_registry\n",
		"version: v1\nnodeName: n\ncardAPI: DRA\ndraPluginDir: plugins\n",
		"version: v2\nnodeName: n\n",
		"version: v1\nnodeName: n\nmemoryGuard: {mode: report, interval: 1s}\ncontextReserve: {default: 1Gi}\n",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, body []byte) {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, body, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load([]string{"--config", path}, func(string) (string, bool) { return "", false })
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Load refused %q with %v, which does not wrap ErrInvalid", body, err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Load accepted %q, which does not validate: %v", body, err)
		}
		if c.CardAPI != CardAPIDevicePlugin && c.CardAPI != CardAPIDRA {
			t.Fatalf("Load accepted card API %q", c.CardAPI)
		}
	})
}
