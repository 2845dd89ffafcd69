package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func runMain(args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	env := Env{Stdout: &out, Stderr: &errOut, Now: time.Now,
		Client: func(string, *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error) {
			return nil, "", errors.New("no cluster in this test")
		}}
	code = Main(context.Background(), env, args, Command{Name: "simulate", Summary: "simulate", Help: "Flags:\n  -f FILE  scenario\n",
		Run: func(context.Context, Env, []string) error { return nil }})
	return out.String(), errOut.String(), code
}

func TestHelpGoesToStdoutWithExitZeroForTheToolAndEveryCommand(t *testing.T) {
	cases := [][]string{{"--help"}, {"-h"}, {"help"}}
	for _, c := range commandTable([]Command{{Name: "simulate", Run: func(context.Context, Env, []string) error { return nil }}}) {
		if c.Run == nil {
			continue
		}
		cases = append(cases, []string{c.Name, "--help"}, []string{c.Name, "-h"}, []string{"help", c.Name})
	}
	cases = append(cases, []string{"pod", "train-0", "-n", "team-a", "--help"})
	for _, args := range cases {
		out, errOut, code := runMain(args...)
		if code != 0 || errOut != "" || !strings.HasPrefix(out, "usage: tessera") {
			t.Errorf("tessera %s: exit %d, stderr %q, stdout starts %.40q; want exit 0, usage on stdout only", strings.Join(args, " "), code, errOut, out)
		}
	}
	out, _, _ := runMain("report", "--help")
	if !strings.Contains(out, "--html") || !strings.Contains(out, "--kubeconfig") {
		t.Errorf("report --help lists neither its own flag nor the cluster flags:\n%s", out)
	}
}

func TestUsageErrorsGoToStderrWithExitTwo(t *testing.T) {
	for _, args := range [][]string{{}, {"frobnicate"}, {"pod"}, {"nodes", "-o", "wide"}, {"completion"}, {"completion", "fish"}, {"version", "extra"}, {"help", "nope"}} {
		out, errOut, code := runMain(args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "usage: tessera") {
			t.Errorf("tessera %s: exit %d, stdout %q; want exit 2 and the usage on stderr, got stderr:\n%s", strings.Join(args, " "), code, out, errOut)
		}
	}
}

func TestVersionPrintsTheBuild(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, _, code := runMain(args...)
		if code != 0 || !strings.HasPrefix(out, "tessera ") || !strings.Contains(out, "commit ") {
			t.Errorf("tessera %s: exit %d, %q", args[0], code, out)
		}
	}
}

func TestUsageListsEveryCommandOnce(t *testing.T) {
	out, _, _ := runMain("--help")
	for _, c := range commandTable(nil) {
		if n := strings.Count(out, "\n  "+c.Name+" "); n != 1 {
			t.Errorf("usage lists %q %d times:\n%s", c.Name, n, out)
		}
	}
}

// The bash script is run by bash itself: the words it offers after each prefix.
func TestBashCompletionCompletesCommandsAndFlags(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script, _, code := runMain("completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: exit %d", code)
	}
	file := filepath.Join(t.TempDir(), "tessera.bash")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ line, want string }{
		{"tessera ex", "explain"},
		{"tessera co", "completion"},
		{"kubectl-tessera nodes --out", "--output"},
		{"tessera report --ht", "--html"},
		{"tessera pod x -o j", "json"},
		{"tessera completion z", "zsh"},
		{"tessera simulate -", "-f"},
	} {
		cmd := exec.Command(bash, "-c", `complete() { :; }; source "$0"; COMP_WORDS=($1); [[ "$1" == *" " ]] && COMP_WORDS+=(""); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _tessera; printf '%s\n' "${COMPREPLY[@]}"`, file, c.line)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains("\n"+string(out), "\n"+c.want+"\n") {
			t.Errorf("completing %q: %v; got %q, want %q among them", c.line, err, out, c.want)
		}
	}
}

func TestZshCompletionIsValidZsh(t *testing.T) {
	script, _, code := runMain("completion", "zsh")
	if code != 0 || !strings.HasPrefix(script, "#compdef tessera kubectl-tessera") || !strings.Contains(script, "explain)") {
		t.Fatalf("completion zsh: exit %d:\n%s", code, script)
	}
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skip("no zsh to parse the script")
	}
	if out, err := exec.Command(zsh, "-n", "-c", script).CombinedOutput(); err != nil {
		t.Errorf("zsh -n: %v\n%s", err, out)
	}
}

func TestKubectlPluginCompletion(t *testing.T) {
	out, _, code := runMain("__complete", "ex")
	if code != 0 || out != "explain\n:4\n" {
		t.Errorf("__complete ex: exit %d, %q", code, out)
	}
	out, _, _ = runMain("__complete", "nodes", "-o", "")
	if out != "text\njson\n:4\n" {
		t.Errorf("__complete nodes -o '': %q", out)
	}
	out, _, _ = runMain("__complete", "report", "--html", "")
	if out != ":0\n" {
		t.Errorf("__complete report --html '': %q, want file completion", out)
	}
}
