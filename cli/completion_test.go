package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hasWord: a line of out is word, or word followed by a blank or tab (a description).
func hasWord(out, word string) bool {
	for _, l := range strings.Split(out, "\n") {
		if l == word || strings.HasPrefix(l, word+" ") || strings.HasPrefix(l, word+"\t") {
			return true
		}
	}
	return false
}

// The bash script is run by bash itself, calling this test binary back as "tessera":
// the words it offers after each prefix.
func TestBashCompletionCompletesCommandsAndFlags(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script, _, code := runMain("completion", "bash")
	if code != 0 || !strings.Contains(script, "__start_tessera") {
		t.Fatalf("completion bash: exit %d", code)
	}
	file := filepath.Join(t.TempDir(), "tessera.bash")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	// Without the bash-completion package the script needs _get_comp_words_by_ref; this
	// is the part of it the script uses.
	const driver = `complete() { :; }
_get_comp_words_by_ref() { cur="${COMP_WORDS[COMP_CWORD]}"; prev="${COMP_WORDS[COMP_CWORD-1]}"; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD; }
tessera() { TESSERA_CLI_MAIN=1 "$TESSERA_TEST_BINARY" "$@"; }
source "$0"
COMP_WORDS=($1); [[ "$1" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]}-1)); COMP_LINE="$1"; COMP_POINT=${#1}
__start_tessera 2>/dev/null
printf '%s\n' "${COMPREPLY[@]}"`
	for _, c := range []struct{ line, want string }{
		{"tessera ex", "explain"},
		{"tessera co", "completion"},
		{"tessera nodes --out", "--output"},
		{"tessera report --ht", "--html"},
		{"tessera pod x -o j", "json"},
		{"tessera nodes -o wi", "wide"},
		{"tessera completion z", "zsh"},
		{"tessera -n team-a po", "pod"},
	} {
		cmd := exec.Command(bash, "-c", driver, file, c.line)
		cmd.Env = append(os.Environ(), "TESSERA_TEST_BINARY="+os.Args[0])
		out, err := cmd.Output()
		if err != nil || !hasWord(string(out), c.want) {
			t.Errorf("completing %q: %v; got %q, want %q among them", c.line, err, out, c.want)
		}
	}
}

func TestZshAndFishAndPowerShellScripts(t *testing.T) {
	script, _, code := runMain("completion", "zsh")
	if code != 0 || !strings.HasPrefix(script, "#compdef tessera") {
		t.Fatalf("completion zsh: exit %d:\n%.200s", code, script)
	}
	if zsh, err := exec.LookPath("zsh"); err == nil {
		if out, err := exec.Command(zsh, "-n", "-c", script).CombinedOutput(); err != nil {
			t.Errorf("zsh -n: %v\n%s", err, out)
		}
	}
	for shell, want := range map[string]string{"fish": "complete -c tessera", "powershell": "Register-ArgumentCompleter"} {
		if out, _, code := runMain("completion", shell); code != 0 || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d, lacks %q", shell, code, want)
		}
	}
}

// kubectl completes "kubectl tessera ..." by running kubectl_complete-tessera, which asks
// the plugin's __complete (cobra's protocol: the words, then ":directive").
func TestKubectlPluginCompletion(t *testing.T) {
	out, _, code := runMain("__complete", "ex")
	if code != 0 || !hasWord(out, "explain") || !strings.HasSuffix(out, "\n:4\n") {
		t.Errorf("__complete ex: exit %d, %q", code, out)
	}
	out, _, _ = runMain("__complete", "nodes", "-o", "")
	if !hasWord(out, "json") || !hasWord(out, "wide") || !hasWord(out, "custom-columns=") || !strings.HasSuffix(out, "\n:6\n") {
		t.Errorf("__complete nodes -o '': %q, want the formats, no file completion and no space", out)
	}
	out, _, _ = runMain("__complete", "report", "--html", "")
	if out != ":0\n" {
		t.Errorf("__complete report --html '': %q, want the shell's file completion", out)
	}
	pods, _, _ := mainOn(t, cluster(t), "__complete", "-n", "team-b", "pod", "")
	nodes, _, _ := mainOn(t, cluster(t), "__complete", "nodes", "gpu-a", "gpu")
	if !hasWord(pods, "infer-0") || hasWord(pods, "train-0") || !hasWord(nodes, "gpu-b") || hasWord(nodes, "gpu-a") {
		t.Errorf("names from the cluster: pods of team-b %q, nodes after gpu-a %q", pods, nodes)
	}

	// The executable kubectl runs, beside a plugin that is this test binary.
	shim, _, code := runMain("completion", "kubectl-plugin")
	if code != 0 || shim != KubectlCompletion {
		t.Fatalf("completion kubectl-plugin: exit %d:\n%s", code, shim)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	plugin := "#!/bin/sh\nTESSERA_CLI_MAIN=1 TESSERA_CLI_PLUGIN=1 exec \"" + os.Args[0] + "\" \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "kubectl-tessera"), []byte(plugin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubectl_complete-tessera"), []byte(shim), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command(sh, filepath.Join(dir, "kubectl_complete-tessera"), "completion", "").Output()
	if err != nil || !hasWord(string(got), "bash") || !hasWord(string(got), "kubectl-plugin") {
		t.Errorf("kubectl_complete-tessera completion '': %v\n%s", err, got)
	}
}
