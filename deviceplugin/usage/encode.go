package usage

import "encoding/binary"

// Encode lays r out as vgpu-core version 3 does on this architecture (free slots zero,
// the SM limiter's timestamps zero). For tests and simulated nodes, which have no hooked
// processes to write regions; Decode(Encode(r)) gives r back.
func Encode(r *Region) ([]byte, error) {
	l, err := nativeLayout()
	if err != nil {
		return nil, err
	}
	ne := binary.NativeEndian
	b := make([]byte, l.Size)
	ne.PutUint64(b[offMagic:], regionMagic)
	ne.PutUint32(b[offVersion:], LayoutVersion)
	ne.PutUint32(b[offSize:], uint32(l.Size))
	ne.PutUint64(b[l.Reclaimed:], r.ReclaimedBytes)
	for i, card := range r.Cards {
		c := b[l.Cards+i*cardSize:]
		ne.PutUint64(c[cardUsed:], card.UsedBytes)
		if card.Capped {
			ne.PutUint32(c[cardCapped:], 1)
		}
		ne.PutUint32(c[cardUtilPct:], card.UtilPercent)
		ne.PutUint64(c[cardCharged:], card.ChargedNanos)
	}
	for _, p := range r.Procs {
		if p.Slot < 0 || p.Slot >= MaxProcs {
			continue
		}
		s := b[l.Procs+p.Slot*procSize:]
		ne.PutUint32(s[procPID:], uint32(p.PID))
		ne.PutUint64(s[procStart:], p.StartTime)
		for c, u := range p.Used {
			ne.PutUint64(s[procUsed+8*c:], u)
		}
		ne.PutUint32(s[procMarkerFD:], uint32(p.MarkerFD))
		ne.PutUint64(s[procMarkerIno:], p.MarkerIno)
	}
	return b, nil
}
