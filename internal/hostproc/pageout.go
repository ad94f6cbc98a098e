package hostproc

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// pageOutExecutable tells the kernel that the executable's read-only pages
// faulted in while the process started (the initialisation of every
// package linked into maka-host: the model SDKs, SQLite, the MCP SDK) may
// be reclaimed now. They are
// clean file pages: whatever the host still runs faults back in on use.
//
// It first marks those mappings MADV_RANDOM, which turns off the kernel's
// fault-around: without it every fault maps the 64 KiB of cached pages
// around the one touched (and readahead reads ahead of it), so the few
// scattered pages a request runs (its code, the function tables the GC and
// stack unwinding read) brought back about 8 MiB of the executable per
// first request; with it, only the pages that are touched come back. The
// price: a page that is not in the page cache either (a cold start after
// memory pressure) is read from disk alone, not with its neighbours.
// A long-lived host then keeps resident only the code it actually runs.
// Errors (an old kernel without MADV_PAGEOUT) are ignored: the advice is
// only an optimisation.
func pageOutExecutable() {
	exe, err := os.Executable()
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || mapsPath(sc.Text()) != exe || strings.Contains(fields[1], "w") {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_RANDOM)
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_PAGEOUT)
	}
}

// mapsPath is the path of a /proc/PID/maps line: the rest of the line
// after its fifth field (address, perms, offset, dev, inode), which may
// hold spaces; "" when there is none.
func mapsPath(line string) string {
	for range 5 {
		line = strings.TrimLeft(line, " ")
		i := strings.IndexByte(line, ' ')
		if i < 0 {
			return ""
		}
		line = line[i:]
	}
	return strings.TrimLeft(line, " ")
}
