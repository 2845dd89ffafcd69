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

func sampleContextReserve() *NodeContextReserve {
	return &NodeContextReserve{Version: ContextReserveVersion, Cards: map[string]int64{"GPU-aaaa": 518, "GPU-bbbb": 520}}
}

func TestContextReserveRoundTrip(t *testing.T) {
	in := sampleContextReserve()
	s, err := EncodeContextReserve(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"version":"v1","cards":{"GPU-aaaa":518,"GPU-bbbb":520}}`; s != want {
		t.Errorf("encoded %s, want %s", s, want)
	}
	out, err := DecodeContextReserve(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip changed the reserves:\n in %+v\nout %+v", in, out)
	}
	empty, err := EncodeContextReserve(&NodeContextReserve{})
	if err != nil || empty != `{"version":"v1","cards":{}}` {
		t.Errorf("no cards encode to %s (%v), want an empty object", empty, err)
	}
}

func TestContextReserveDecodeErrors(t *testing.T) {
	many := make([]string, maxContextReserveCards+1)
	for i := range many {
		many[i] = fmt.Sprintf(`"GPU-%d":1`, i)
	}
	for _, tc := range []struct {
		name, doc, want string
		unsupported     bool
	}{
		{"a newer version is reported as unsupported", `{"version":"v2","cards":{},"extra":1}`, `version "v2"`, true},
		{"a missing version is rejected", `{"cards":{}}`, "missing version", false},
		{"an unknown field is rejected, not dropped", `{"version":"v1","cards":{},"default":518}`, `unknown field "default"`, false},
		{"trailing data is rejected", `{"version":"v1","cards":{}} {}`, "after top-level value", false},
		{"a list of cards is rejected", `{"version":"v1","cards":[518]}`, "cards", false},
		{"a reserve above 4096 MiB names the card and the value", `{"version":"v1","cards":{"GPU-a":5000}}`, `cards["GPU-a"]: 5000 MiB is outside 0..4096`, false},
		{"a negative reserve names the card and the value", `{"version":"v1","cards":{"GPU-a":-1}}`, `cards["GPU-a"]: -1 MiB is outside 0..4096`, false},
		{"a fraction is quoted as written", `{"version":"v1","cards":{"GPU-a":518.5}}`, `cards["GPU-a"]: 518.5 is not a whole number of MiB`, false},
		{"an exponent is quoted as written", `{"version":"v1","cards":{"GPU-a":5e2}}`, `cards["GPU-a"]: 5e2 is not a whole number of MiB`, false},
		{"a string is quoted as written", `{"version":"v1","cards":{"GPU-a":"518Mi"}}`, `cards["GPU-a"]: "518Mi" is not a whole number of MiB`, false},
		{"a null reserve is quoted as written", `{"version":"v1","cards":{"GPU-a":null}}`, `cards["GPU-a"]: null is not a whole number`, false},
		{"a number past int64 is quoted as written", `{"version":"v1","cards":{"GPU-a":99999999999999999999}}`, "99999999999999999999 is not a whole number", false},
		{"a UUID outside the inventory's grammar is named", `{"version":"v1","cards":{"GPU a":518}}`, `cards: uuid "GPU a" contains ' '`, false},
		{"an empty UUID is named", `{"version":"v1","cards":{"":518}}`, "cards: uuid empty", false},
		{"too many entries are refused", `{"version":"v1","cards":{` + strings.Join(many, ",") + `}}`, "257 entries (at most 256)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeContextReserve(tc.doc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), AnnotationContextReserve) {
				t.Errorf("error %q does not name %s", err, AnnotationContextReserve)
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

func TestContextReserveBoundsAreAccepted(t *testing.T) {
	r, err := DecodeContextReserve(`{"version":"v1","cards":{"GPU-a":0,"MIG-b":4096}}`)
	if err != nil || r.Cards["GPU-a"] != 0 || r.Cards["MIG-b"] != 4096 {
		t.Fatalf("decoded %+v (%v), want 0 and 4096 MiB", r, err)
	}
	if r, err := DecodeContextReserve(`{"version":"v1"}`); err != nil || r.Cards == nil || len(r.Cards) != 0 {
		t.Fatalf("decoded %+v (%v), want no cards", r, err)
	}
}

// The agent publishes the cards that have a reserve, and nothing when none has one;
// the readers put each card's reserve back on the inventory, leaving the one they were
// given (the memo's) as it was.
func TestContextReserveTravelsBesideTheInventory(t *testing.T) {
	inv := sampleInventory()
	if r := inv.ContextReserve(); r != nil {
		t.Fatalf("an inventory without reserves publishes %+v, want nothing", r)
	}
	inv.Cards[1].ContextReserveMiB = 520
	r := inv.ContextReserve()
	if r == nil || !reflect.DeepEqual(r.Cards, map[string]int64{"GPU-bbbb": 520}) {
		t.Fatalf("published %+v, want only GPU-bbbb's 520 MiB", r)
	}

	shared := sampleInventory()
	got := shared.WithContextReserve(&NodeContextReserve{Version: ContextReserveVersion,
		Cards: map[string]int64{"GPU-aaaa": 518, "GPU-gone": 600}})
	if got.Cards[0].ContextReserveMiB != 518 || got.Cards[1].ContextReserveMiB != 0 {
		t.Errorf("reserves %d and %d MiB, want 518 and 0 (unknown); a UUID of no card is ignored",
			got.Cards[0].ContextReserveMiB, got.Cards[1].ContextReserveMiB)
	}
	if shared.Cards[0].ContextReserveMiB != 0 {
		t.Error("WithContextReserve changed the inventory it was given")
	}
	if shared.WithContextReserve(nil) != shared {
		t.Error("no reserve copies the inventory, want it as is")
	}
}

func reserveNode(name, reserve string) *corev1.Node {
	inv, _ := EncodeInventory(sampleInventory())
	ann := map[string]string{AnnotationInventory: inv, AnnotationHeartbeat: time.Now().UTC().Format(time.RFC3339)}
	if reserve != "" {
		ann[AnnotationContextReserve] = reserve
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}}
}

// The scheduler and the CLI read each card's reserve off the node beside its
// inventory. The reserve only keeps containers off cards, so a missing or malformed
// one never makes the node unusable: its cards read as reserve unknown, and a
// malformed one is logged, once per node however many sessions read it.
func TestTheReadersTakeTheReserveFromItsOwnAnnotation(t *testing.T) {
	reserves := func(inv *NodeInventory) []int64 {
		var out []int64
		for _, c := range inv.Cards {
			out = append(out, c.ContextReserveMiB)
		}
		return out
	}
	for _, tc := range []struct {
		name, reserve string
		want          []int64
		logged        bool
	}{
		{"each card gets its reserve", `{"version":"v1","cards":{"GPU-aaaa":518,"GPU-bbbb":520}}`, []int64{518, 520}, false},
		{"a card left out has none", `{"version":"v1","cards":{"GPU-bbbb":520}}`, []int64{0, 520}, false},
		{"a UUID of no card is ignored", `{"version":"v1","cards":{"GPU-aaaa":518,"GPU-old":600}}`, []int64{518, 0}, false},
		{"no annotation (an older agent) is no reserve, silently", "", []int64{0, 0}, false},
		{"a malformed annotation is no reserve, logged", `{"version":"v1","cards":{"GPU-aaaa":9999}}`, []int64{0, 0}, true},
		{"a newer version is no reserve, logged", `{"version":"v2","cards":{}}`, []int64{0, 0}, true},
		{"a value that is no JSON is no reserve, logged", `518`, []int64{0, 0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := klogtest.Capture(t, 0)
			node := reserveNode("gpu-1", tc.reserve)
			var d Decoders
			for session := 0; session < 3; session++ {
				inv, err := d.NodeInventory(node, time.Now(), time.Minute)
				if err != nil {
					t.Fatalf("session %d: the node is unusable: %v", session, err)
				}
				if got := reserves(inv); !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("session %d: reserves %v, want %v", session, got, tc.want)
				}
				d.Sweep()
			}
			inv, err := ReadNodeInventory(node, time.Now(), time.Minute)
			if err != nil || !reflect.DeepEqual(reserves(inv), tc.want) {
				t.Fatalf("ReadNodeInventory: %+v (%v), want reserves %v", inv, err, tc.want)
			}
			klog.Flush()
			got := strings.Count(logs.String(), "context reserve annotation is malformed")
			switch {
			case !tc.logged && got != 0:
				t.Errorf("logged %d times, want nothing:\n%s", got, logs)
			case tc.logged && got != 2: // once by the memo over three sessions, once by the CLI's read
				t.Errorf("logged %d times, want once by the scheduler and once by the CLI:\n%s", got, logs)
			case tc.logged && (!strings.Contains(logs.String(), `node="gpu-1"`) || !strings.Contains(logs.String(), AnnotationContextReserve+": ")):
				t.Errorf("the log names neither the node nor the error:\n%s", logs)
			}
		})
	}
}

// Each node with a malformed reserve is logged on its own, and again when its value
// changes, but a node read every session is not logged every session.
func TestAMalformedReserveIsLoggedOncePerNode(t *testing.T) {
	logs := klogtest.Capture(t, 0)
	const bad = `{"version":"v1","cards":{"GPU-aaaa":-5}}`
	var d Decoders
	for session := 0; session < 4; session++ {
		for _, n := range []*corev1.Node{reserveNode("gpu-1", bad), reserveNode("gpu-2", bad)} {
			if _, err := d.NodeInventory(n, time.Now(), 0); err != nil {
				t.Fatal(err)
			}
		}
		d.Sweep()
	}
	if _, err := d.NodeInventory(reserveNode("gpu-1", `{"version":"v1","cards":{"GPU-aaaa":-6}}`), time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	klog.Flush()
	out := logs.String()
	for node, want := range map[string]int{"gpu-1": 2, "gpu-2": 1} {
		if got := strings.Count(out, `node="`+node+`"`); got != want {
			t.Errorf("node %s logged %d times, want %d:\n%s", node, got, want, out)
		}
	}
}
