package usage

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Liveness says whether a registered process still runs the image that registered.
type Liveness interface {
	Alive(p Proc) bool
}

// AssumeAlive counts every registered process as alive: for an agent that cannot see the
// containers' processes (not in the host's pid namespace). Memory of a process that died
// is then counted until another process of its container reclaims it.
type AssumeAlive struct{}

// Alive implements Liveness.
func (AssumeAlive) Alive(Proc) bool { return true }

// hostPIDNamespace is the kernel's inode number of the initial pid namespace
// (PROC_PID_INIT_INO), fixed since Linux 3.8.
const hostPIDNamespace = "pid:[4026531836]"

// SeesHostPIDs reports whether the procfs at root is the host's, in which the hooked
// processes of every container are visible (the agent runs with hostPID).
func SeesHostPIDs(root string) bool {
	link, err := os.Readlink(filepath.Join(root, "self", "ns", "pid"))
	return err == nil && link == hostPIDNamespace
}

// ProcTable is one scan of a procfs that sees every container's processes, indexed by
// start time: a region names its processes by their pid inside the container, which the
// host knows under another number, and by start time, which is the same in every pid
// namespace. Build one per scrape.
type ProcTable struct {
	root    string
	byStart map[uint64][]hostProc
	// nspid remembers each host process's innermost pid: a region's slots are written by
	// its container, which may give all 1,024 of them the start time of many host
	// processes; each host process's status is then still read once per scrape.
	nspid map[int]nsPID
}

type nsPID struct {
	pid int
	err error
}

type hostProc struct {
	pid   int
	state byte
}

// ScanProcs reads the state and start time of every process under root.
func ScanProcs(root string) (*ProcTable, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("list processes in %s: %w", root, err)
	}
	t := &ProcTable{root: root, byStart: map[uint64][]hostProc{}, nspid: map[int]nsPID{}}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, e.Name(), "stat"))
		if err != nil {
			continue // exited since the listing
		}
		state, start, ok := ParseStat(b)
		if !ok {
			continue
		}
		t.byStart[start] = append(t.byStart[start], hostProc{pid: pid, state: state})
	}
	return t, nil
}

// ParseStat reads the state (field 3) and start time (field 22) of a /proc/<pid>/stat
// line. The command name in field 2 may hold spaces and parentheses: fields count from
// the last ')'.
func ParseStat(b []byte) (state byte, start uint64, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state), so field 22 is fields[19].
	// The state is one letter (R, S, D, Z, T, t, X, I, …); anything else is not a
	// stat line, however many fields follow.
	if len(fields) < 20 || len(fields[0]) != 1 || !isLetter(fields[0][0]) {
		return 0, 0, false
	}
	start, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return fields[0][0], start, true
}

func isLetter(c byte) bool { return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' }

// Alive implements Liveness the way vgpu-core's owner_alive does, from the host's side:
// some host process with the slot's start time whose innermost pid is the slot's pid, not
// a zombie, whose exec marker is still open. What cannot be read counts as alive.
//
// Several host processes can answer to one slot's pid and start time: every container has
// pid namespaces of its own, so two containers that start the same program at the same
// clock tick (the start time's resolution is 10 ms) hold processes with equal inner pids
// and start times. Only the exec marker, a pipe inode unique on the host, tells them
// apart, so each candidate is checked until one holds the slot's marker.
func (t *ProcTable) Alive(p Proc) bool {
	for _, hp := range t.byStart[p.StartTime] {
		nspid, err := t.innermostPID(hp.pid)
		if errors.Is(err, os.ErrNotExist) {
			continue // exited since the scan
		}
		if err != nil {
			nspid = hp.pid
		}
		if nspid != int(p.PID) || hp.state == 'Z' || hp.state == 'X' {
			continue
		}
		if t.markerOpen(hp.pid, p) {
			return true
		}
	}
	return false
}

// innermostPID is the pid the process has in its own namespace: the last NSpid entry of
// its status; a kernel without NSpid (before 4.1) numbers it as the host does.
func (t *ProcTable) innermostPID(hostPID int) (int, error) {
	if r, ok := t.nspid[hostPID]; ok {
		return r.pid, r.err
	}
	pid, err := readInnermostPID(t.root, hostPID)
	if t.nspid != nil {
		t.nspid[hostPID] = nsPID{pid, err}
	}
	return pid, err
}

func readInnermostPID(root string, hostPID int) (int, error) {
	f, err := os.Open(filepath.Join(root, strconv.Itoa(hostPID), "status"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "NSpid:")
		if !ok {
			continue
		}
		ids := strings.Fields(rest)
		if len(ids) == 0 {
			break
		}
		return strconv.Atoi(ids[len(ids)-1])
	}
	return hostPID, sc.Err()
}

// markerOpen checks the exec marker: exec closes it, so a missing descriptor means the
// image that registered is gone; one we may not read (another user) counts as open.
func (t *ProcTable) markerOpen(hostPID int, p Proc) bool {
	if p.MarkerIno == 0 {
		return true
	}
	link, err := os.Readlink(filepath.Join(t.root, strconv.Itoa(hostPID), "fd", strconv.Itoa(int(p.MarkerFD))))
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	return link == "pipe:["+strconv.FormatUint(p.MarkerIno, 10)+"]"
}
