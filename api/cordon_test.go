package api

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/internal/testing/klogtest"
)

var cordonedAt = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func sampleCordons() *NodeCordons {
	return &NodeCordons{Version: CordonsVersion, Cards: map[string]CardCordon{
		"GPU-aaaa": {Reason: "ECC errors, RMA #4411", Since: cordonedAt},
		"GPU-bbbb": {Since: cordonedAt.Add(90 * time.Second)},
	}}
}

func TestCordonsRoundTrip(t *testing.T) {
	in := sampleCordons()
	s, err := EncodeCordons(in)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"version":"v1","cards":{"GPU-aaaa":{"reason":"ECC errors, RMA #4411","since":"2026-03-01T12:00:00Z"},"GPU-bbbb":{"since":"2026-03-01T12:01:30Z"}}}`
	if s != want {
		t.Errorf("encoded %s\nwant    %s", s, want)
	}
	out, err := DecodeCordons(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip changed the cordons:\n in %+v\nout %+v", in, out)
	}
	empty, err := EncodeCordons(&NodeCordons{})
	if err != nil || empty != `{"version":"v1","cards":{}}` {
		t.Errorf("no cards encode to %s (%v), want an empty object", empty, err)
	}
}

// A time written with an offset or fractions of a second reads as the same instant in
// UTC, and is written back so.
func TestCordonTimesAreReadAsInstantsInUTC(t *testing.T) {
	c, err := DecodeCordons(`{"version":"v1","cards":{"GPU-a":{"since":"2026-03-01T13:00:00.25+01:00"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Cards["GPU-a"].Since, cordonedAt.Add(250*time.Millisecond); !got.Equal(want) || got.Location() != time.UTC {
		t.Errorf("since %v, want %v in UTC", got, want)
	}
	if s, _ := EncodeCordons(c); !strings.Contains(s, `"since":"2026-03-01T12:00:00.25Z"`) {
		t.Errorf("re-encoded %s, want the instant in UTC", s)
	}
}

func TestCordonsDecodeErrors(t *testing.T) {
	many := make([]string, maxCordonedCards+1)
	for i := range many {
		many[i] = fmt.Sprintf(`"GPU-%d":{"since":"2026-03-01T12:00:00Z"}`, i)
	}
	long := strings.Repeat("x", MaxCordonReasonBytes+1)
	for _, tc := range []struct {
		name, doc, want string
		unsupported     bool
	}{
		{"a newer version is reported as unsupported", `{"version":"v2","cards":{},"extra":1}`, `version "v2"`, true},
		{"a missing version is rejected", `{"cards":{}}`, "missing version", false},
		{"a value that is no JSON is rejected", `GPU-a`, "invalid character", false},
		{"an unknown field is rejected, not dropped", `{"version":"v1","cards":{},"all":true}`, `unknown field "all"`, false},
		{"an unknown card field is rejected", `{"version":"v1","cards":{"GPU-a":{"since":"2026-03-01T12:00:00Z","until":"x"}}}`, `unknown field "until"`, false},
		{"trailing data is rejected", `{"version":"v1","cards":{}} {}`, "after top-level value", false},
		{"a list of cards is rejected", `{"version":"v1","cards":["GPU-a"]}`, "cards", false},
		{"a missing time names the card", `{"version":"v1","cards":{"GPU-a":{"reason":"x"}}}`, `cards["GPU-a"].since: missing`, false},
		{"a time that is no RFC 3339 is quoted as written", `{"version":"v1","cards":{"GPU-a":{"since":"yesterday"}}}`, `cards["GPU-a"].since: "yesterday" is not an RFC 3339 time`, false},
		{"a number for the time is quoted as written", `{"version":"v1","cards":{"GPU-a":{"since":1772366400}}}`, `cards["GPU-a"].since: 1772366400 is not an RFC 3339 time`, false},
		{"a null time is quoted as written", `{"version":"v1","cards":{"GPU-a":{"since":null}}}`, `cards["GPU-a"].since: null is not an RFC 3339 time`, false},
		{"the zero time is no time", `{"version":"v1","cards":{"GPU-a":{"since":"0001-01-01T00:00:00Z"}}}`, `cards["GPU-a"].since: missing (the zero time)`, false},
		{"a reason that is no string is quoted as written", `{"version":"v1","cards":{"GPU-a":{"reason":42,"since":"2026-03-01T12:00:00Z"}}}`, `cards["GPU-a"].reason: 42 is not a string`, false},
		{"a null reason is quoted as written", `{"version":"v1","cards":{"GPU-a":{"reason":null,"since":"2026-03-01T12:00:00Z"}}}`, `cards["GPU-a"].reason: null is not a string`, false},
		{"a reason past the bound is refused with its length", `{"version":"v1","cards":{"GPU-a":{"reason":"` + long + `","since":"2026-03-01T12:00:00Z"}}}`, `cards["GPU-a"].reason: "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..." is 257 bytes (at most 256)`, false},
		{"a reason with a newline is refused", `{"version":"v1","cards":{"GPU-a":{"reason":"a\nb","since":"2026-03-01T12:00:00Z"}}}`, `cards["GPU-a"].reason: "a\nb" contains a control character`, false},
		{"a reason that is no UTF-8 is refused", `{"version":"v1","cards":{"GPU-a":{"reason":"\udc00","since":"2026-03-01T12:00:00Z"}}}`, "", false},
		{"a UUID outside the inventory's grammar is named", `{"version":"v1","cards":{"GPU a":{"since":"2026-03-01T12:00:00Z"}}}`, `cards: uuid "GPU a" contains ' '`, false},
		{"too many entries are refused", `{"version":"v1","cards":{` + strings.Join(many, ",") + `}}`, "257 entries (at most 256)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := DecodeCordons(tc.doc)
			if tc.want == "" {
				// encoding/json replaces a lone surrogate with U+FFFD: valid, and kept.
				if err != nil || c.Cards["GPU-a"].Reason != "\uFFFD" {
					t.Fatalf("decoded %+v (%v), want the replacement character", c, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), AnnotationCordonedCards) {
				t.Errorf("error %q does not name %s", err, AnnotationCordonedCards)
			}
			if got := errors.Is(err, ErrUnsupportedVersion); got != tc.unsupported {
				t.Errorf("errors.Is(ErrUnsupportedVersion) = %v, want %v", got, tc.unsupported)
			}
			if !tc.unsupported && !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}

// The encoder refuses what the decoder would, so the CLI never writes a value the
// scheduler cannot read.
func TestEncodeCordonsRefusesWhatDecodeWould(t *testing.T) {
	for name, c := range map[string]*NodeCordons{
		"a newline in a reason": {Cards: map[string]CardCordon{"GPU-a": {Reason: "a\nb", Since: cordonedAt}}},
		"no time":               {Cards: map[string]CardCordon{"GPU-a": {Reason: "x"}}},
		"a bad UUID":            {Cards: map[string]CardCordon{"GPU,a": {Since: cordonedAt}}},
		"a year past 9999":      {Cards: map[string]CardCordon{"GPU-a": {Since: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}},
	} {
		if s, err := EncodeCordons(c); err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: encoded %s (%v), want ErrInvalid", name, s, err)
		}
	}
}

func cordonNode(name, cordons string) *corev1.Node {
	n := reserveNode(name, "")
	if cordons != "" {
		n.Annotations[AnnotationCordonedCards] = cordons
	}
	return n
}

// The readers put each card's cordon on the inventory, beside its reserve, and leave
// the memo's inventory as it was. A UUID that names no card (a card replaced) is
// ignored.
func TestTheReadersTakeEachCardsCordonFromItsAnnotation(t *testing.T) {
	s, _ := EncodeCordons(&NodeCordons{Cards: map[string]CardCordon{
		"GPU-bbbb": {Reason: "fan", Since: cordonedAt}, "GPU-gone": {Since: cordonedAt}}})
	n := cordonNode("gpu-1", s)
	n.Annotations[AnnotationContextReserve] = `{"version":"v1","cards":{"GPU-aaaa":518}}`
	var d Decoders
	for session := 0; session < 2; session++ {
		inv, err := d.NodeInventory(n, time.Now(), time.Minute)
		if err != nil {
			t.Fatalf("session %d: %v", session, err)
		}
		if inv.Cards[0].Cordon != nil || inv.Cards[1].Cordon == nil || inv.Cards[1].Cordon.Reason != "fan" {
			t.Fatalf("session %d: cordons %+v and %+v, want card 1's only", session, inv.Cards[0].Cordon, inv.Cards[1].Cordon)
		}
		if inv.Cards[0].ContextReserveMiB != 518 {
			t.Errorf("session %d: the cordon lost card 0's reserve", session)
		}
		d.Sweep()
	}
	plain, _ := d.NodeInventory(cordonNode("gpu-2", ""), time.Now(), time.Minute)
	if plain.Cards[1].Cordon != nil {
		t.Error("a node without the annotation has a cordoned card; the memo's inventory was changed")
	}
	hami := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-h", Annotations: map[string]string{
		VolcanoNodeRegister: "GPU-h0,4,15360,Tesla T4,true:", AnnotationCordonedCards: `{"version":"v1","cards":{"GPU-h0":{"since":"2026-03-01T12:00:00Z"}}}`}}}
	if inv, err := ReadNodeInventory(hami, time.Now(), time.Minute); err != nil || inv.Cards[0].Cordon == nil {
		t.Errorf("a HAMi node's card is not cordoned: %+v (%v)", inv, err)
	}
}

// An unreadable cordon makes the whole node refuse new vGPU tasks, with the decoder's
// error as the reason (the node is shown unusable with it): which card was meant cannot
// be told, and a cordon keeps work off cards that may be failing. The scheduler logs it
// once per node and value.
func TestAnUnreadableCordonRefusesTheNodeWithTheReason(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"a malformed value", `{"version":"v1","cards":{"GPU-aaaa":{"reason":"a\tb","since":"2026-03-01T12:00:00Z"}}}`, `cards["GPU-aaaa"].reason: "a\tb" contains a control character`},
		{"a newer version", `{"version":"v2","cards":{}}`, `version "v2" (this build reads "v1")`},
		{"plain text", `GPU-aaaa`, "tessera.io/cordoned-cards"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := klogtest.Capture(t, 0)
			var d Decoders
			for session := 0; session < 3; session++ {
				inv, err := d.NodeInventory(cordonNode("gpu-1", tc.value), time.Now(), time.Minute)
				if inv != nil || err == nil {
					t.Fatalf("session %d: read %+v, want the node refused", session, inv)
				}
				for _, want := range []string{AnnotationCordonedCards, tc.want, "no card of the node takes a new vGPU task until it is fixed or removed"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("reason %q does not say %q", err, want)
					}
				}
				d.Sweep()
			}
			if _, err := ReadNodeInventory(cordonNode("gpu-1", tc.value), time.Now(), time.Minute); err == nil {
				t.Error("the CLI's reader reads the node as usable")
			}
			klog.Flush()
			if got := strings.Count(logs.String(), "cordon annotation is unreadable"); got != 1 || !strings.Contains(logs.String(), `node="gpu-1"`) {
				t.Errorf("logged %d times, want once by the scheduler, naming the node:\n%s", got, logs)
			}
		})
	}
}
