package records

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/tessera-gpu/tessera/deviceplugin/usage"
)

// tmpfsMagic is TMPFS_MAGIC, statfs's f_type of a tmpfs.
const tmpfsMagic = 0x01021994

// capSysAdmin is CAP_SYS_ADMIN's bit in the capability sets.
const capSysAdmin = 21

// canMount says whether the agent may mount: CAP_SYS_ADMIN in its effective set.
func canMount() (bool, string) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false, fmt.Sprintf("cannot read the agent's capabilities: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return false, fmt.Sprintf("cannot read the agent's capabilities: %q", line)
		}
		if caps&(1<<capSysAdmin) == 0 {
			return false, "the agent lacks CAP_SYS_ADMIN"
		}
		return true, ""
	}
	return false, "cannot read the agent's capabilities: no CapEff in /proc/self/status"
}

// mountsReachRuntime says whether a mount the agent makes under root is seen by the
// container runtime, which resolves the kubelet's mounts in the host's mount namespace:
// the agent runs in that namespace, or the mount holding root propagates to it (a
// hostPath mounted with mountPropagation: Bidirectional shows as shared:<n>). Without
// either, the runtime would mount the files of the directory under the tmpfs, which the
// agent no longer writes.
func mountsReachRuntime(root string) (bool, string) {
	if usage.SeesHostPIDs("/proc") {
		self, err1 := os.Readlink("/proc/self/ns/mnt")
		host, err2 := os.Readlink("/proc/1/ns/mnt")
		if err1 == nil && err2 == nil && self == host {
			return true, ""
		}
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return false, fmt.Sprintf("cannot resolve the state directory: %v", err)
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Sprintf("cannot read the agent's mounts: %v", err)
	}
	mountPoint, shared := sharedMount(info, real)
	if shared {
		return true, ""
	}
	return false, fmt.Sprintf("the agent's mount %s holding the state directory does not propagate to the host "+
		"(mount stateDir with mountPropagation: Bidirectional, which needs a privileged agent)", mountPoint)
}

// sharedMount finds the mount that holds path in a mountinfo table (proc(5)) and says
// whether it is shared (its optional fields hold shared:<peer group>).
func sharedMount(mountinfo []byte, path string) (mountPoint string, shared bool) {
	best := -1
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 7 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if mp != "/" && path != mp && !strings.HasPrefix(path, mp+"/") {
			continue
		}
		if len(mp) < best {
			continue
		}
		// The last of equally long matches is mounted over the others.
		best, mountPoint, shared = len(mp), mp, false
		for _, opt := range f[6:] {
			if opt == "-" {
				break
			}
			if strings.HasPrefix(opt, "shared:") {
				shared = true
			}
		}
	}
	return mountPoint, shared
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isTmpfsMount says whether dir is the root of a tmpfs mounted on it (not merely a
// directory of a tmpfs the state directory lies on).
func isTmpfsMount(dir string) (bool, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return false, err
	}
	if fs.Type != tmpfsMagic {
		return false, nil
	}
	var self, parent syscall.Stat_t
	if err := syscall.Lstat(dir, &self); err != nil {
		return false, err
	}
	if err := syscall.Stat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return self.Dev != parent.Dev, nil
}

// mountTmpfs mounts a tmpfs of size bytes on dir unless one is there already.
func mountTmpfs(dir string, size int64) error {
	if ok, err := isTmpfsMount(dir); err != nil || ok {
		return err
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=16,mode=%o", size, containerDirMode)
	if err := syscall.Mount("tessera", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount a tmpfs (%s): %w", opts, err)
	}
	return nil
}

// unmountTmpfs detaches the tmpfs mounted on dir, if any (stacked ones too).
func unmountTmpfs(dir string) error {
	for i := 0; i < 8; i++ {
		ok, err := isTmpfsMount(dir)
		if errors.Is(err, os.ErrNotExist) || err == nil && !ok {
			return nil
		}
		if err != nil {
			return err
		}
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount the tmpfs of %s: %w", dir, err)
		}
	}
	return fmt.Errorf("unmount the tmpfs of %s: still mounted", dir)
}

// reserve makes f size bytes long. On a disk filesystem the blocks are allocated now, so
// that a full disk later cannot fault the container's processes writing their region. On
// a tmpfs the file stays sparse: its pages are then allocated, and charged to the
// container's memory, as the container's processes first write them.
func reserve(f *os.File, size int64) error {
	var fs syscall.Statfs_t
	if err := syscall.Fstatfs(int(f.Fd()), &fs); err == nil && fs.Type != tmpfsMagic {
		if err := syscall.Fallocate(int(f.Fd()), 0, 0, size); err != nil && !errors.Is(err, syscall.EOPNOTSUPP) {
			return err
		}
	}
	return f.Truncate(size)
}

func ownedByMe(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && sys.Uid == uint32(os.Geteuid())
}
