package main

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestKwokStagesAreStagesWithOneFinishPerScript(t *testing.T) {
	docs := strings.Split(KwokStages(), "\n---\n")
	if len(docs) != 3+len(finishes) {
		t.Fatalf("%d stages, want 3 life-cycle stages and %d finishes", len(docs), len(finishes))
	}
	names := map[string]bool{}
	for _, d := range docs {
		var s struct {
			Kind     string
			Metadata struct{ Name string }
			Spec     struct {
				Selector struct {
					MatchExpressions []struct {
						Key, Operator string
						Values        []string
					}
				}
				Next struct {
					StatusTemplate string
				}
			}
		}
		if err := yaml.Unmarshal([]byte(d), &s); err != nil {
			t.Fatalf("stage does not parse: %v\n%s", err, d)
		}
		if s.Kind != "Stage" || s.Metadata.Name == "" || names[s.Metadata.Name] {
			t.Errorf("kind %q, name %q (seen: %v)", s.Kind, s.Metadata.Name, names[s.Metadata.Name])
		}
		names[s.Metadata.Name] = true
		for _, f := range finishes {
			if s.Metadata.Name != f.name {
				continue
			}
			last := s.Spec.Selector.MatchExpressions[len(s.Spec.Selector.MatchExpressions)-1]
			if last.Key != f.key || len(last.Values) != 1 || last.Values[0] != f.script {
				t.Errorf("%s selects %+v, want %s = %q", f.name, last, f.key, f.script)
			}
			if !strings.Contains(s.Spec.Next.StatusTemplate, "phase: "+f.phase) {
				t.Errorf("%s does not end the pod %s:\n%s", f.name, f.phase, s.Spec.Next.StatusTemplate)
			}
		}
	}
}
