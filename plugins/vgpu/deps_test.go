package vgpu_test

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/testing/golist"
)

// The plugin's rooms (README.md, "Where things are"): the adapter (this package) is
// the only one that sees Volcano's session; it builds on the card book (book) and the
// queue shares (shares), which see only Tessera's own types and Volcano's ID and Info
// types, and never each other. Inside each package the files stand in floors: no
// file uses a name of a file that uses one of its own, directly or round a circle.

const module = "github.com/tessera-gpu/tessera/"

// TestBookAndSharesNeverSeeTheSession holds the package rule with what the go command
// itself resolves.
func TestBookAndSharesNeverSeeTheSession(t *testing.T) {
	for pkg, roots := range map[string][]string{
		"./book": {module + "api", module + "placement", module + "placement/fairshare", module + "pluginargs",
			"volcano.sh/volcano/pkg/scheduler/api", "k8s.io/api/core/v1", "k8s.io/apimachinery/pkg/types", "k8s.io/klog/v2"},
		"./shares": {module + "api", module + "placement/fairshare", module + "pluginargs",
			"volcano.sh/volcano/pkg/scheduler/api", "k8s.io/klog/v2"},
	} {
		self := module + "plugins/vgpu/" + strings.TrimPrefix(pkg, "./")
		allowed := golist.Deps(t, roots...)
		for _, dep := range golist.Deps(t, pkg) {
			if dep == self || slices.Contains(allowed, dep) {
				continue
			}
			t.Errorf("package %s builds on %s; it may build only on %s and the standard library", self, dep, strings.Join(roots, ", "))
		}
	}
}

// TestFilesStandInFloors holds the file rule: in each of the plugin's packages, the
// graph of "this file uses a name that file declares" has no circle.
func TestFilesStandInFloors(t *testing.T) {
	for _, pkg := range []string{".", "./book", "./shares"} {
		uses := fileUses(t, pkg)
		if len(uses) == 0 {
			t.Fatalf("package %s: no file uses another's names; the check reads nothing", pkg)
		}
		for _, group := range circles(uses) {
			var steps []string
			for _, from := range group {
				for _, to := range group {
					if names := uses[from][to]; len(names) > 0 {
						steps = append(steps, from+" -> "+to+" ("+strings.Join(names, ", ")+")")
					}
				}
			}
			t.Errorf("package %s: files %s use each other round a circle: %s", pkg, strings.Join(group, ", "), strings.Join(steps, "; "))
		}
	}
}

// The check sees what it must: a method declared on another file's type, and a
// circle of three files.
func TestFileUsesSeeMethodsAndCircles(t *testing.T) {
	if names := fileUses(t, "./book")["capacity.go"]["ledger.go"]; !slices.Contains(names, "Ledger") || !slices.Contains(names, "mu") {
		t.Errorf("capacity.go uses %v of ledger.go, want Ledger and its mu among them", names)
	}
	got := circles(map[string]map[string][]string{
		"a.go": {"b.go": {"B"}}, "b.go": {"c.go": {"C"}}, "c.go": {"a.go": {"A"}, "d.go": {"D"}}, "d.go": {},
	})
	if len(got) != 1 || !slices.Equal(got[0], []string{"a.go", "b.go", "c.go"}) {
		t.Errorf("circles = %v, want [[a.go b.go c.go]]", got)
	}
}

// fileUses type-checks pkg (its imports read from the export data the go command
// builds) and returns, per file, the files whose package-level names it uses, with
// the names.
func fileUses(t *testing.T, pkg string) map[string]map[string][]string {
	t.Helper()
	exports := map[string]string{}
	for _, line := range strings.Split(goList(t, "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", pkg), "\n") {
		if path, file, ok := strings.Cut(line, "\t"); ok && file != "" {
			exports[path] = file
		}
	}
	dir, names, _ := strings.Cut(strings.TrimSpace(goList(t, "-f", "{{.Dir}}\t{{join .GoFiles \"\\t\"}}", pkg)), "\t")
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range strings.Split(names, "\t") {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	lookup := func(path string) (io.ReadCloser, error) { return os.Open(exports[path]) }
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	checked, err := conf.Check(pkg, fset, files, info)
	if err != nil {
		t.Fatalf("type-checking %s: %v", pkg, err)
	}
	uses := map[string]map[string][]string{}
	for id, obj := range info.Uses {
		if obj.Pkg() != checked || !obj.Pos().IsValid() {
			continue
		}
		from, to := filepath.Base(fset.File(id.Pos()).Name()), filepath.Base(fset.File(obj.Pos()).Name())
		if from == to || obj.Parent() != nil && obj.Parent() != checked.Scope() {
			continue // the same file, or a local name
		}
		if uses[from] == nil {
			uses[from] = map[string][]string{}
		}
		if !slices.Contains(uses[from][to], obj.Name()) {
			uses[from][to] = append(uses[from][to], obj.Name())
		}
	}
	for _, tos := range uses {
		for _, names := range tos {
			sort.Strings(names)
		}
	}
	return uses
}

func goList(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return string(out)
}

// circles returns the groups of two or more files that reach each other (strongly
// connected, Tarjan's algorithm), each in name order.
func circles(uses map[string]map[string][]string) [][]string {
	var (
		index         = map[string]int{}
		low           = map[string]int{}
		onStack       = map[string]bool{}
		stack, nodes  []string
		groups        [][]string
		strongconnect func(string)
	)
	for from, tos := range uses {
		nodes = append(nodes, from)
		for to := range tos {
			nodes = append(nodes, to)
		}
	}
	sort.Strings(nodes)
	nodes = slices.Compact(nodes)
	strongconnect = func(v string) {
		index[v], low[v] = len(index), len(index)
		stack, onStack[v] = append(stack, v), true
		tos := make([]string, 0, len(uses[v]))
		for w := range uses[v] {
			tos = append(tos, w)
		}
		sort.Strings(tos)
		for _, w := range tos {
			if _, seen := index[w]; !seen {
				strongconnect(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] != index[v] {
			return
		}
		var group []string
		for {
			w := stack[len(stack)-1]
			stack, onStack[w] = stack[:len(stack)-1], false
			group = append(group, w)
			if w == v {
				break
			}
		}
		if len(group) > 1 {
			sort.Strings(group)
			groups = append(groups, group)
		}
	}
	for _, v := range nodes {
		if _, seen := index[v]; !seen {
			strongconnect(v)
		}
	}
	return groups
}
