package api

import (
	"fmt"
	"strconv"
	"strings"
)

// ScoreTerm is one of the terms that rank nodes and cards for a pod.
type ScoreTerm uint8

const (
	// TermPolicy is the node or card policy's 0..100 score: binpack or spread (under
	// the topology node policy, the link quality of the pod's cards).
	TermPolicy ScoreTerm = iota
	// TermTopology is the 0..100 link quality of the pod's multi-card containers.
	TermTopology
	// TermNUMA is the 0..100 NUMA locality of the pod's multi-card containers.
	TermNUMA
	scoreTerms
)

var termNames = [scoreTerms]string{"policy", "topology", "numa"}

func (t ScoreTerm) String() string { return termNames[t] }

// The bounds of AnnotationScoreWeights. A weight is at most vgpu.TopologyWeight's
// bound, so that one pod's node scores stay within what an administrator can set for
// all; three terms need a few dozen bytes.
const (
	MaxScoreWeight       = 10
	MaxScoreWeightsBytes = 128
)

// ScoreWeights are a pod's weights of the terms that rank nodes and cards for it
// (AnnotationScoreWeights). A term the pod does not name is weighed as without the
// annotation; the zero value names none.
type ScoreWeights struct {
	// Named says which terms the pod named; Weight holds their weights, 0 elsewhere.
	Named  [scoreTerms]bool
	Weight [scoreTerms]float64
}

// Any reports whether the pod named any term.
func (w ScoreWeights) Any() bool { return w.Named != [scoreTerms]bool{} }

// Of is the term's weight: the pod's, or dflt when it did not name the term.
func (w ScoreWeights) Of(t ScoreTerm, dflt float64) float64 {
	if w.Named[t] {
		return w.Weight[t]
	}
	return dflt
}

// String writes the weights as the annotation reads them, terms in a fixed order.
func (w ScoreWeights) String() string {
	var b strings.Builder
	for t, named := range w.Named {
		if !named {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(termNames[t])
		b.WriteByte('=')
		b.WriteString(strconv.FormatFloat(w.Weight[t], 'f', -1, 64))
	}
	return b.String()
}

// ParseScoreWeights reads AnnotationScoreWeights: comma-separated term=weight
// entries, terms policy, topology and numa each at most once, each weight a decimal
// number in 0..MaxScoreWeight (no sign, no exponent). Blank entries are skipped.
// Refused: an unknown term, a term given twice, a weight that is negative, not a
// number or too large, a value over MaxScoreWeightsBytes, one that names no term, and
// one whose weights are all 0 (policy=0 and topology=0, numa 0 or left out: nothing
// would rank nodes or cards for the pod). The error names the annotation and quotes
// the value as written.
func ParseScoreWeights(v string) (ScoreWeights, error) {
	var w ScoreWeights
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: annotation %s: %q: %s", ErrInvalid, AnnotationScoreWeights, clip(v), fmt.Sprintf(format, args...))
	}
	if len(v) > MaxScoreWeightsBytes {
		return ScoreWeights{}, bad("%d bytes, want at most %d", len(v), MaxScoreWeightsBytes)
	}
	for rest, more := v, true; more; {
		var entry string
		entry, rest, more = strings.Cut(rest, ",")
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		name, num, ok := strings.Cut(entry, "=")
		if !ok {
			return ScoreWeights{}, bad("entry %q is not term=weight", entry)
		}
		name, num = strings.TrimSpace(name), strings.TrimSpace(num)
		t, known := termOf(name)
		if !known {
			return ScoreWeights{}, bad("unknown term %q; want policy, topology or numa", name)
		}
		if w.Named[t] {
			return ScoreWeights{}, bad("term %s given twice", name)
		}
		f, err := parseWeight(num)
		if err != nil {
			return ScoreWeights{}, bad("%s: %v", name, err)
		}
		w.Named[t], w.Weight[t] = true, f
	}
	switch {
	case !w.Any():
		return ScoreWeights{}, bad("names no term; want term=weight entries, terms policy, topology and numa")
	case w.Named[TermPolicy] && w.Weight[TermPolicy] == 0 && w.Named[TermTopology] && w.Weight[TermTopology] == 0 &&
		w.Weight[TermNUMA] == 0:
		return ScoreWeights{}, bad("every weight is 0, so nothing would rank nodes or cards for the pod; leave the annotation out for the defaults")
	}
	return w, nil
}

func termOf(name string) (ScoreTerm, bool) {
	for t, n := range termNames {
		if n == name {
			return ScoreTerm(t), true
		}
	}
	return 0, false
}

// parseWeight reads one weight: decimal digits with an optional fraction, in
// 0..MaxScoreWeight.
func parseWeight(s string) (float64, error) {
	if strings.HasPrefix(s, "-") && isDecimal(s[1:]) {
		return 0, fmt.Errorf("%s is negative; want a number in 0..%d", s, MaxScoreWeight)
	}
	if !isDecimal(s) {
		return 0, fmt.Errorf("%q is not a number; want a number in 0..%d such as 1 or 0.5", s, MaxScoreWeight)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	if f > MaxScoreWeight {
		return 0, fmt.Errorf("%s is above %d", s, MaxScoreWeight)
	}
	return f, nil
}

// isDecimal reports whether s is digits with an optional point and more digits: what
// strconv.ParseFloat reads without signs, exponents, hexadecimal, NaN or Inf.
func isDecimal(s string) bool {
	whole, frac, point := strings.Cut(s, ".")
	return whole != "" && digits(whole) && (!point || frac != "" && digits(frac))
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
