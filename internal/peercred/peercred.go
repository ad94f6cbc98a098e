// Package peercred reads the kernel's credentials of the process at the
// other end of a Unix socket (SO_PEERCRED): what the peer was when it
// connected, which it cannot forge.
package peercred

import (
	"net"

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
