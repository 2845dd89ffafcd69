package cli

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the output")

// golden compares got with testdata/golden/NAME (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	file := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test ./cli -run %s -update to write it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test ./cli -run '%s' -update rewrites it)\ngot:\n%s\nwant:\n%s", file, t.Name(), got, want)
	}
}

// Every printer on the fixture cluster, byte for byte: the tables people read and the
// versioned objects scripts read.
func TestPrintersGolden(t *testing.T) {
	columnsFile := filepath.Join(t.TempDir(), "columns")
	if err := os.WriteFile(columnsFile, []byte("NODE   STATUS   MODELS\n.name  .status  .cards[*].model\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	templateFile := filepath.Join(t.TempDir(), "tmpl")
	if err := os.WriteFile(templateFile, []byte(`{range .items[*]}{.name}{"\n"}{end}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file string
		args []string
	}{
		{"nodes.txt", []string{"nodes"}},
		{"nodes-no-headers.txt", []string{"nodes", "--no-headers"}},
		{"nodes-wide.txt", []string{"nodes", "-o", "wide"}},
		{"nodes.json", []string{"nodes", "-o", "json"}},
		{"nodes.yaml", []string{"nodes", "-o", "yaml"}},
		{"nodes-jsonpath.txt", []string{"nodes", "-o", `jsonpath={range .items[*]}{.name}{"\t"}{.status}{"\t"}{.cards[*].usedMemoryMiB}{"\n"}{end}`}},
		{"nodes-jsonpath-file.txt", []string{"nodes", "-o", "jsonpath-file=" + templateFile}},
		{"nodes-jsonpath-as-json.json", []string{"nodes", "-o", "jsonpath-as-json={.items[*].name}"}},
		{"nodes-go-template.txt", []string{"nodes", "-o", `go-template={{range .items}}{{.name}} {{len .cards}}{{"\n"}}{{end}}`}},
		{"nodes-template-flag.txt", []string{"nodes", "--template", `{{.kind}}{{"\n"}}`}},
		{"nodes-custom-columns.txt", []string{"nodes", "-o", "custom-columns=NAME:.name,STATUS:status,CARDS:{.cards[*].index},QUEUES:.cards[*].pods[*].queue"}},
		{"nodes-custom-columns-no-headers.txt", []string{"nodes", "--no-headers", "-o", "custom-columns=NAME:.name"}},
		{"nodes-custom-columns-file.txt", []string{"nodes", "-o", "custom-columns-file=" + columnsFile}},
		{"pod.txt", []string{"pod", "train-0"}},
		{"pod.json", []string{"pod", "train-0", "-o", "json"}},
		{"pod.yaml", []string{"pod", "train-0", "-o", "yaml"}},
		{"pod-custom-columns.txt", []string{"pod", "train-0", "-o", "custom-columns=POD:.name,NODE:.node,CARDS:.containers[*].cards[*].uuid"}},
		{"explain.txt", []string{"explain", "big"}},
		{"explain.json", []string{"explain", "big", "-o", "json"}},
		{"explain-jsonpath.txt", []string{"explain", "small", "-o", `jsonpath={.status}{" "}{.nodes[0].node}{"\n"}`}},
		{"report.json", []string{"report", "-o", "json"}},
	} {
		t.Run(c.file, func(t *testing.T) {
			golden(t, c.file, mustRun(t, cluster(t), c.args[0], c.args[1:]...))
		})
	}
}

func TestBadOutputFormatsAreRefusedBeforeTheClusterIsRead(t *testing.T) {
	for _, o := range []string{"wid", "jsonpath", "jsonpath={.items[", "go-template={{.x", "custom-columns=", "custom-columns=NAME",
		"custom-columns=NAME:.a[", "custom-columns-file=/nonexistent", "name"} {
		_, _, code := runMain("nodes", "-o", o)
		if code != 2 {
			t.Errorf("-o %q: exit %d, want 2", o, code)
		}
	}
	if _, err := parseColumns("A B\n.a\n", true); err == nil || !strings.Contains(err.Error(), "2 headers and 1 paths") {
		t.Errorf("a columns file with more headers than paths: %v", err)
	}
}

func TestRelaxedColumnPaths(t *testing.T) {
	for in, want := range map[string]string{".a.b": "{.a.b}", "a.b": "{.a.b}", "{.a.b}": "{.a.b}", "{a.b}": "{.a.b}", " .a ": "{.a}"} {
		if got := relaxedPath(in); got != want {
			t.Errorf("relaxedPath(%q) = %q, want %q", in, got, want)
		}
	}
}
