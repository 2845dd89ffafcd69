package usage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// stableTries bounds how often a process slot is copied again when it changed while
// being copied.
const stableTries = 4

// ReadFile takes a snapshot of the region at path and decodes it. It maps the file
// read-only and never takes the region's lock, so a hooked process is never held up by a
// scrape: every 8-byte word is loaded atomically (the writers' fields are aligned 64-bit
// words), and each occupied process slot is copied until two copies agree, so a slot is
// never read half-written. Only occupied slots are copied: the cost is the header plus
// the live processes.
func ReadFile(path string) (*Region, error) {
	l, err := nativeLayout()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	n := l.readLen()
	if st.Size() < int64(n) {
		// Too short to map safely (a mapping past the end of a file faults): read what is
		// there, so the error says whether it is another version or half created.
		b, err := io.ReadAll(io.LimitReader(f, int64(n)))
		if err != nil {
			return nil, err
		}
		if _, err := Decode(b, l); err != nil {
			return nil, fmt.Errorf("region %s: %w", path, err)
		}
		return nil, fmt.Errorf("region %s: %w: %d bytes", path, ErrNotRegion, len(b))
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map region %s: %w", path, err)
	}
	defer func() { _ = syscall.Munmap(m) }()
	r, err := Decode(snapshot(m, l), l)
	if err != nil {
		return nil, fmt.Errorf("region %s: %w", path, err)
	}
	return r, nil
}

// snapshot copies the header, the cards and the occupied process slots of a mapped
// region; free slots stay zero.
func snapshot(m []byte, l Layout) []byte {
	out := make([]byte, l.readLen())
	copyWords(out[:l.Procs], m[:l.Procs])
	for i := 0; i < MaxProcs; i++ {
		off := l.Procs + i*procSize
		if loadWord(m, off+procPID) == 0 {
			continue
		}
		stableCopy(out[off:off+procSize], m[off:off+procSize])
	}
	return out
}

// stableCopy copies src until two consecutive copies agree (at most stableTries times;
// the last copy stands, each of its words still whole).
func stableCopy(dst, src []byte) {
	again := make([]byte, len(dst))
	copyWords(dst, src)
	for try := 1; try < stableTries; try++ {
		copyWords(again, src)
		if bytes.Equal(again, dst) {
			return
		}
		copy(dst, again)
	}
}

// copyWords copies src into dst one atomic 8-byte load at a time; src is 8-byte aligned
// (it lies in a page-aligned mapping at a multiple of 8).
func copyWords(dst, src []byte) {
	for off := 0; off+8 <= len(src); off += 8 {
		binary.NativeEndian.PutUint64(dst[off:], loadWord(src, off))
	}
}

func loadWord(b []byte, off int) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[off])))
}
