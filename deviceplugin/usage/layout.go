// Package usage reads what vgpu-core's shared region says a container actually uses:
// per card, the device memory its live processes hold and the share of the SMs it was
// charged lately. The region is a file written by the hooked processes
// (vgpu-core/src/shared/region.h); this package only reads it, never takes its lock, and
// refuses a region of another layout version instead of guessing.
package usage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
)

// The layout of vgpu-core's struct region, version 3 (vgpu-core/src/shared/region.h). The
// contract test checks every number here against the C compiler's own offsetof.
const (
	// LayoutVersion is the region layout this reader understands.
	LayoutVersion = 3
	// MaxCards is TESSERA_MAX_CARDS: card slots in a region, indexed by CUDA ordinal.
	MaxCards = 16
	// MaxProcs is REGION_MAX_PROCS: process slots in a region.
	MaxProcs = 1024

	regionMagic = 0x5445535345524131 // "TESSERA1"

	offMagic   = 0
	offVersion = 8
	offSize    = 12
	offLock    = 16 // pthread_mutex_t: its size is the architecture's (see mutexSize)

	cardSize    = 64
	cardUsed    = 0
	cardCapped  = 40
	cardUtilPct = 44
	cardCharged = 48

	procSize      = 160
	procPID       = 0
	procStart     = 8
	procUsed      = 16
	procMarkerFD  = 144
	procMarkerIno = 152

	smActiveSize = MaxProcs * MaxCards * 8
)

// Layout is where the region's parts lie for one architecture.
type Layout struct {
	Reclaimed, Cards, Procs int // offsets of reclaimed_bytes, cards[] and procs[]
	Size                    int // sizeof(struct region): the header's size field must say so
}

// LayoutFor returns the region layout for a Go architecture name; false when vgpu-core is
// not built for it. Only pthread_mutex_t's size differs between them.
func LayoutFor(goarch string) (Layout, bool) {
	var mutexSize int
	switch goarch {
	case "amd64":
		mutexSize = 40
	case "arm64":
		mutexSize = 48
	default:
		return Layout{}, false
	}
	reclaimed := offLock + mutexSize
	cards := reclaimed + 8
	procs := cards + MaxCards*cardSize
	return Layout{Reclaimed: reclaimed, Cards: cards, Procs: procs, Size: procs + MaxProcs*procSize + smActiveSize}, true
}

// nativeLayout is the layout of the machine the agent runs on: the region is written by
// processes on the same node.
func nativeLayout() (Layout, error) {
	l, ok := LayoutFor(runtime.GOARCH)
	if !ok {
		return Layout{}, fmt.Errorf("%w: no vgpu-core region layout for architecture %s", ErrLayout, runtime.GOARCH)
	}
	return l, nil
}

// readLen is how much of the region the reader needs: the header, the cards and the
// process slots (the SM limiter's per-slot timestamps after them are not read).
func (l Layout) readLen() int { return l.Procs + MaxProcs*procSize }

var (
	// ErrNotRegion is wrapped when a file is too short or lacks the region's magic: no
	// hooked process has initialised it (yet), or it is something else.
	ErrNotRegion = errors.New("not an initialised vgpu-core shared region")
	// ErrLayout is wrapped when the region was written by a vgpu-core of another layout.
	ErrLayout = errors.New("unsupported vgpu-core shared region layout")
)

// Card is one card slot of a region (CUDA ordinal order: the i-th card of the container).
type Card struct {
	// UsedBytes is the container-wide total the hooked processes keep; it can include
	// processes that died, which the next allocation in the container reclaims.
	UsedBytes uint64
	// Capped is true while the SM limiter meters launches on the card.
	Capped bool
	// UtilPercent is the share of the card the container was charged over the limiter's last
	// one-second period; only SM-limited cards are measured.
	UtilPercent uint32
	// ChargedNanos is the GPU time charged to the container's launches so far.
	ChargedNanos uint64
}

// Proc is one registered process slot.
type Proc struct {
	Slot int
	// PID is the process id as the container's pid namespace numbers it.
	PID int32
	// StartTime is field 22 of /proc/<pid>/stat (clock ticks after boot): it tells a
	// reused pid apart.
	StartTime uint64
	// MarkerFD and MarkerIno name the process image's exec marker: a close-on-exec pipe
	// (vgpu-core/src/shared/owner.h). MarkerIno 0: no marker.
	MarkerFD  int32
	MarkerIno uint64
	// Used is the memory the process holds on each card, bytes.
	Used [MaxCards]uint64
}

// Region is a decoded snapshot of a shared region.
type Region struct {
	Version        uint32
	ReclaimedBytes uint64
	Cards          [MaxCards]Card
	// Procs are the occupied slots, in slot order.
	Procs []Proc
}

// Decode reads a snapshot of a region laid out as l. It checks the magic, the layout
// version and the size the writer recorded before reading anything else, and never
// reads past b.
func Decode(b []byte, l Layout) (*Region, error) {
	ne := binary.NativeEndian
	if len(b) < offLock {
		return nil, fmt.Errorf("%w: %d bytes, the header alone is %d", ErrNotRegion, len(b), offLock)
	}
	if magic := ne.Uint64(b[offMagic:]); magic != regionMagic {
		return nil, fmt.Errorf("%w: magic %#x, want %#x", ErrNotRegion, magic, uint64(regionMagic))
	}
	version, size := ne.Uint32(b[offVersion:]), ne.Uint32(b[offSize:])
	if version != LayoutVersion || int(size) != l.Size {
		return nil, fmt.Errorf("%w: the region says layout version %d of %d bytes, this agent reads version %d of %d bytes "+
			"(the hook library and the node agent come from different Tessera releases)", ErrLayout, version, size, LayoutVersion, l.Size)
	}
	if len(b) < l.readLen() {
		return nil, fmt.Errorf("%w: %d bytes, a version %d region has %d", ErrNotRegion, len(b), LayoutVersion, l.Size)
	}
	r := &Region{Version: version, ReclaimedBytes: ne.Uint64(b[l.Reclaimed:])}
	for i := range r.Cards {
		c := b[l.Cards+i*cardSize:]
		r.Cards[i] = Card{
			UsedBytes:    ne.Uint64(c[cardUsed:]),
			Capped:       ne.Uint32(c[cardCapped:]) != 0,
			UtilPercent:  ne.Uint32(c[cardUtilPct:]),
			ChargedNanos: ne.Uint64(c[cardCharged:]),
		}
	}
	for i := 0; i < MaxProcs; i++ {
		p := b[l.Procs+i*procSize:]
		pid := int32(ne.Uint32(p[procPID:]))
		if pid == 0 {
			continue
		}
		proc := Proc{Slot: i, PID: pid, StartTime: ne.Uint64(p[procStart:]),
			MarkerFD: int32(ne.Uint32(p[procMarkerFD:])), MarkerIno: ne.Uint64(p[procMarkerIno:])}
		for c := range proc.Used {
			proc.Used[c] = ne.Uint64(p[procUsed+8*c:])
		}
		r.Procs = append(r.Procs, proc)
	}
	return r, nil
}
