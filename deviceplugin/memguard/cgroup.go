package memguard

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// maxCgroupFile bounds what is read of /proc/<pid>/cgroup: a real one is a few hundred
// bytes, one line per hierarchy.
const maxCgroupFile = 16 << 10

// PodUIDFromCgroup finds the pod a process belongs to in the content of its
// /proc/<pid>/cgroup, as the kubelet names pod cgroups under either cgroup driver:
//
//	systemd:  0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope
//	cgroupfs: 0::/kubepods/besteffort/pod<uid>/<id>
//
// and the same below a prefix (a nested kubelet, kind). The cgroup is the kernel's: a
// process cannot leave its container's cgroup without privileges a tenant does not have,
// so unlike anything the container writes, it names the pod truthfully. ok is false for a
// process outside every pod (a host process, a system daemon).
func PodUIDFromCgroup(content []byte) (uid types.UID, ok bool) {
	for _, line := range bytes.Split(content, []byte{'\n'}) {
		// hierarchy-ID:controllers:path; the path may itself hold ':'.
		parts := bytes.SplitN(line, []byte{':'}, 3)
		if len(parts) != 3 {
			continue
		}
		if uid, ok := podUIDFromPath(string(parts[2])); ok {
			return uid, true
		}
	}
	return "", false
}

// podUIDFromPath finds the first pod segment at or below the first kubepods segment.
func podUIDFromPath(path string) (types.UID, bool) {
	inKubepods := false
	for _, seg := range strings.Split(path, "/") {
		inKubepods = inKubepods || strings.Contains(seg, "kubepods")
		if !inKubepods {
			continue
		}
		if uid, ok := podSegment(seg); ok {
			return uid, true
		}
	}
	return "", false
}

// podSegment reads "pod<uid>" (cgroupfs) or "kubepods-<qos>-pod<uid_>.slice" /
// "kubepods-pod<uid_>.slice" (systemd, dashes of the UID written as underscores).
func podSegment(seg string) (types.UID, bool) {
	var rest string
	switch {
	case strings.HasPrefix(seg, "pod"):
		rest = strings.TrimPrefix(seg, "pod")
	case strings.HasSuffix(seg, ".slice"):
		i := strings.LastIndex(seg, "-pod")
		if i < 0 {
			return "", false
		}
		rest = strings.TrimSuffix(seg[i+len("-pod"):], ".slice")
		rest = strings.ReplaceAll(rest, "_", "-")
	default:
		return "", false
	}
	if !isUID(rest) {
		return "", false
	}
	return types.UID(rest), true
}

// isUID accepts the 8-4-4-4-12 hexadecimal form the API server gives pods.
func isUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// errNotInPod is wrapped when a process is outside every pod.
var errNotInPod = errors.New("not in a pod's cgroup")

// podOfPID reads the pod of a process from procRoot/<pid>/cgroup. A process that has
// exited gives an error wrapping os.ErrNotExist.
func podOfPID(procRoot string, pid int) (types.UID, error) {
	f, err := os.Open(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return "", fmt.Errorf("process %d: %w", pid, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCgroupFile))
	if err != nil {
		return "", fmt.Errorf("process %d: read cgroup: %w", pid, err)
	}
	uid, ok := PodUIDFromCgroup(b)
	if !ok {
		return "", fmt.Errorf("process %d: %w", pid, errNotInPod)
	}
	return uid, nil
}
