package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestMain lets a test run this package's Main as a program (the completion scripts
// call the tool back): TESSERA_CLI_MAIN=1 runs it on the arguments, against no cluster.
func TestMain(m *testing.M) {
	if os.Getenv("TESSERA_CLI_MAIN") == "1" {
		os.Exit(Main(context.Background(), noClusterEnv(os.Stdout, os.Stderr, os.Getenv("TESSERA_CLI_PLUGIN") == "1"), os.Args[1:], simulateCommand()))
	}
	os.Exit(m.Run())
}

func noClusterEnv(out, errOut interface{ Write([]byte) (int, error) }, plugin bool) Env {
	return Env{Stdout: out, Stderr: errOut, Now: time.Now, Plugin: plugin,
		Client: func(string, *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error) {
			return nil, "", errors.New("no cluster in this test")
		}}
}

func simulateCommand() Command {
	return Command{Name: "simulate", Summary: "simulate", Help: "Flags:\n  -f FILE  scenario\n",
		Run: func(context.Context, Env, []string) error { return nil }}
}

func runMainEnv(env Env, args ...string) int {
	return Main(context.Background(), env, args, simulateCommand())
}

func runMain(args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code = runMainEnv(noClusterEnv(&out, &errOut, false), args...)
	return out.String(), errOut.String(), code
}

// commandNames are the commands `tessera --help` lists.
func commandNames() []string {
	var names []string
	for _, c := range newRoot(noClusterEnv(nil, nil, false), []Command{simulateCommand()}).Commands() {
		if c.IsAvailableCommand() || c.Name() == "help" {
			names = append(names, c.Name())
		}
	}
	return names
}

func TestHelpGoesToStdoutWithExitZeroForTheToolAndEveryCommand(t *testing.T) {
	cases := [][]string{{"--help"}, {"-h"}, {"help"}}
	for _, name := range commandNames() {
		cases = append(cases, []string{name, "--help"}, []string{name, "-h"}, []string{"help", name})
	}
	cases = append(cases, []string{"pod", "train-0", "-n", "team-a", "--help"}, []string{"-n", "team-a", "pod", "--help"})
	for _, args := range cases {
		out, errOut, code := runMain(args...)
		if code != 0 || errOut != "" || !strings.HasPrefix(out, "usage: tessera") {
			t.Errorf("tessera %s: exit %d, stderr %q, stdout starts %.40q; want exit 0, usage on stdout only", strings.Join(args, " "), code, errOut, out)
		}
	}
	out, _, _ := runMain("report", "--help")
	if !strings.Contains(out, "--html") || !strings.Contains(out, "--kubeconfig") || !strings.Contains(out, "usage: tessera report --html FILE [flags]") {
		t.Errorf("report --help lacks its usage line, its own flag or the global flags:\n%s", out)
	}
	out, _, _ = runMain("simulate", "--help")
	if !strings.Contains(out, "-f FILE  scenario") || strings.Contains(out, "--kubeconfig") {
		t.Errorf("simulate --help should list its own flags only:\n%s", out)
	}
}

