package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/maka-agent/maka/internal/peercred"
)

// Peer is the process at the other end of a connection, as the operating
// system reported it when the connection was accepted (SO_PEERCRED): what
// the peer was when it connected, which it cannot forge.
type Peer struct {
	UID uint32
	GID uint32
	PID int
	// PIDFD is a pidfd of the same process (SO_PEERPIDFD), nil where the
	// kernel has none. It is open only while the peer checks run, and
	// nil in the peer a connection's handlers see.
	PIDFD *os.File
}

// LogValue logs a peer as a group of its ids.
func (p Peer) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Any("uid", p.UID),
		slog.Any("gid", p.GID),
		slog.Int("pid", p.PID),
	)
}

type peerKey struct{}

// WithPeer returns a context carrying p; the kernel gives every handler of a
// connection a context carrying its peer. It is for handlers run without a
// socket (tests).
func WithPeer(ctx context.Context, p Peer) context.Context {
	return context.WithValue(ctx, peerKey{}, p)
}

// PeerFromContext returns the peer of the connection a handler serves.
func PeerFromContext(ctx context.Context) (Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(Peer)
	return p, ok
}

// peerOf reads the peer credentials of an accepted socket.
func peerOf(nc net.Conn) (Peer, error) {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return Peer{}, errors.New("peer credentials: not a unix socket")
	}
	// Both name the process that connected: its pid is its own for as
	// long as the pidfd finds it alive.
	pidfd, err := peercred.PIDFD(uc)
	if err != nil {
		return Peer{}, fmt.Errorf("peer pidfd: %w", err)
	}
	cred, err := peercred.Of(uc)
	if err != nil {
		if pidfd != nil {
			pidfd.Close()
		}
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	return Peer{UID: cred.Uid, GID: cred.Gid, PID: int(cred.Pid), PIDFD: pidfd}, nil
}

// checkPeer admits only a peer of the host's own uid: the trust boundary
// of a local host is the account, so a connection from any other user
// (root included) is closed before a byte of it is read.
func checkPeer(p Peer, uid uint32) error {
	if p.UID != uid {
		return fmt.Errorf("peer uid %d is not the host's uid %d", p.UID, uid)
	}
	return nil
}

var hostUID = uint32(os.Getuid())
