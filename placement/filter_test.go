package placement

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

// containsFoldLowering is the matcher as it was before the filter lists were bounded:
// it lowered the model and each substring afresh for every card (for non-ASCII text),
// and it is what containsFold must agree with.
func containsFoldLowering(subs []string, model string) bool {
	for _, s := range subs {
		if strings.Contains(strings.ToLower(model), strings.ToLower(s)) {
			return true
		}
	}
	return false
}

// containsFold copies nothing and agrees with lowering both sides, whether or not the
// substrings were lowered first (ParsePodOptions lowers them; hand-built options may
// not), on text where lowering changes a rune's length in bytes or is not UTF-8.
func TestContainsFoldAgreesWithToLower(t *testing.T) {
	alphabet := []string{"a", "A", "k", "K", "\u212a", "i", "I", "\u0130", "\u0131", "s", "\u017f", "S",
		"\u023a", "\u2c65", "\u03a3", "\u03c3", "\u03c2", "\xff", "\xe2\x84", "\ufffd", " ", "-", "1", "0"}
	rng := rand.New(rand.NewSource(1))
	word := func(max int) string {
		var b strings.Builder
		for n := rng.Intn(max + 1); n > 0; n-- {
			b.WriteString(alphabet[rng.Intn(len(alphabet))])
		}
		return b.String()
	}
	for i := 0; i < 200000; i++ {
		model, sub := word(8), word(3)
		want := containsFoldLowering([]string{sub}, model)
		if got := containsFold([]string{sub}, model); got != want {
			t.Fatalf("containsFold(%q, %q) = %v, strings.ToLower says %v", sub, model, got, want)
		}
		if got := containsFold([]string{strings.ToLower(sub)}, model); got != want {
			t.Fatalf("containsFold(%q lowered, %q) = %v, strings.ToLower says %v", sub, model, got, want)
		}
	}
}

func TestContainsFoldAllocatesNothing(t *testing.T) {
	subs := []string{"h100", "\u212a80", "a100-sxm4-80gb", "\u0130"}
	for _, model := range []string{"NVIDIA A100-SXM4-40GB", "Tesla \u212a80", "\xffNVIDIA\u0130"} {
		if n := testing.AllocsPerRun(100, func() { containsFold(subs, model) }); n != 0 {
			t.Errorf("containsFold on %q: %v allocations, want none", model, n)
		}
	}
}

// filterCard is the card every BenchmarkCardFilter case checks: a real model name and
// UUID, healthy and idle, so that a filter that lets it through leaves only the
// usage checks after it.
func filterCard() *CardState {
	c := &CardState{Card: api.Card{UUID: "GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f", Model: "NVIDIA A100-SXM4-80GB",
		MemoryMiB: 81920, Shares: 10, Healthy: true}, CapacityMiB: 81920}
	return c
}

// nearMisses is n entries like target but for their last byte, so that every
// comparison runs to the end before it fails.
func nearMisses(n int, target string, last byte) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = target[:len(target)-1] + string(last)
	}
	return out
}

// worstAllowed is about the costliest set of filter annotations ParsePodOptions accepts for
// filterCard: all four lists at MaxFilterEntries, each include matching only at its
// last entry and every other entry missing by its last byte. (A type entry that is
// not ASCII after lowering fails at its first such rune against an ASCII model.)
func worstAllowed(c *CardState) map[string]string {
	n := api.MaxFilterEntries
	model := c.Model
	for (len(model)+1)*n > api.MaxFilterBytes {
		model = model[1:]
	}
	typeIn := append(nearMisses(n-1, model, 'x'), model)
	uuidIn := append(nearMisses(n-1, c.UUID, 'x'), c.UUID)
	return map[string]string{
		api.AnnotationGPUTypeInclude: strings.Join(typeIn, ","),
		api.AnnotationGPUTypeExclude: strings.Join(nearMisses(n, model, 'x'), ","),
		api.AnnotationGPUUUIDInclude: strings.Join(uuidIn, ","),
		api.AnnotationGPUUUIDExclude: strings.Join(nearMisses(n, c.UUID, 'x'), ","),
	}
}

