package config

import (
	"strings"
	"testing"
)

// Re-partitioning is off unless the file, the environment or a flag turns it on; a
// value that is not a boolean is refused naming the setting.
func TestMIGRepartitionIsOffByDefaultAndSetLikeAnyOther(t *testing.T) {
	base := map[string]string{"NODE_NAME": "n"}
	c, err := Load(nil, env(base))
	if err != nil || c.MIGRepartition {
		t.Fatalf("default: %v, %v; want off", c.MIGRepartition, err)
	}
	file := writeFile(t, "version: v1\nmigRepartition: true\n")
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want bool
	}{
		"the file turns it on":        {[]string{"--config", file}, nil, true},
		"the environment turns it on": {nil, map[string]string{"TESSERA_DP_MIG_REPARTITION": "true"}, true},
		"a flag turns it off again":   {[]string{"--config", file, "--mig-repartition=false"}, nil, false},
	} {
		t.Run(name, func(t *testing.T) {
			e := map[string]string{"NODE_NAME": "n"}
			for k, v := range tc.env {
				e[k] = v
			}
			c, err := Load(tc.args, env(e))
			if err != nil || c.MIGRepartition != tc.want {
				t.Fatalf("got %v, %v; want %v", c.MIGRepartition, err, tc.want)
			}
		})
	}
	_, err = Load([]string{"--mig-repartition=maybe"}, env(base))
	if err == nil || !strings.Contains(err.Error(), "mig-repartition") || !strings.Contains(err.Error(), "maybe") {
		t.Fatalf("got %v, want an error naming mig-repartition and quoting maybe", err)
	}
}
