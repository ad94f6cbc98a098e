package host

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// peerUID returns the uid of the process at the other end of a Unix
// socket, from the kernel's peer credentials (SO_PEERCRED): what the peer
// was when it connected, which it cannot forge.
func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	return cred.Uid, nil
}

// checkPeer admits only a peer of the host's own uid: the trust boundary
// of a local host is the account, so a connection from any other user
// (root included) is closed before a byte of it is read.
func checkPeer(c *net.UnixConn, uid uint32) error {
	got, err := peerUID(c)
	if err != nil {
		return fmt.Errorf("peer credentials: %w", err)
	}
	if got != uid {
		return fmt.Errorf("peer uid %d is not the host's uid %d", got, uid)
	}
	return nil
}

var hostUID = uint32(os.Getuid())
