// Package peercred reads the kernel's credentials of the process at the
// other end of a Unix socket (SO_PEERCRED): what the peer was when it
// connected, which it cannot forge.
package peercred

import (
	"errors"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Of returns the peer credentials of c.
func Of(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, serr
}

// PIDFD returns a pidfd of the process that connected c (SO_PEERPIDFD,
// Linux 6.5 and later), or nil without an error when the kernel has no
// such option. It fails when the peer is gone on a kernel that hands out
// no pidfd of a reaped process.
func PIDFD(c *net.UnixConn) (*os.File, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var serr error
	if err := raw.Control(func(s uintptr) {
		fd, serr = unix.GetsockoptInt(int(s), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	}); err != nil {
		return nil, err
	}
	switch {
	case errors.Is(serr, unix.ENOPROTOOPT):
		return nil, nil
	case serr != nil:
		return nil, serr
	}
	return os.NewFile(uintptr(fd), "pidfd"), nil
}
