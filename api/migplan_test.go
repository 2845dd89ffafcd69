package api

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func samplePlan() *MIGPlan {
	return &MIGPlan{ID: "gpu-e-1-20260102150405", Card: "GPU-aaaa", Profiles: []string{"3g.40gb", "2g.20gb", "1g.10gb"},
		Created: "2026-01-02T15:04:05Z"}
}

func sampleStatus() *MIGPlanStatus {
	return &MIGPlanStatus{ID: "gpu-e-1-20260102150405", Card: "GPU-aaaa", Outcome: MIGPlanRefusedBusy,
		Message: "card GPU-aaaa is in use: pid 7", Time: "2026-01-02T15:04:09Z"}
}

func TestMIGPlanRoundTrips(t *testing.T) {
	enc, err := EncodeMIGPlan(samplePlan())
	if err != nil {
		t.Fatal(err)
	}
	p, err := DecodeMIGPlan(enc)
	if err != nil || !reflect.DeepEqual(p, samplePlan2()) {
		t.Fatalf("decoded %+v, %v", p, err)
	}
	senc, err := EncodeMIGPlanStatus(sampleStatus())
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeMIGPlanStatus(senc)
	if err != nil || s.Outcome != MIGPlanRefusedBusy || !s.Final() || s.At().IsZero() {
		t.Fatalf("decoded %+v, %v", s, err)
	}
}

func samplePlan2() *MIGPlan { p := samplePlan(); p.Version = MIGPlanVersion; return p }

// Every refusal names the field and quotes the value as written.
func TestMIGPlanDecodeErrors(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"a newer version", `{"version":"v2"}`, `version "v2"`},
		{"no version", `{"id":"x"}`, "missing version"},
		{"an unknown field", `{"version":"v1","id":"a","card":"GPU-1","profiles":["1g.10gb"],"created":"2026-01-02T15:04:05Z","x":1}`, `unknown field "x"`},
		{"an empty id", `{"version":"v1","id":"","card":"GPU-1","profiles":["1g.10gb"],"created":"2026-01-02T15:04:05Z"}`, `id: "" is not`},
		{"an id with a slash", `{"version":"v1","id":"a/b","card":"GPU-1","profiles":["1g.10gb"],"created":"2026-01-02T15:04:05Z"}`, `id: "a/b" contains '/'`},
		{"a card with a space", `{"version":"v1","id":"a","card":"GPU 1","profiles":["1g.10gb"],"created":"2026-01-02T15:04:05Z"}`, `card: "GPU 1" contains ' '`},
		{"no profile", `{"version":"v1","id":"a","card":"GPU-1","profiles":[],"created":"2026-01-02T15:04:05Z"}`, "profiles: 0 entries"},
		{"a bad profile", `{"version":"v1","id":"a","card":"GPU-1","profiles":["1g.10gb","big"],"created":"2026-01-02T15:04:05Z"}`, `profiles[1]: "big" is not a MIG profile`},
		{"a local time", `{"version":"v1","id":"a","card":"GPU-1","profiles":["1g.10gb"],"created":"2026-01-02T15:04:05+01:00"}`, `created: "2026-01-02T15:04:05+01:00" is not a UTC time`},
		{"trailing data", `{"version":"v1","id":"a","card":"GPU-1","profiles":["1g.10gb"],"created":"2026-01-02T15:04:05Z"} {}`, "after top-level value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeMIGPlan(tc.doc)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), AnnotationMIGPlan) {
				t.Fatalf("got %v, want an error naming %s and containing %q", err, AnnotationMIGPlan, tc.want)
			}
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("%v wraps no sentinel", err)
			}
		})
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"an unknown outcome", `{"version":"v1","id":"a","card":"GPU-1","outcome":"done","time":"2026-01-02T15:04:05Z"}`, `outcome: "done" is not one of`},
		{"no time", `{"version":"v1","id":"a","card":"GPU-1","outcome":"applied"}`, `time: "" is not a UTC time`},
		{"a long message", `{"version":"v1","id":"a","card":"GPU-1","outcome":"applied","time":"2026-01-02T15:04:05Z","message":"` + strings.Repeat("m", 1025) + `"}`, "message: 1025 bytes"},
	} {
		t.Run("status: "+tc.name, func(t *testing.T) {
			_, err := DecodeMIGPlanStatus(tc.doc)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), AnnotationMIGPlanStatus) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want an error naming %s and containing %q", err, AnnotationMIGPlanStatus, tc.want)
			}
		})
	}
}

func FuzzDecodeMIGPlan(f *testing.F) {
	s, _ := EncodeMIGPlan(samplePlan())
	f.Add(s)
	f.Add(`{"version":"v1","id":"a","card":"GPU-1","profiles":["7g.80gb"],"created":"2026-01-02T15:04:05Z"}`)
	f.Add(`{"version":"v1","id":"a","card":"GPU-1","profiles":null,"created":"x"}`)
	f.Fuzz(func(t *testing.T, s string) {
		p, err := DecodeMIGPlan(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error does not wrap a sentinel: %v", err)
			}
			return
		}
		enc, err := EncodeMIGPlan(p)
		if err != nil {
			t.Fatalf("decoded plan does not re-encode: %v", err)
		}
		again, err := DecodeMIGPlan(enc)
		if err != nil || !reflect.DeepEqual(p, again) {
			t.Fatalf("round trip differs: %v", err)
		}
	})
}

func FuzzDecodeMIGPlanStatus(f *testing.F) {
	s, _ := EncodeMIGPlanStatus(sampleStatus())
	f.Add(s)
	f.Add(`{"version":"v1","id":"a","card":"GPU-1","outcome":"applied","time":"2026-01-02T15:04:05Z"}`)
	f.Add(`{"version":"v1","id":"a","card":"GPU-1","outcome":"failed-rollback-failed","message":"x","time":"2026-01-02T15:04:05Z"}`)
	f.Fuzz(func(t *testing.T, s string) {
		st, err := DecodeMIGPlanStatus(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error does not wrap a sentinel: %v", err)
			}
			return
		}
		enc, err := EncodeMIGPlanStatus(st)
		if err != nil {
			t.Fatalf("decoded status does not re-encode: %v", err)
		}
		again, err := DecodeMIGPlanStatus(enc)
		if err != nil || !reflect.DeepEqual(st, again) {
			t.Fatalf("round trip differs: %v", err)
		}
	})
}
