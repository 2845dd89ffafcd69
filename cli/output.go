package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
)

// outputFlags are kubectl's output flags: -o, --no-headers, --template and
// --allow-missing-template-keys, with kubectl's meaning.
type outputFlags struct {
	format       string
	noHeaders    bool
	template     string
	allowMissing bool
	// given reports whether -o was on the command line (kubectl: --template alone
	// means -o go-template).
	given func() bool
}

// The formats this tool adds to the printers of k8s.io/cli-runtime.
const (
	formatText          = "text" // the default: what each command writes for people
	formatWide          = "wide"
	formatColumns       = "custom-columns"
	formatColumnsFile   = "custom-columns-file"
	outputFormatsSimple = "json, yaml, wide, custom-columns=SPEC, custom-columns-file=FILE, jsonpath=TEMPLATE, " +
		"jsonpath-file=FILE, jsonpath-as-json=TEMPLATE, go-template=TEMPLATE, go-template-file=FILE"
)

func (f *outputFlags) bind(fs *pflag.FlagSet) {
	fs.StringVarP(&f.format, "output", "o", "", "output format: "+outputFormatsSimple+" (default: text for people)")
	fs.BoolVar(&f.noHeaders, "no-headers", false, "print tables (text, wide, custom-columns) without their header line")
	fs.StringVar(&f.template, "template", "", "template string or file for -o go-template[-file] and jsonpath[-file]")
	fs.BoolVar(&f.allowMissing, "allow-missing-template-keys", true, "ignore a field or map key missing from the object in go-template and jsonpath output")
	f.given = func() bool { return fs.Changed("output") }
}

// printMode says which of the printer's parts prints.
type printMode int

const (
	printText    printMode = iota // the command's own text, or its table
	printWide                     // the table with its wide columns
	printColumns                  // custom columns, a row per item
	printObject                   // a printer of k8s.io/cli-runtime (json, yaml, jsonpath, go-template)
)

// printer prints a command's view the way -o asks.
type printer struct {
	mode      printMode
	columns   []column
	object    printers.ResourcePrinter
	noHeaders bool
}

// printer reads the flags. A format it does not know is an ErrUsage, found before
// the cluster is read.
func (f *outputFlags) printer() (*printer, error) {
	p := &printer{noHeaders: f.noHeaders}
	format, spec, _ := strings.Cut(f.format, "=")
	switch {
	case f.format == formatText || f.format == "" && f.template == "":
		p.mode = printText
	case f.format == formatWide:
		p.mode = printWide
	case format == formatColumns || format == formatColumnsFile:
		if format == formatColumnsFile {
			b, err := os.ReadFile(spec)
			if err != nil {
				return nil, fmt.Errorf("%w: -o %s: %v", ErrUsage, formatColumnsFile, err)
			}
			spec = string(b)
		}
		cols, err := parseColumns(spec, format == formatColumnsFile)
		if err != nil {
			return nil, fmt.Errorf("%w: -o %s: %v", ErrUsage, format, err)
		}
		p.mode, p.columns = printColumns, cols
	default:
		obj, err := f.objectPrinter()
		if err != nil {
			return nil, err
		}
		p.mode, p.object = printObject, obj
	}
	return p, nil
}

// objectPrinter is the printer of k8s.io/cli-runtime for -o json, yaml, jsonpath or
// go-template, as kubectl chooses it: the template after "=", from the file after
// "-file=", or from --template (alone, --template means -o go-template).
func (f *outputFlags) objectPrinter() (printers.ResourcePrinter, error) {
	format, tmpl, inline := strings.Cut(f.format, "=")
	if format == "" && f.template != "" && !f.given() {
		format = "go-template"
	}
	switch format {
	case "json":
		return &printers.JSONPrinter{}, nil
	case "yaml":
		return &printers.YAMLPrinter{}, nil
	case "jsonpath", "jsonpath-file", "jsonpath-as-json", "go-template", "go-template-file", "template", "templatefile":
	default:
		return nil, fmt.Errorf("%w: -o %q: want one of %s", ErrUsage, f.format, outputFormatsSimple)
	}
	if !inline {
		tmpl = f.template
	}
	if tmpl == "" {
		return nil, fmt.Errorf("%w: -o %s: no template given (-o %s=TEMPLATE or --template)", ErrUsage, format, format)
	}
	if strings.HasSuffix(format, "file") {
		b, err := os.ReadFile(tmpl)
		if err != nil {
			return nil, fmt.Errorf("%w: -o %s: %v", ErrUsage, format, err)
		}
		tmpl = string(b)
	}
	if strings.HasPrefix(format, "jsonpath") {
		p, err := printers.NewJSONPathPrinter(tmpl)
		if err != nil {
			return nil, fmt.Errorf("%w: -o %s: %v", ErrUsage, format, err)
		}
		p.AllowMissingKeys(f.allowMissing)
		p.EnableJSONOutput(format == "jsonpath-as-json")
		return p, nil
	}
	p, err := printers.NewGoTemplatePrinter([]byte(tmpl))
	if err != nil {
		return nil, fmt.Errorf("%w: -o %s: %v", ErrUsage, format, err)
	}
	p.AllowMissingKeys(f.allowMissing)
	return p, nil
}

// print writes view. text is the command's writer for people; table, when the
// command has one, is its view as kubectl's table (its wide columns of priority 1),
// which text and wide then print instead.
func (p *printer) print(out, errOut io.Writer, view any, text func(io.Writer) error, table *metav1.Table) error {
	switch p.mode {
	case printText, printWide:
		if table == nil {
			return text(out)
		}
		if len(table.Rows) == 0 {
			_, err := fmt.Fprintln(errOut, "No resources found.")
			return err
		}
		return printers.NewTablePrinter(printers.PrintOptions{NoHeaders: p.noHeaders, Wide: p.mode == printWide}).PrintObj(table, out)
	}
	obj, err := versioned(view)
	if err != nil {
		return err
	}
	if p.mode == printColumns {
		return writeColumns(out, p.columns, items(obj), p.noHeaders)
	}
	return p.object.PrintObj(obj, out)
}
