package host

import (
	"fmt"
	"net"
	"os"

	"github.com/maka-agent/maka/internal/peercred"
)

// checkPeer admits only a peer of the host's own uid: the trust boundary
// of a local host is the account, so a connection from any other user
// (root included) is closed before a byte of it is read.
func checkPeer(c *net.UnixConn, uid uint32) error {
	cred, err := peercred.Of(c)
	if err != nil {
		return fmt.Errorf("peer credentials: %w", err)
	}
	if cred.Uid != uid {
		return fmt.Errorf("peer uid %d is not the host's uid %d", cred.Uid, uid)
	}
	return nil
}

var hostUID = uint32(os.Getuid())
