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
// package linked into this one binary: the model SDKs, the terminal UI's
// markdown and syntax-highlighting tables) may be reclaimed now. They are
// clean file pages: whatever the host still runs faults back in on use.
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
		if len(fields) < 6 || fields[5] != exe || strings.Contains(fields[1], "w") {
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
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_PAGEOUT)
	}
}
