package main

import (
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/testing/golist"
)

// The CLI reads inventories, assignments and the plugin's arguments through the
// contract's own packages: it links no Volcano package (whose init-time client set-up
// would greet every command) and no scheduler plugin or node agent package.
func TestTheCLILinksNoVolcano(t *testing.T) {
	const module = "github.com/tessera-gpu/tessera/"
	for _, dep := range golist.Deps(t, ".") {
		for _, banned := range []string{"volcano.sh/", module + "plugins/", module + "deviceplugin/", module + "internal/sim"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("cmd/tessera links %s", dep)
			}
		}
	}
}
