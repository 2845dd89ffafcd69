package usage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
)

// stableTries bounds how often a part of the region is read again when it changed while
// being read.
const stableTries = 4

var (
	// ErrNotRegularFile is wrapped when the region's path is not a regular file: a FIFO, a
	// socket, a device, a directory or a symbolic link. Nothing is read from it.
	ErrNotRegularFile = errors.New("not a regular file")
	// ErrSize is wrapped when the region file is not exactly the size of a region of this
	// layout (a process of the container truncated or grew it, or it shrank while being
	// read). A file larger than a region is refused without reading past its header.
	ErrSize = errors.New("region file of the wrong size")
)

// RegionFileSize is the size of a region file of this node's layout (sizeof(struct
// region)): the agent creates each container's region at exactly this size, and ReadFile
// refuses a file of any other size.
func RegionFileSize() (int64, error) {
	l, err := nativeLayout()
	if err != nil {
		return 0, err
	}
	return int64(l.Size), nil
}

// bufs holds read buffers (a region's header, cards and process slots: about 160 KiB), so
// that a scrape does not allocate one per container. Decode copies what it keeps.
var bufs sync.Pool

// ReadFile takes a snapshot of the region at path and decodes it. The file belongs to a
// container whose processes may be hostile, so it is read on these rules:
//
//   - opened O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC: a symbolic link is refused, and
//     opening a FIFO returns at once instead of waiting for a writer;
//   - fstat must show a regular file (ErrNotRegularFile names the kind otherwise) of
//     exactly RegionFileSize bytes (ErrSize; a larger file is refused after reading its
//     header only, a smaller one after reading at most what it holds);
//   - it is read with pread into a private buffer, never mapped: a file truncated while
//     being read gives a short read and ErrSize, never a fault;
//   - the header and cards, then each occupied process slot, are read again until two
//     consecutive copies agree (at most stableTries copies; the last one stands), so a
//     slot is never taken half-written. The region's lock is never taken: a hooked
//     process is never held up by a scrape.
//
// The cost is one read of the header and process slots plus one more per occupied slot.
func ReadFile(path string) (*Region, error) {
	l, err := nativeLayout()
	if err != nil {
		return nil, err
	}
	fd, err := openRegion(path)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, fmt.Errorf("region %s: %w: it is a %s", path, ErrNotRegularFile, kindOf(uint32(st.Mode)))
	}
	if st.Size != int64(l.Size) {
		return nil, wrongSize(fd, path, st.Size, l)
	}
	n := l.readLen()
	bp, _ := bufs.Get().(*[]byte)
	if bp == nil || len(*bp) != n+l.Procs {
		b := make([]byte, n+l.Procs)
		bp = &b
	}
	defer bufs.Put(bp)
	buf, scratch := (*bp)[:n], (*bp)[n:]
	if err := snapshot(fd, buf, scratch, l); err != nil {
		return nil, fmt.Errorf("region %s: %w", path, err)
	}
	r, err := Decode(buf, l)
	if err != nil {
		return nil, fmt.Errorf("region %s: %w", path, err)
	}
	return r, nil
}

// openRegion opens path for reading without following a symbolic link and without
// blocking on a FIFO; a refusal names the kind of file it met.
func openRegion(path string) (int, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err == syscall.EINTR {
			continue
		}
		if err == nil {
			return fd, nil
		}
		// ELOOP: the last component is a symbolic link (O_NOFOLLOW); ENXIO: a socket (or a
		// device without its driver). Say which, from lstat, rather than the errno alone.
		var st syscall.Stat_t
		if (err == syscall.ELOOP || err == syscall.ENXIO) && syscall.Lstat(path, &st) == nil && st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			return -1, fmt.Errorf("region %s: %w: it is a %s", path, ErrNotRegularFile, kindOf(uint32(st.Mode)))
		}
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
}

func fstat(fd int, st *syscall.Stat_t) error {
	for {
		if err := syscall.Fstat(fd, st); err != syscall.EINTR {
			return err
		}
	}
}

func kindOf(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFIFO:
		return "FIFO"
	case syscall.S_IFSOCK:
		return "socket"
	case syscall.S_IFCHR:
		return "character device"
	case syscall.S_IFBLK:
		return "block device"
	case syscall.S_IFDIR:
		return "directory"
	case syscall.S_IFLNK:
		return "symbolic link"
	case syscall.S_IFREG:
		return "regular file"
	}
	return fmt.Sprintf("file of type %#o", mode&syscall.S_IFMT)
}

// wrongSize explains a region file of the wrong size. A vgpu-core of another release
// lays out a region of another size: the header (or, for a smaller file, what the file
// holds, at most a region's worth) tells that apart from a file a process resized.
func wrongSize(fd int, path string, size int64, l Layout) error {
	n := int64(offLock) // a larger file: its header only
	if size < int64(l.Size) {
		n = min(size, int64(l.readLen())) // a smaller one: what it holds
	}
	b := make([]byte, n)
	got, err := preadFull(fd, b, 0)
	if err != nil && !errors.Is(err, ErrSize) {
		return fmt.Errorf("region %s: %w", path, err)
	}
	if _, derr := Decode(b[:got], l); errors.Is(derr, ErrLayout) {
		return fmt.Errorf("region %s: %w", path, derr)
	}
	return fmt.Errorf("region %s: %w: %d bytes, a version %d region is %d", path, ErrSize, size, LayoutVersion, l.Size)
}

// snapshot fills buf (the header, the cards and the process slots) from the file and
// reads the parts that matter again until two copies agree; scratch holds the second
// copies.
func snapshot(fd int, buf, scratch []byte, l Layout) error {
	if _, err := preadFull(fd, buf, 0); err != nil {
		return err
	}
	if err := stableRead(fd, buf[:l.Procs], scratch[:l.Procs], 0); err != nil {
		return err
	}
	for i := 0; i < MaxProcs; i++ {
		off := l.Procs + i*procSize
		slot := buf[off : off+procSize]
		if slot[procPID] == 0 && slot[procPID+1] == 0 && slot[procPID+2] == 0 && slot[procPID+3] == 0 {
			continue
		}
		if err := stableRead(fd, slot, scratch[:procSize], int64(off)); err != nil {
			return err
		}
	}
	return nil
}

// stableRead reads the part of the file at off that dst already holds one copy of, until
// two consecutive copies agree (at most stableTries copies in all; the last one stands).
func stableRead(fd int, dst, again []byte, off int64) error {
	for try := 1; try < stableTries; try++ {
		if _, err := preadFull(fd, again, off); err != nil {
			return err
		}
		if bytes.Equal(again, dst) {
			return nil
		}
		copy(dst, again)
	}
	return nil
}

// preadFull reads len(b) bytes at off; a file that ends before that gives ErrSize (it
// shrank after fstat, or is smaller than asked for) with the bytes read.
func preadFull(fd int, b []byte, off int64) (int, error) {
	got := 0
	for got < len(b) {
		n, err := syscall.Pread(fd, b[got:], off+int64(got))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return got, err
		}
		if n == 0 {
			return got, fmt.Errorf("%w: it ends at %d bytes (%w)", ErrSize, off+int64(got), io.ErrUnexpectedEOF)
		}
		got += n
	}
	return got, nil
}
