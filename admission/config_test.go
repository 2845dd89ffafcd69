package admission

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

func TestParseConfig(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string // substrings of the error, in order; none: valid
	}{
		{"the documented example is valid", mustRead(t, "../config/admission.yaml"), nil},
		{"a version alone takes every default", "version: v1\n", nil},
		{"no version is refused", "defaultQueue: x\n", []string{`version: "": this build reads "v1"`}},
		{"an unknown field is refused", "version: v1\nschedulerNmae: volcano\n", []string{`unknown field "schedulerNmae"`}},
		{"each bad field is named with its value", `version: v1
schedulerName: Volcano_Scheduler
defaultQueue: ""
resources: {cores: "not a name!"}
limits:
  - namespace: team-a
    queue: research
  - queue: research
    allowedQoS: [gold]
    maxCores: 150
    maxCards: -1
    maxMemoryPercent: 101
    maxMemoryMiB: -5
`, []string{
			`schedulerName: "Volcano_Scheduler": want a scheduler name`,
			`defaultQueue: "": want a queue name`,
			`resources.cores: "not a name!"`,
			`limits[0]: names namespace "team-a" and queue "research"`,
			`limits[1].allowedQoS[0]: "gold": want best-effort, fixed-share or burst-share`,
			`limits[1].maxCards: -1: want 1..64`,
			`limits[1].maxCores: 150: want 1..100`,
			`limits[1].maxMemoryPercent: 101: want 1..100`,
			`limits[1].maxMemoryMiB: -5`,
		}},
		{"the scheduler set must hold the scheduler set on pods", "version: v1\nschedulerName: a\nschedulerNames: [b, c]\n",
			[]string{`schedulerName: "a": want one of schedulerNames [b c]`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.yaml))
			if len(c.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want %q", c.want)
			}
			if !errors.Is(err, api.ErrInvalid) && !errors.Is(err, api.ErrUnsupportedVersion) {
				t.Errorf("error %v wraps neither api.ErrInvalid nor api.ErrUnsupportedVersion", err)
			}
			msg, at := err.Error(), 0
			for _, w := range c.want {
				i := strings.Index(msg[at:], w)
				if i < 0 {
					t.Fatalf("error\n%s\nlacks (in order) %q", msg, w)
				}
				at += i + len(w)
			}
		})
	}
}

func TestLoadConfigNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "admission.yaml")
	if err := os.WriteFile(path, []byte("version: v2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+": ") || !errors.Is(err, api.ErrUnsupportedVersion) {
		t.Errorf("error %v: want it to start with the path and wrap ErrUnsupportedVersion", err)
	}
	c, err := LoadConfig("")
	if err != nil || c.SchedulerName != "volcano" || c.DefaultQueue != "default" {
		t.Errorf("no file: %+v, %v", c, err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
