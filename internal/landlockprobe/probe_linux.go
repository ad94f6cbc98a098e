// Package landlockprobe says what the kernel offers the Bash sandbox,
// with the raw Landlock system calls only, so that a client (`maka host
// status`) can report it without linking the sandbox and its Landlock
// library. The sandbox package decides for itself what it uses
// (sandbox.Status); the two read the same kernel interface.
package landlockprobe

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Summary is the sandbox line of host status: "landlock ABI <n>" or
// "unavailable: <reason>".
func Summary() string { return summary() }

var summary = sync.OnceValue(probe)

func probe() string {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	abi := int(v)
	switch {
	case errno == syscall.ENOSYS:
		return "unavailable: kernel has no Landlock (ABI 0)"
	case errno == syscall.EOPNOTSUPP:
		return "unavailable: Landlock is disabled in this kernel (not in the lsm= boot list)"
	case errno != 0:
		return fmt.Sprintf("unavailable: cannot query Landlock: %v", error(errno))
	case abi < 1:
		return fmt.Sprintf("unavailable: kernel has no Landlock (ABI %d)", abi)
	}
	if abi >= 6 {
		// The sandbox lowers the ABI to 5 where the kernel's signal
		// scoping has a known defect (the errata bit 2 is unset).
		e, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_ERRATA)
		if errno != 0 || e&0x2 == 0 {
			abi = 5
		}
	}
	// Build (without enforcing) a read-only ruleset, as the sandbox does.
	attr := struct{ handledAccessFS uint64 }{unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR | unix.LANDLOCK_ACCESS_FS_EXECUTE}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return fmt.Sprintf("unavailable: cannot build a Landlock ruleset: %v", errors.New(errno.Error()))
	}
	unix.Close(int(fd))
	return fmt.Sprintf("landlock ABI %d", abi)
}
