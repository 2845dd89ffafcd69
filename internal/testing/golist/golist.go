// Package golist lets tests hold the module's import rules against what the go
// command itself resolves (`go list -deps`), so that a rule such as "the CLI links no
// Volcano package" fails a test the day an import breaks it.
package golist

import (
	"os/exec"
	"strings"
	"testing"
)

// Deps returns the import paths of every package that pkgs build from, themselves
// included, leaving out the standard library. Tests are not counted: a test may use
// what its package must not.
func Deps(t testing.TB, pkgs ...string) []string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, pkgs...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return strings.Fields(string(out))
}
