package api

import (
	"errors"
	"strings"
	"testing"
)

func TestScoreWeightsGrammar(t *testing.T) {
	named := func(p, tp, n float64, which ...ScoreTerm) ScoreWeights {
		w := ScoreWeights{}
		vals := [scoreTerms]float64{p, tp, n}
		for _, t := range which {
			w.Named[t], w.Weight[t] = true, vals[t]
		}
		return w
	}
	for _, tc := range []struct {
		name, value string
		want        ScoreWeights
		wantErr     string
	}{
		{"three terms", "policy=3,topology=1,numa=1", named(3, 1, 1, TermPolicy, TermTopology, TermNUMA), ""},
		{"one term leaves the others unnamed", "numa=2.5", named(0, 0, 2.5, TermNUMA), ""},
		{"blanks around entries and signs are skipped", " topology = 0.5 ,, ", named(0, 0.5, 0, TermTopology), ""},
		{"zero for one term is a choice", "numa=0", named(0, 0, 0, TermNUMA), ""},
		{"policy and topology at 0 leave numa to rank", "policy=0,topology=0,numa=1", named(0, 0, 1, TermPolicy, TermTopology, TermNUMA), ""},
		{"an unknown term is named", "pack=3,topology=1", ScoreWeights{}, `annotation tessera.io/score-weights: "pack=3,topology=1": unknown term "pack"; want policy, topology or numa`},
		{"a negative weight is named", "numa=-1", ScoreWeights{}, `"numa=-1": numa: -1 is negative`},
		{"a word is not a number", "topology=high", ScoreWeights{}, `"topology=high": topology: "high" is not a number`},
		{"an exponent is not a decimal", "policy=1e1", ScoreWeights{}, `policy: "1e1" is not a number`},
		{"NaN is not a number", "policy=NaN", ScoreWeights{}, `policy: "NaN" is not a number`},
		{"a weight above the bound", "policy=11", ScoreWeights{}, `policy: 11 is above 10`},
		{"a term twice", "numa=1,numa=2", ScoreWeights{}, `term numa given twice`},
		{"an entry without a weight", "numa", ScoreWeights{}, `entry "numa" is not term=weight`},
		{"all zero", "policy=0,topology=0", ScoreWeights{}, `"policy=0,topology=0": every weight is 0`},
		{"nothing named", " , ", ScoreWeights{}, `" , ": names no term`},
		{"too long, quoted clipped", strings.Repeat("numa=1,", 19), ScoreWeights{}, `"numa=1,numa=1,numa=1,numa=1,numa=1,numa=1,numa=1,numa=1,numa=1,n…": 133 bytes, want at most 128`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseScoreWeights(tc.value)
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
			if again, err := ParseScoreWeights(got.String()); err != nil || again != got {
				t.Fatalf("written back as %q, read %+v, %v", got.String(), again, err)
			}
		})
	}
}

func TestScoreWeightsOfFallsBackToTheDefault(t *testing.T) {
	w, err := ParseScoreWeights("numa=2")
	if err != nil {
		t.Fatal(err)
	}
	if w.Of(TermNUMA, 0) != 2 || w.Of(TermTopology, 0.5) != 0.5 || w.Of(TermPolicy, 1) != 1 {
		t.Fatalf("Of: %v %v %v", w.Of(TermNUMA, 0), w.Of(TermTopology, 0.5), w.Of(TermPolicy, 1))
	}
	if (ScoreWeights{}).Any() || !w.Any() {
		t.Fatal("Any disagrees with what was named")
	}
}

// idle-only is a card policy: the node policy and the card filters' readers refuse it
// where it means nothing, and the book reads it off a placed pod.
func TestIdleOnlyIsACardPolicyOnly(t *testing.T) {
	o, err := ParsePodOptions(map[string]string{AnnotationCardPolicy: "idle-only"})
	if err != nil || o.CardPolicy != PolicyIdleOnly {
		t.Fatalf("card policy idle-only read as %+v, %v", o, err)
	}
	if !HoldsIdleOnly(map[string]string{AnnotationCardPolicy: "idle-only"}) || HoldsIdleOnly(map[string]string{AnnotationCardPolicy: "spread"}) {
		t.Fatal("HoldsIdleOnly disagrees with the annotation")
	}
	_, err = ParsePodOptions(map[string]string{AnnotationNodePolicy: "idle-only"})
	if err == nil || !strings.Contains(err.Error(), `annotation tessera.io/node-policy: invalid: policy "idle-only": want binpack, spread or topology`) {
		t.Fatalf("node policy idle-only: %v", err)
	}
	_, err = ParsePodOptions(map[string]string{AnnotationCardPolicy: "mutex"})
	if err == nil || !strings.Contains(err.Error(), `policy "mutex": want binpack, spread, topology or idle-only`) {
		t.Fatalf("card policy mutex: %v", err)
	}
}
