package cli

import (
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

const completionHelp = `Prints a completion script for the shell. Load it in the current shell:

  source <(tessera completion bash)        # bash (needs the bash-completion package)
  source <(tessera completion zsh)         # zsh

or install it for every new shell:

  tessera completion bash > /etc/bash_completion.d/tessera
  tessera completion zsh > "${fpath[1]}/_tessera"

The script completes both "tessera" and "kubectl-tessera". For "kubectl tessera <TAB>"
(kubectl 1.26 and later), put an executable named kubectl_complete-tessera on your PATH
that runs: tessera __complete "$@"
`

// flagName finds the names in usage lines: "  -o, --output string", "  --html string",
// "  -f FILE".
var flagName = regexp.MustCompile(`(?m)^\s+(?:(-\w), )?(--[\w-]+)|^\s+(-\w)\s`)

// completionWords is, per command, the words that may follow it: its flags.
func completionWords(cmds []Command) (names []string, flags map[string][]string) {
	flags = map[string][]string{}
	for _, c := range cmds {
		names = append(names, c.Name)
		var words []string
		for _, m := range flagName.FindAllStringSubmatch(c.Help, -1) {
			for _, name := range m[1:] {
				if name != "" {
					words = append(words, name)
				}
			}
		}
		switch c.Name {
		case "completion":
			words = []string{"bash", "zsh"}
		case "help":
			words = nil
			for _, o := range cmds {
				if o.Name != "help" {
					words = append(words, o.Name)
				}
			}
		}
		sort.Strings(words)
		flags[c.Name] = append([]string{"--help"}, words...)
	}
	return names, flags
}

func writeCompletion(w io.Writer, shell string, cmds []Command) error {
	names, flags := completionWords(cmds)
	cases := func(variable string) string {
		var b strings.Builder
		for _, n := range names {
			fmt.Fprintf(&b, "    %s) %s=%q ;;\n", n, variable, strings.Join(flags[n], " "))
		}
		return b.String()
	}
	switch shell {
	case "bash":
		_, err := fmt.Fprintf(w, bashCompletion, strings.Join(names, " "), cases("words"))
		return err
	case "zsh":
		_, err := fmt.Fprintf(w, zshCompletion, strings.Join(names, " "), cases("words_list"))
		return err
	}
	return fmt.Errorf("%w: completion %q: want bash or zsh", ErrUsage, shell)
}

// complete answers kubectl's plugin completion (kubectl_complete-tessera runs
// "tessera __complete ARGS... PARTIAL"): the matching words, one a line, then cobra's
// directive line (":4": no file completion; ":0": let the shell complete files).
func complete(w io.Writer, args []string, cmds []Command) error {
	names, flags := completionWords(cmds)
	partial, words, directive := "", names, ":4"
	if len(args) > 0 {
		partial = args[len(args)-1]
	}
	if len(args) > 1 {
		words = flags[args[0]]
		switch args[len(args)-2] {
		case "-o", "--output":
			words = []string{"text", "json"}
		case "--kubeconfig", "--scheduler-conf", "--html", "-f":
			words, directive = nil, ":0"
		}
	}
	for _, word := range words {
		if strings.HasPrefix(word, partial) {
			fmt.Fprintln(w, word)
		}
	}
	_, err := fmt.Fprintln(w, directive)
	return err
}

// The scripts list the commands, then each command's flags; -n, -o and the file flags
// fall back to the shell's own file completion where a value is expected.
const bashCompletion = `# bash completion for tessera and kubectl-tessera (tessera completion bash)
_tessera() {
  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" words
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "%s" -- "$cur"))
    return
  fi
  case "$prev" in
    -o|--output) COMPREPLY=($(compgen -W "text json" -- "$cur")); return ;;
    --kubeconfig|--scheduler-conf|--html|-f) COMPREPLY=($(compgen -f -- "$cur")); return ;;
  esac
  case "${COMP_WORDS[1]}" in
%s    *) words="" ;;
  esac
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _tessera tessera kubectl-tessera
`

const zshCompletion = `#compdef tessera kubectl-tessera
# zsh completion for tessera and kubectl-tessera (tessera completion zsh)
_tessera() {
  local words_list
  if (( CURRENT == 2 )); then
    compadd -- %s
    return
  fi
  case "${words[CURRENT-1]}" in
    -o|--output) compadd -- text json; return ;;
    --kubeconfig|--scheduler-conf|--html|-f) _files; return ;;
  esac
  case "${words[2]}" in
%s    *) words_list="" ;;
  esac
  compadd -- ${=words_list}
}
if [ "$funcstack[1]" = "_tessera" ]; then
  _tessera "$@"
else
  compdef _tessera tessera kubectl-tessera
fi
`
