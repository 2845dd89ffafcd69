package ui

import (
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/testing/golist"
)

// cmd/tessera links this package, and the CLI links no Volcano package (whose
// init-time client set-up would greet every command): Volcano's queues and PodGroups
// are read through the dynamic client. The browser driver is for tests only.
func TestTheCardMapLinksNoVolcanoAndNoBrowserDriver(t *testing.T) {
	const module = "github.com/tessera-gpu/tessera/"
	for _, dep := range golist.Deps(t, ".") {
		for _, banned := range []string{"volcano.sh/", module + "plugins/", module + "deviceplugin/", module + "cli/ui/uitest"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("cli/ui links %s", dep)
			}
		}
	}
}
