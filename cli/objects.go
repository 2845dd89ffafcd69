package cli

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// APIVersion is the apiVersion of every object -o json|yaml|jsonpath|go-template prints.
// Scripts may depend on its kinds and fields: a field is only ever added under it; a
// field renamed or removed, or a meaning changed, comes with a new version
// (docs/cli.md lists the kinds and their fields).
const APIVersion = "cli.tessera.io/v1"

// The kinds of APIVersion.
const (
	KindNodeCards     = "NodeCards"     // one node and its cards (tessera nodes)
	KindNodeCardsList = "NodeCardsList" // the nodes of tessera nodes
	KindPodCards      = "PodCards"      // tessera pod
	KindExplanation   = "Explanation"   // tessera explain
	KindReport        = "Report"        // tessera report
)

// NodeCards is one node of `tessera nodes -o json`: NodeView's fields beside
// apiVersion and kind.
type NodeCards struct {
	metav1.TypeMeta `json:",inline"`
	NodeView        `json:",inline"`
}

// NodeCardsList is `tessera nodes -o json`: every node asked for, in name order.
type NodeCardsList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []NodeCards `json:"items"`
}

// PodCards is `tessera pod NAME -o json`.
type PodCards struct {
	metav1.TypeMeta `json:",inline"`
	PodView         `json:",inline"`
}

// Explanation is `tessera explain POD -o json`.
type Explanation struct {
	metav1.TypeMeta `json:",inline"`
	ExplainView     `json:",inline"`
}

// CardReport is `tessera report -o json`.
type CardReport struct {
	metav1.TypeMeta `json:",inline"`
	Report          `json:",inline"`
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: APIVersion, Kind: kind}
}

// NodeCardsListOf wraps the nodes view as the versioned list.
func NodeCardsListOf(nodes []NodeView) *NodeCardsList {
	l := &NodeCardsList{TypeMeta: typeMeta(KindNodeCardsList), Items: make([]NodeCards, len(nodes))}
	for i, n := range nodes {
		l.Items[i] = NodeCards{TypeMeta: typeMeta(KindNodeCards), NodeView: n}
	}
	return l
}

// versioned is the object a command's view prints as, for the printers of
// k8s.io/cli-runtime: the view under its apiVersion and kind, in the unstructured form
// those printers and kubectl's JSONPath and Go templates read.
func versioned(view any) (runtime.Object, error) {
	var obj any
	switch v := view.(type) {
	case []NodeView:
		obj = NodeCardsListOf(v)
	case *PodView:
		obj = &PodCards{TypeMeta: typeMeta(KindPodCards), PodView: *v}
	case *ExplainView:
		obj = &Explanation{TypeMeta: typeMeta(KindExplanation), ExplainView: *v}
	case *Report:
		obj = &CardReport{TypeMeta: typeMeta(KindReport), Report: *v}
	default:
		return nil, fmt.Errorf("no versioned form for %T", view)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %T: %w", view, err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// items are the objects of a view that -o custom-columns prints a row each for: the
// nodes of a list, else the object itself (as kubectl prints a List's items).
func items(obj runtime.Object) []map[string]any {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	list, isList := u.Object["items"].([]any)
	if !isList {
		return []map[string]any{u.Object}
	}
	out := make([]map[string]any, 0, len(list))
	for _, it := range list {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
