package sandbox

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxChain bounds a walk up a ppid chain (pid namespaces nest at most 32
// deep, process trees are seldom deeper than a few dozen).
const maxChain = 4096

// parentOf is the ppid of pid read from /proc/<pid>/stat; ok is false when
// the process is gone or its stat cannot be parsed.
func parentOf(pid int) (ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	return parseStatPPID(b)
}

// parseStatPPID parses the ppid of a /proc/<pid>/stat line: the command
// name is in parentheses and may itself hold spaces and parentheses, so
// the fields are counted from the last ')'.
func parseStatPPID(b []byte) (int, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return 0, false
	}
	return ppid, true
}

// processTable maps every visible pid to its ppid.
func processTable() map[int]int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	table := make(map[int]int, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid <= 0 {
			continue
		}
		if ppid, ok := parentOf(pid); ok {
			table[pid] = ppid
		}
	}
	return table
}

// descendantsOf lists the processes whose ppid chain in table reaches root.
func descendantsOf(table map[int]int, root int) []int {
	memo := map[int]bool{root: true}
	var under func(pid, depth int) bool
	under = func(pid, depth int) bool {
		if v, ok := memo[pid]; ok {
			return v
		}
		ppid, ok := table[pid]
		if !ok || ppid <= 0 || ppid == pid || depth > maxChain {
			memo[pid] = false
			return false
		}
		v := under(ppid, depth+1)
		memo[pid] = v
		return v
	}
	var out []int
	for pid := range table {
		if pid != root && under(pid, 0) {
			out = append(out, pid)
		}
	}
	return out
}

// isDescendant reports whether root is a strict ancestor of pid now.
func isDescendant(pid, root int) bool {
	for depth := 0; depth < maxChain && pid > 1; depth++ {
		ppid, ok := parentOf(pid)
		if !ok {
			return false
		}
		if ppid == root {
			return true
		}
		pid = ppid
	}
	return false
}

// signalDescendants sends sig to every current descendant of the calling
// process and reports how many it signalled. Each target is pinned with a
// pidfd and checked again after that, so a pid reused by an unrelated
// process between the scan and the signal is never hit.
func signalDescendants(sig syscall.Signal) int {
	self := os.Getpid()
	n := 0
	for _, pid := range descendantsOf(processTable(), self) {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			if errors.Is(err, unix.ENOSYS) && isDescendant(pid, self) {
				if syscall.Kill(pid, sig) == nil {
					n++
				}
			}
			continue
		}
		if isDescendant(pid, self) && unix.PidfdSendSignal(fd, sig, nil, 0) == nil {
			n++
		}
		unix.Close(fd)
	}
	return n
}
