// Command plots draws the pictures of the documentation (docs/images/*.svg): the plots
// from the data the benchmarks write (docs/data) and the diagrams from the descriptions
// in this package (architecture.go, handoff.go, shares.go).
//
//	go run ./tools/plots -data docs/data -out docs/images          # make plots: write the SVGs
//	go run ./tools/plots -data docs/data -out docs/images -check   # make plots-check (make test)
//
// With -check nothing is written: it fails, naming the file, when a data file is missing
// or malformed, when a committed SVG differs from what its data draws now, or when an
// SVG in -out is drawn by nothing. The output is deterministic, so the check is exact.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	data := flag.String("data", "docs/data", "directory of the benchmark data")
	out := flag.String("out", "docs/images", "directory of the SVGs")
	check := flag.Bool("check", false, "compare the SVGs in -out with what the data draws; write nothing")
	flag.Parse()
	var err error
	if *check {
		err = checkAll(*data, *out)
	} else {
		err = writeAll(*data, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "plots:", err)
		os.Exit(1)
	}
}

// drawAll draws every figure, file name → SVG.
func drawAll(data string) (map[string][]byte, error) {
	out := map[string][]byte{}
	var errs []error
	for _, f := range figures() {
		b, err := f.draw(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.name, err))
			continue
		}
		out[f.name] = withHeader(b, f)
	}
	return out, errors.Join(errs...)
}

// writeAll writes every figure it can draw, and fails naming the others.
func writeAll(data, dir string) error {
	svgs, drawErr := drawAll(data)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range sortedKeys(svgs) {
		if err := os.WriteFile(filepath.Join(dir, name), svgs[name], 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", filepath.Join(dir, name))
	}
	return drawErr
}

func checkAll(data, dir string) error {
	svgs, err := drawAll(data)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range sortedKeys(svgs) {
		file := filepath.Join(dir, name)
		have, err := os.ReadFile(file)
		switch {
		case os.IsNotExist(err):
			errs = append(errs, fmt.Errorf("%s is missing: run make plots and commit it", file))
		case err != nil:
			errs = append(errs, err)
		case !bytes.Equal(have, svgs[name]):
			errs = append(errs, fmt.Errorf("%s is not what its data draws now: run make plots and commit it", file))
		}
	}
	stale, err := filepath.Glob(filepath.Join(dir, "*.svg"))
	if err != nil {
		return err
	}
	for _, file := range stale {
		if _, ok := svgs[filepath.Base(file)]; !ok {
			errs = append(errs, fmt.Errorf("%s is drawn by no figure of tools/plots: remove it or add its figure", file))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	fmt.Printf("plots: the %d SVGs in %s are what %s draws\n", len(svgs), dir, data)
	return nil
}

// withHeader puts a comment naming the figure's sources after the XML declaration.
func withHeader(svg []byte, f figure) []byte {
	src := "the description in tools/plots"
	if len(f.sources) > 0 {
		src = "docs/data/" + strings.Join(f.sources, ", docs/data/")
	}
	comment := fmt.Sprintf("<!-- %s: drawn by make plots (tools/plots) from %s. Do not edit. -->\n", f.name, src)
	if i := bytes.IndexByte(svg, '\n'); i >= 0 && bytes.HasPrefix(svg, []byte("<?xml")) {
		return append(append(append([]byte{}, svg[:i+1]...), comment...), svg[i+1:]...)
	}
	return append([]byte(comment), svg...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
