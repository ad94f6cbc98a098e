package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dropCapabilities empties the calling thread's capabilities, which the
// thread that execs the shell passes on to the whole command: the
// bounding set (where the thread may change it: CAP_SETPCAP), the ambient
// set, and the effective, permitted and inheritable sets. Run as root, a
// confined command is then root by uid only: no raw or packet sockets, no
// reading past file modes, no capability regained by an exec (with
// no_new_privs, set next, not even from file capabilities).
func dropCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Effective&(1<<unix.CAP_SETPCAP) != 0 {
		last, err := lastCap()
		if err != nil {
			return err
		}
		for c := 0; c <= last; c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return fmt.Errorf("PR_CAPBSET_DROP %d: %w", c, err)
			}
		}
	}
	// EINVAL: a kernel without ambient capabilities, which has none.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("PR_CAP_AMBIENT_CLEAR_ALL: %w", err)
	}
	hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data = [2]unix.CapUserData{}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// lastCap is the highest capability the kernel knows.
func lastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("cap_last_cap: %w", err)
	}
	return n, nil
}