// unbounded is what the API server's 256 KiB annotation limit held before the bound:
// as many entries of entry as fit, 87,381 of a two-byte one.
func unbounded(entry string) []string {
	return strings.Split(strings.TrimSuffix(strings.Repeat(entry+",", (256<<10)/(len(entry)+1)), ","), ",")
}

// containsFoldBefore is containsFold as it was before the bound, for the benchmark:
// ASCII entries were compared in place, any other lowered both sides for each card.
func containsFoldBefore(subs []string, model string) bool {
	asciiModel := isASCIIBefore(model)
	for _, s := range subs {
		if !asciiModel || !isASCIIBefore(s) {
			if strings.Contains(strings.ToLower(model), strings.ToLower(s)) {
				return true
			}
			continue
		}
		for i := 0; i+len(s) <= len(model); i++ {
			if strings.EqualFold(model[i:i+len(s)], s) {
				return true
			}
		}
	}
	return false
}

func isASCIIBefore(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// BenchmarkCardFilter is checkCard's cost on one card (the filters, then the usage
// checks) with no filter, a typical one and the worst ParsePodOptions now accepts;
// the matcher's cost on the unbounded lists it used to accept, before and now (built
// by hand: no annotation can produce them any more); and the cost of refusing such a
// list at parse time, which a task pays once a session instead of once a card.
func BenchmarkCardFilter(b *testing.B) {
	matchers := []struct {
		name string
		fn   func([]string, string) bool
	}{{"before", containsFoldBefore}, {"now", containsFold}}
	c := filterCard()
	cr := &api.ContainerRequest{Name: "c", Cards: 1, MemoryMiB: 1024, Cores: 10}
	parse := func(b *testing.B, ann map[string]string) *api.PodOptions {
		o, err := api.ParsePodOptions(ann)
		if err != nil {
			b.Fatal(err)
		}
		return &o
	}
	check := func(b *testing.B, o *api.PodOptions) {
		var r CardReject
		if checkCard(c, c.Used, cr, o, false, &r) {
			b.Fatalf("checkCard refused the card: %+v", r)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			checkCard(c, c.Used, cr, o, false, &r)
		}
	}
	b.Run("no filter", func(b *testing.B) { check(b, parse(b, nil)) })
	b.Run("typical", func(b *testing.B) {
		check(b, parse(b, map[string]string{api.AnnotationGPUTypeInclude: "A100,H100"}))
	})
	worst := parse(b, worstAllowed(c))
	b.Run("worst allowed", func(b *testing.B) { check(b, worst) })
	for _, m := range matchers {
		b.Run("worst allowed type lists/"+m.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if !m.fn(worst.TypeInclude, c.Model) || m.fn(worst.TypeExclude, c.Model) {
					b.Fatal("wrong answer")
				}
			}
		})
	}

	for _, entry := range []string{"zz", "é"} {
		list := unbounded(entry)
		for _, m := range matchers {
			b.Run(fmt.Sprintf("unbounded %d×%q type exclude/%s", len(list), entry, m.name), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					if m.fn(list, c.Model) {
						b.Fatal("matched")
					}
				}
			})
		}
	}
	uuids := unbounded("zz")
	b.Run(fmt.Sprintf("unbounded %d uuid exclude", len(uuids)), func(b *testing.B) {
		check(b, &api.PodOptions{UUIDExclude: uuids})
	})
	b.Run("unbounded refused at parse", func(b *testing.B) {
		ann := map[string]string{api.AnnotationGPUTypeExclude: strings.Join(unbounded("zz"), ",")}
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := api.ParsePodOptions(ann); err == nil {
				b.Fatal("the unbounded list was accepted")
			}
		}
	})
}
