package usage

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
)

// region builds the bytes of a region as vgpu-core lays it out, for tests.
type region struct {
	l Layout
	b []byte
}

func newRegion(t testing.TB) *region {
	t.Helper()
	l, err := nativeLayout()
	if err != nil {
		t.Skip(err)
	}
	r := &region{l: l, b: make([]byte, l.Size)}
	ne := binary.NativeEndian
	ne.PutUint64(r.b[offMagic:], regionMagic)
	ne.PutUint32(r.b[offVersion:], LayoutVersion)
	ne.PutUint32(r.b[offSize:], uint32(l.Size))
	return r
}

func (r *region) card(i int, used uint64, capped bool, util uint32, charged uint64) {
	c := r.b[r.l.Cards+i*cardSize:]
	ne := binary.NativeEndian
	ne.PutUint64(c[cardUsed:], used)
	if capped {
		ne.PutUint32(c[cardCapped:], 1)
	}
	ne.PutUint32(c[cardUtilPct:], util)
	ne.PutUint64(c[cardCharged:], charged)
}

func (r *region) proc(slot int, pid int32, start uint64, used ...uint64) {
	p := r.b[r.l.Procs+slot*procSize:]
	ne := binary.NativeEndian
	ne.PutUint32(p[procPID:], uint32(pid))
	ne.PutUint64(p[procStart:], start)
	for c, u := range used {
		ne.PutUint64(p[procUsed+8*c:], u)
	}
}

type alivePIDs map[int32]bool

func (a alivePIDs) Alive(p Proc) bool { return a[p.PID] }

func TestLayoutForKnownArchitectures(t *testing.T) {
	for _, tc := range []struct {
		arch               string
		cards, procs, size int
	}{
		{"amd64", 64, 1088, 296000},
		{"arm64", 72, 1096, 296008},
	} {
		l, ok := LayoutFor(tc.arch)
		if !ok || l.Cards != tc.cards || l.Procs != tc.procs || l.Size != tc.size {
			t.Errorf("LayoutFor(%s) = %+v, %v; want cards at %d, procs at %d, size %d", tc.arch, l, ok, tc.cards, tc.procs, tc.size)
		}
	}
	if _, ok := LayoutFor("riscv64"); ok {
		t.Error("LayoutFor(riscv64) claims a layout vgpu-core is not built for")
	}
}

