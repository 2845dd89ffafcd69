package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
)

// column is one column of -o custom-columns: its header and the JSONPath of its cells.
type column struct {
	header string
	path   *jsonpath.JSONPath
}

// parseColumns reads kubectl's two spellings of custom columns:
// HEADER:PATH,HEADER:PATH on the command line, or a file whose first line holds the
// headers and second line the paths, separated by blanks. A path may be written as
// kubectl takes it: .spec.x, spec.x or {.spec.x}.
func parseColumns(spec string, file bool) ([]column, error) {
	var headers, paths []string
	if file {
		var lines []string
		for _, l := range strings.Split(spec, "\n") {
			if strings.TrimSpace(l) != "" {
				lines = append(lines, l)
			}
		}
		if len(lines) != 2 {
			return nil, fmt.Errorf("want two lines, the headers and their paths; got %d", len(lines))
		}
		headers, paths = strings.Fields(lines[0]), strings.Fields(lines[1])
		if len(headers) != len(paths) {
			return nil, fmt.Errorf("%d headers and %d paths", len(headers), len(paths))
		}
	} else {
		for _, part := range strings.Split(spec, ",") {
			h, p, ok := strings.Cut(part, ":")
			if !ok || h == "" || p == "" {
				return nil, fmt.Errorf("%q is not HEADER:JSONPATH", part)
			}
			headers, paths = append(headers, h), append(paths, p)
		}
	}
	if len(headers) == 0 {
		return nil, errors.New("no columns given")
	}
	cols := make([]column, len(headers))
	for i, h := range headers {
		jp := jsonpath.New(h).AllowMissingKeys(true)
		if err := jp.Parse(relaxedPath(paths[i])); err != nil {
			return nil, fmt.Errorf("column %s: %w", h, err)
		}
		cols[i] = column{header: h, path: jp}
	}
	return cols, nil
}

// relaxedPath is a column's path as a JSONPath template: {.a.b} from .a.b, a.b or {.a.b}.
func relaxedPath(p string) string {
	p = strings.TrimSpace(p)
	if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
		p = strings.TrimSpace(p[1 : len(p)-1])
	}
	if !strings.HasPrefix(p, ".") {
		p = "." + p
	}
	return "{" + p + "}"
}

// writeColumns prints a row per item, as kubectl does: a cell holds every value its
// path finds, joined by commas, or <none>.
func writeColumns(w io.Writer, cols []column, rows []map[string]any, noHeaders bool) error {
	tw := printers.GetNewTabWriter(w)
	if !noHeaders {
		headers := make([]string, len(cols))
		for i, c := range cols {
			headers[i] = c.header
		}
		fmt.Fprintln(tw, strings.Join(headers, "\t"))
	}
	for _, row := range rows {
		cells := make([]string, len(cols))
		for i, c := range cols {
			results, err := c.path.FindResults(row)
			if err != nil {
				return fmt.Errorf("column %s: %w", c.header, err)
			}
			var values []string
			for _, rs := range results {
				for _, v := range rs {
					values = append(values, fmt.Sprint(v.Interface()))
				}
			}
			cells[i] = "<none>"
			if len(values) > 0 {
				cells[i] = printers.EscapeTerminal(strings.Join(values, ","))
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}
