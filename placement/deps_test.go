package placement_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/testing/golist"
)

// The placement maths is shared by the scheduler plugin, the node agent and the CLI,
// so it may build only on the contract and the standard library: no Volcano, no
// Kubernetes client, nothing of the plugins or the agent.
func TestPlacementBuildsOnlyOnTheContract(t *testing.T) {
	const module = "github.com/tessera-gpu/tessera/"
	allowed := golist.Deps(t, "../api")
	for _, dep := range golist.Deps(t, "./...") {
		if strings.HasPrefix(dep, module+"placement") || slices.Contains(allowed, dep) {
			continue
		}
		t.Errorf("package placement builds on %s; it may import only %sapi and the standard library", dep, module)
	}
}