func TestDecodeRefusesWhatIsNotThisLayout(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(b []byte) []byte
		want error
	}{
		{"an empty file is not a region", func([]byte) []byte { return nil }, ErrNotRegion},
		{"a region whose creator has not written the magic yet is not one", func(b []byte) []byte {
			binary.NativeEndian.PutUint64(b[offMagic:], 0)
			return b
		}, ErrNotRegion},
		{"a region of layout version 2 is refused", func(b []byte) []byte {
			binary.NativeEndian.PutUint32(b[offVersion:], 2)
			return b
		}, ErrLayout},
		{"a region of version 4 is refused", func(b []byte) []byte {
			binary.NativeEndian.PutUint32(b[offVersion:], 4)
			return b
		}, ErrLayout},
		{"a region of this version but another size (another architecture) is refused", func(b []byte) []byte {
			binary.NativeEndian.PutUint32(b[offSize:], 12345)
			return b
		}, ErrLayout},
		{"a region cut off inside the process slots is not one", func(b []byte) []byte { return b[:2000] }, ErrNotRegion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRegion(t)
			_, err := Decode(tc.edit(r.b), r.l)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestDecodeReadsCardsAndOccupiedSlots(t *testing.T) {
	r := newRegion(t)
	r.card(0, 300, false, 0, 0)
	r.card(1, 700, true, 42, 5e9)
	r.proc(3, 17, 1000, 100, 200)
	r.proc(900, 18, 2000, 200, 500)
	d, err := Decode(r.b, r.l)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Procs) != 2 || d.Procs[0].Slot != 3 || d.Procs[1].Slot != 900 || d.Procs[1].Used[1] != 500 {
		t.Fatalf("procs = %+v", d.Procs)
	}
	if d.Cards[1] != (Card{UsedBytes: 700, Capped: true, UtilPercent: 42, ChargedNanos: 5e9}) {
		t.Fatalf("card 1 = %+v", d.Cards[1])
	}
}

func TestSummariseCountsOnlyLiveProcesses(t *testing.T) {
	r := newRegion(t)
	r.card(0, 300, false, 0, 0)
	r.card(1, 700, true, 42, 5e9)
	r.proc(3, 17, 1000, 100, 200)
	r.proc(4, 18, 2000, 200, 500)
	d, err := Decode(r.b, r.l)
	if err != nil {
		t.Fatal(err)
	}
	u := Summarise(d, alivePIDs{17: true})
	if u.LiveProcs != 1 || u.DeadProcs != 1 || u.Cards[0].UsedBytes != 100 || u.Cards[1].UsedBytes != 200 {
		t.Fatalf("one of two alive: %+v", u)
	}
	if !u.Cards[1].Measured || u.Cards[1].SMRatio != 0.42 || !u.Cards[1].Capped || u.Cards[0].Measured {
		t.Fatalf("SM use: card 0 %+v, card 1 %+v", u.Cards[0], u.Cards[1])
	}
	u = Summarise(d, alivePIDs{})
	if u.LiveProcs != 0 || u.Cards[1].UsedBytes != 0 || u.Cards[1].Measured || u.Cards[1].Capped {
		t.Fatalf("none alive: the region's stale totals must not show: %+v", u.Cards[1])
	}
}

func TestSummariseSaturatesInsteadOfWrapping(t *testing.T) {
	r := newRegion(t)
	r.proc(0, 1, 1, ^uint64(0)-5)
	r.proc(1, 2, 1, 10)
	d, err := Decode(r.b, r.l)
	if err != nil {
		t.Fatal(err)
	}
	if u := Summarise(d, AssumeAlive{}); u.Cards[0].UsedBytes != ^uint64(0) {
		t.Fatalf("used = %d, want saturation", u.Cards[0].UsedBytes)
	}
}

func TestReadFileOfShortAndForeignFiles(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("regions exist on Linux nodes only")
	}
	dir := t.TempDir()
	r := newRegion(t)
	binary.NativeEndian.PutUint32(r.b[offVersion:], 2)
	for name, b := range map[string][]byte{"empty": nil, "half": r.b[:5000], "v2": r.b} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]error{"empty": ErrSize, "half": ErrLayout, "v2": ErrLayout, "missing": os.ErrNotExist} {
		if _, err := ReadFile(filepath.Join(dir, name)); !errors.Is(err, want) {
			t.Errorf("ReadFile(%s): %v, want %v", name, err, want)
		}
	}
}

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		line  string
		state byte
		start uint64
		ok    bool
	}{
		{"42 (sleep) S 1 42 42 0 -1 4194560 101 0 0 0 0 0 0 0 20 0 1 0 777 8482816 200", 'S', 777, true},
		{"42 (a) b) (c) Z 1 42 42 0 -1 4194560 101 0 0 0 0 0 0 0 20 0 1 0 99 8482816 200", 'Z', 99, true},
		{"42 (short) S 1 2 3", 0, 0, false},
		{"no parenthesis at all", 0, 0, false},
		{"42 (x) S 1 42 42 0 -1 4194560 101 0 0 0 0 0 0 0 20 0 1 0 notanumber 1", 0, 0, false},
	} {
		state, start, ok := ParseStat([]byte(tc.line))
		if state != tc.state || start != tc.start || ok != tc.ok {
			t.Errorf("ParseStat(%q) = %c %d %v, want %c %d %v", tc.line, state, start, ok, tc.state, tc.start, tc.ok)
		}
	}
}

// FuzzDecode decodes arbitrary bytes as they are and, so that the fuzzer reaches the
// slots without growing a 160 KiB input, laid over the start of a region-sized buffer.
func FuzzDecode(f *testing.F) {
	r := newRegion(f)
	r.proc(0, 7, 9, 1, 2, 3)
	f.Add(r.b[:r.l.Procs+2*procSize])
	f.Add(r.b[:100])
	f.Add([]byte{})
	padded := make([]byte, r.l.readLen())
	f.Fuzz(func(t *testing.T, b []byte) {
		n := copy(padded, b)
		clear(padded[n:])
		for _, in := range [][]byte{b, padded} {
			d, err := Decode(in, r.l)
			if err != nil {
				continue
			}
			if len(d.Procs) > MaxProcs || d.Version != LayoutVersion {
				t.Fatalf("decoded %d procs of version %d", len(d.Procs), d.Version)
			}
			for _, p := range d.Procs {
				if p.PID == 0 {
					t.Fatalf("free slot %d decoded as a process", p.Slot)
				}
			}
			_ = Summarise(d, AssumeAlive{})
		}
	})
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("42 (sleep) S 1 42 42 0 -1 4194560 101 0 0 0 0 0 0 0 20 0 1 0 777 8482816 200"))
	f.Add([]byte(")"))
	f.Fuzz(func(t *testing.T, b []byte) {
		state, _, ok := ParseStat(b)
		if ok && state == 0 {
			t.Fatal("ok without a state")
		}
	})
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	in := &Region{Version: LayoutVersion, ReclaimedBytes: 9}
	in.Cards[2] = Card{UsedBytes: 5, Capped: true, UtilPercent: 30, ChargedNanos: 77}
	in.Procs = []Proc{{Slot: 1, PID: 4, StartTime: 8, MarkerFD: 512, MarkerIno: 99, Used: [MaxCards]uint64{2: 5}}}
	b, err := Encode(in)
	if err != nil {
		t.Skip(err)
	}
	l, _ := nativeLayout()
	out, err := Decode(b, l)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %+v, want %+v", out, in)
	}
}
