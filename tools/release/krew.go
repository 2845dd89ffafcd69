package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/template"
)

// krewName is a program's name in the CLI's krew package ("" for the daemons): kubectl
// runs the plugin as kubectl-tessera, and `tessera simulate` runs tessera-simulate from
// the plugin's own directory. On Windows both end in .exe.
func krewName(p program, goos string) string {
	switch p {
	case cliTool:
		return "kubectl-tessera" + exeSuffix(goos)
	case simulator:
		return simulator.Name + exeSuffix(goos)
	}
	return ""
}

// krewCompletion is the executable kubectl (1.26 and later) runs to complete
// "kubectl tessera ...": a shell script, so not in the Windows package.
const krewCompletion = "kubectl_complete-tessera"

// krewFiles are the files every platform's package carries besides the programs.
type krewFiles struct {
	// License is the repository's LICENSE: krew-index asks every plugin to ship its
	// licence, and Apache-2.0 asks that copies carry it.
	License []byte
	// Completion is kubectl_complete-tessera, as `tessera completion kubectl-plugin`
	// prints it: the CLI owns its text.
	Completion []byte
}

// krewExtras reads the LICENSE and asks the CLI built for this machine (bin) for its
// completion executable.
func krewExtras(o *buildOptions, bin string) (krewFiles, error) {
	license, err := os.ReadFile(filepath.Join(o.Root, "LICENSE"))
	if err != nil {
		return krewFiles{}, fmt.Errorf("the krew package carries the repository's LICENSE: %w", err)
	}
	out, err := exec.Command(bin, "completion", "kubectl-plugin").Output()
	if err != nil {
		return krewFiles{}, fmt.Errorf("%s completion kubectl-plugin (the CLI built for this machine writes the krew package's %s): %w",
			bin, krewCompletion, err)
	}
	return krewFiles{License: license, Completion: out}, nil
}

// krewArchive is one platform's package: its programs, executable, and the extras.
func krewArchive(goos string, programs map[string][]byte, extra krewFiles) map[string]tarFile {
	files := map[string]tarFile{"LICENSE": {mode: 0o644, data: extra.License}}
	for name, b := range programs {
		files[name] = tarFile{mode: 0o755, data: b}
	}
	if goos != "windows" {
		files[krewCompletion] = tarFile{mode: 0o755, data: extra.Completion}
	}
	return files
}

type krewPlatform struct {
	OS, Arch, URI, SHA256, Bin string
	// Files are what krew copies out of the archive into the plugin's directory.
	Files []string
}

func newKrewPlatform(goos, arch, uri, sum string, files map[string]tarFile) krewPlatform {
	p := krewPlatform{OS: goos, Arch: arch, URI: uri, SHA256: sum, Bin: krewName(cliTool, goos)}
	for name := range files {
		p.Files = append(p.Files, name)
	}
	sort.Strings(p.Files)
	return p
}

func krewTemplate() *template.Template {
	return template.Must(template.New("krew").Parse(`apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: tessera
spec:
  version: v{{.Version}}
  homepage: {{.Source}}
  shortDescription: See and explain fractional-GPU placement on Volcano
  description: |
    Shows the vGPU cards of every node (memory and cores used, QoS pool, health, pods),
    a pod's cards and its node handoff, why a pending vGPU pod does not fit (with the
    scheduler's own engine and conf), and an HTML card map, for clusters scheduled by
    Tessera. Output as kubectl's: -o wide|json|yaml|jsonpath=...|custom-columns=...
  caveats: |
    Shell completion for "kubectl tessera" (kubectl 1.26 and later) needs the plugin's
    kubectl_complete-tessera on your PATH, which krew does not do:
      kubectl tessera completion kubectl-plugin > ~/.krew/bin/kubectl_complete-tessera
      chmod +x ~/.krew/bin/kubectl_complete-tessera
  platforms:
{{- range .Platforms}}
  - selector:
      matchLabels:
        os: {{.OS}}
        arch: {{.Arch}}
    uri: {{.URI}}
    sha256: {{.SHA256}}
    bin: {{.Bin}}
    files:
{{- range .Files}}
      - from: {{.}}
        to: .
{{- end}}
{{- end}}
`))
}

func krewManifest(o *buildOptions, platforms []krewPlatform) ([]byte, error) {
	var b bytes.Buffer
	err := krewTemplate().Execute(&b, struct {
		Version, Source string
		Platforms       []krewPlatform
	}{o.Version, o.Source, platforms})
	return b.Bytes(), err
}

// krewArchiveName is the package of one platform.
func krewArchiveName(version, goos, arch string) string {
	return strings.Join([]string{"kubectl-tessera", version, goos, arch}, "_") + ".tar.gz"
}
