package sandbox

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// walkRestarts bounds how often a peer's ancestry is read again after a
// process of it exited during the walk; past it the peer is refused.
const walkRestarts = 64

// errGone means a process the walk had to read exited, or was reaped and
// its pid could have been taken by another process, during the walk.
var errGone = errors.New("a process of the peer's ancestry exited during the check")

// IsCallPeer reports whether the process at the other end of a host
// connection may be a process of a running confined call. pid is the
// peer's pid (SO_PEERCRED) and pidfd, where the kernel has one, a pidfd of
// the same process taken from the socket (SO_PEERPIDFD); pidfd may be nil.
//
// It fails closed: while a confined call runs, a peer that is dead,
// whose ancestry cannot be read, or that cannot be told apart from a pid
// taken over by another process is a call's. Every process of the walk is
// pinned by a pidfd and found alive again after its /proc entry was read,
// so the entry was that process's and not a later holder of its pid.
// Without SO_PEERPIDFD the peer is pinned by pidfd_open at the check,
// which cannot tell a dead peer from a process that took its pid since.
func IsCallPeer(pid int, pidfd *os.File) bool {
	helpers := confinedHelpers()
	if len(helpers) == 0 {
		// No call runs, and every process of an ended call is gone.
		return false
	}
	if pid <= 0 {
		return true
	}
	if pidfd != nil {
		// Control keeps the descriptor open for the whole walk; a closed
		// file is refused.
		rc, err := pidfd.SyscallConn()
		if err != nil {
			return true
		}
		in := true
		if err := rc.Control(func(fd uintptr) { in = walkFrom(pid, int(fd), helpers) }); err != nil {
			return true
		}
		return in
	}
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		defer unix.Close(fd)
	case errors.Is(err, unix.ENOSYS):
		fd = -1
	default:
		// The peer is gone (ESRCH), or cannot be pinned.
		return true
	}
	return walkFrom(pid, fd, helpers)
}

// walkFrom reports whether pid (pinned by fd, or -1) may be a process of
// one of helpers, reading its ancestry again, a bounded number of times,
// while only an ancestor of it exited under the walk.
func walkFrom(pid, fd int, helpers map[int]bool) bool {
	for range walkRestarts {
		in, err := underHelper(pid, fd, helpers)
		if err == nil {
			return in
		}
		if !errors.Is(err, errGone) || !alive(fd) {
			return true
		}
		// An ancestor exited: the peer was reparented; read it again.
	}
	return true
}

// IsCallDescendant reports whether pid is, or may be, a process of a
// running confined call: IsCallPeer without a pidfd from the socket.
func IsCallDescendant(pid int) bool { return IsCallPeer(pid, nil) }

// confinedHelpers are the pids of the running confined helpers.
func confinedHelpers() map[int]bool {
	live.Lock()
	defer live.Unlock()
	m := make(map[int]bool, len(live.m))
	for h, c := range live.m {
		if c {
			m[h] = true
		}
	}
	return m
}

// alive reports whether the process of pidfd has not been reaped, so its
// pid is still its own (a zombie's too); fd -1, without pidfds, is alive.
func alive(fd int) bool {
	return fd < 0 || unix.PidfdSendSignal(fd, 0, nil, 0) == nil
}

// underHelper walks up the parents of pid (pinned by fd, or -1 on a kernel
// without pidfds) and reports whether one is in helpers. Each step reads
// the parent's pid, pins it with a pidfd, and reads the child's parent
// again: the pinned process, found alive after its own entry is read in
// the next step, then held that pid when it was the child's parent. A
// process no longer found is errGone.
func underHelper(pid, fd int, helpers map[int]bool) (bool, error) {
	own := -1 // the pidfd this walk opened, closed at the next step
	defer func() {
		if own >= 0 {
			unix.Close(own)
		}
	}()
	for range maxChain {
		if helpers[pid] {
			return true, nil
		}
		ppid, err := parentPinned(pid, fd)
		if err != nil {
			return false, err
		}
		if helpers[ppid] {
			return true, nil
		}
		if ppid <= 1 {
			// Init's, or (0) a parent outside this pid namespace: the
			// helpers are this process's children, so not a call's.
			return false, nil
		}
		pfd := -1
		if fd >= 0 {
			if pfd, err = unix.PidfdOpen(ppid, 0); err != nil {
				return false, errGone
			}
			again, err := parentPinned(pid, fd)
			if err != nil || again != ppid {
				unix.Close(pfd)
				return false, errGone
			}
		}
		if own >= 0 {
			unix.Close(own)
		}
		own = pfd
		pid, fd = ppid, pfd
	}
	// Deeper than any process tree: refused.
	return false, errors.New("the peer's ancestry is too deep")
}

// parentPinned is the ppid of pid, read while the process of fd held pid
// (it is alive after the read).
func parentPinned(pid, fd int) (int, error) {
	ppid, ok := parentOf(pid)
	if !ok || !alive(fd) {
		return 0, errGone
	}
	return ppid, nil
}