// A command line the tool cannot understand: exit 2, nothing on stdout, and on stderr
// one line saying why and one hint, not a page of flags.
func TestUsageErrorsAreOneLineAndAHint(t *testing.T) {
	for _, args := range [][]string{{"frobnicate"}, {"pod"}, {"nodes", "-o", "bogus"}, {"nodes", "--bogus"}, {"completion"},
		{"completion", "tcsh"}, {"version", "extra"}, {"help", "nope"}, {"-n"}, {"pod", "x", "-o", "wide"}} {
		out, errOut, code := runMain(args...)
		lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
		if code != 2 || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], "tessera") || !strings.Contains(lines[1], "--help") {
			t.Errorf("tessera %s: exit %d, stdout %q; want exit 2 and two lines on stderr (why, then a hint naming --help), got:\n%s",
				strings.Join(args, " "), code, out, errOut)
		}
	}
	_, errOut, _ := runMain("podd")
	if want := "tessera: unknown command \"podd\"\nDid you mean \"pod\"? \"tessera --help\" lists the commands.\n"; errOut != want {
		t.Errorf("mistyped command:\n%s\nwant:\n%s", errOut, want)
	}
	_, errOut, _ = runMain("pod", "a", "b")
	if want := "tessera pod: pod takes one pod name\nSee \"tessera pod --help\".\n"; errOut != want {
		t.Errorf("pod with two names:\n%s\nwant:\n%s", errOut, want)
	}
	out, errOut, code := runMain()
	if code != 2 || out != "" || !strings.HasPrefix(errOut, "usage: tessera <command> [flags]") {
		t.Errorf("tessera alone: exit %d, stdout %q; want the usage on stderr, exit 2; stderr:\n%s", code, out, errOut)
	}
}

func TestVersionPrintsTheBuild(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, _, code := runMain(args...)
		if code != 0 || !strings.HasPrefix(out, "tessera ") || !strings.Contains(out, "commit ") || strings.Count(out, "\n") != 1 {
			t.Errorf("tessera %s: exit %d, %q", args[0], code, out)
		}
	}
}

func TestUsageListsEveryCommandOnce(t *testing.T) {
	out, _, _ := runMain("--help")
	for _, name := range commandNames() {
		if n := strings.Count(out, "\n  "+name+" "); n != 1 {
			t.Errorf("usage lists %q %d times:\n%s", name, n, out)
		}
	}
	for _, flag := range []string{"--output", "--no-headers", "--namespace", "--all-namespaces", "--kubeconfig", "--context", "--scheduler-configmap"} {
		if !strings.Contains(out, flag) {
			t.Errorf("usage lacks the global flag %s", flag)
		}
	}
}

// Run as a kubectl plugin, every usage line and hint names "kubectl tessera".
func TestAsAKubectlPluginTheUsageSaysKubectlTessera(t *testing.T) {
	var out, errOut bytes.Buffer
	env := noClusterEnv(&out, &errOut, true)
	if code := runMainEnv(env, "--help"); code != 0 || !strings.HasPrefix(out.String(), "usage: kubectl tessera <command> [flags]") ||
		!strings.Contains(out.String(), `"kubectl tessera <command> --help"`) {
		t.Errorf("plugin --help: exit %d\n%s", code, out.String())
	}
	out.Reset()
	runMainEnv(env, "help", "pod")
	if !strings.HasPrefix(out.String(), "usage: kubectl tessera pod NAME [flags]") {
		t.Errorf("plugin help pod:\n%s", out.String())
	}
	runMainEnv(env, "explian")
	if want := "kubectl tessera: unknown command \"explian\"\nDid you mean \"explain\"? \"kubectl tessera --help\" lists the commands.\n"; errOut.String() != want {
		t.Errorf("plugin mistyped command:\n%s\nwant:\n%s", errOut.String(), want)
	}
}

func TestAsPluginKnowsHowKubectlRunsIt(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, c := range []struct {
		argv0  string
		getenv func(string) string
		want   bool
	}{
		{"/usr/local/bin/tessera", env(), false},
		{"/home/a/.krew/bin/kubectl-tessera", env(), true},
		{"kubectl-tessera.exe", env(), true},
		{"kubectl-tessera", env(), true},
		{"./bin/tessera", env("KUBECTL_PATH", "/usr/bin/kubectl"), true},
		{"tessera", env("KUBECTL_PLUGINS_CALLER", "/usr/bin/kubectl"), true},
		{"kubectl-tessera-dev", env(), false},
	} {
		if got := AsPlugin(c.argv0, c.getenv); got != c.want {
			t.Errorf("AsPlugin(%q) = %v, want %v", c.argv0, got, c.want)
		}
	}
}
