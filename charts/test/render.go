// Package charttest renders the Tessera Helm chart with Helm's own Go library, as
// `helm install` would, for the chart tests. It is a separate module so that Helm's
// dependencies never reach the product module's go.mod.
package charttest

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// ChartDir is the chart's directory, found from this file so that tests in any
// package of the module can render it.
var ChartDir = func() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "tessera")
}()

// Rendered is the chart's output for one set of values.
type Rendered struct {
	Objs []*unstructured.Unstructured
}

func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(ChartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return ch
}

// Render runs Helm's template engine exactly as `helm install` would, with the
// values file at valuesPath ("" for the defaults) merged over values.yaml. Values that
// values.schema.json refuses are an error, as Helm reports them.
func Render(t testing.TB, valuesPath, namespace string) (*Rendered, error) {
	t.Helper()
	user := map[string]interface{}{}
	if valuesPath != "" {
		v, err := chartutil.ReadValuesFile(valuesPath)
		if err != nil {
			t.Fatalf("read %s: %v", valuesPath, err)
		}
		user = v
	}
	return RenderChart(t, loadChart(t), user, namespace)
}

// RenderValues renders the chart with user values given as YAML, into volcano-system.
func RenderValues(t testing.TB, valuesYAML string) (*Rendered, error) {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(valuesYAML))
	if err != nil {
		t.Fatalf("values %q: %v", valuesYAML, err)
	}
	return RenderChart(t, loadChart(t), v, "volcano-system")
}

// RenderChart renders ch (a loaded chart, possibly changed by the test) with user values,
// as the release "gpu".
func RenderChart(t testing.TB, ch *chart.Chart, user map[string]interface{}, namespace string) (*Rendered, error) {
	t.Helper()
	return RenderRelease(t, ch, user, "gpu", namespace)
}

// RenderRelease renders ch as the named release (object names derive from it).
func RenderRelease(t testing.TB, ch *chart.Chart, user map[string]interface{}, release, namespace string) (*Rendered, error) {
	t.Helper()
	if err := chartutil.ProcessDependenciesWithMerge(ch, user); err != nil {
		t.Fatalf("dependencies: %v", err)
	}
	vals, err := chartutil.ToRenderValues(ch, user, chartutil.ReleaseOptions{
		Name: release, Namespace: namespace, Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	r := &Rendered{}
	for _, n := range names {
		if !strings.HasSuffix(n, ".yaml") {
			continue
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(files[n])), 4096)
		for {
			var m map[string]interface{}
			if err := dec.Decode(&m); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s does not parse as YAML: %v\n%s", n, err, files[n])
			}
			if len(m) == 0 {
				continue
			}
			r.Objs = append(r.Objs, &unstructured.Unstructured{Object: m})
		}
	}
	return r, nil
}

// MustRender renders into the volcano-system namespace and fails the test on an error.
func MustRender(t testing.TB, valuesPath string) *Rendered {
	t.Helper()
	r, err := Render(t, valuesPath, "volcano-system")
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return r
}

// Kinds counts the objects per kind.
func (r *Rendered) Kinds() map[string]int {
	k := map[string]int{}
	for _, o := range r.Objs {
		k[o.GetKind()]++
	}
	return k
}

// Get converts the one object of kind and name into out.
func (r *Rendered) Get(t testing.TB, kind, name string, out runtime.Object) {
	t.Helper()
	for _, o := range r.Objs {
		if o.GetKind() == kind && o.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, out, true); err != nil {
				t.Fatalf("%s %s does not convert to its typed object (unknown or misplaced field?): %v", kind, name, err)
			}
			return
		}
	}
	t.Fatalf("no %s named %s; rendered: %v", kind, name, r.Names())
}

// Has reports whether an object of kind and name was rendered.
func (r *Rendered) Has(kind, name string) bool {
	for _, o := range r.Objs {
		if o.GetKind() == kind && o.GetName() == name {
			return true
		}
	}
	return false
}

// WithoutHooks drops the objects Helm creates only as hooks (the `helm test` pod and its
// ServiceAccount and binding): what `helm install` leaves in the cluster.
func (r *Rendered) WithoutHooks() *Rendered {
	out := &Rendered{}
	for _, o := range r.Objs {
		if _, hook := o.GetAnnotations()["helm.sh/hook"]; !hook {
			out.Objs = append(out.Objs, o)
		}
	}
	return out
}

// Names lists kind/name of every object.
func (r *Rendered) Names() []string {
	var s []string
	for _, o := range r.Objs {
		s = append(s, o.GetKind()+"/"+o.GetName())
	}
	return s
}
