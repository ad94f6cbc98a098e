//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/internal/peercred"
)

// The roles of the test binary in the peer tests. peerParentEnv names a
// socket: the process has a child connect to it and exit, reaps it, then
// connects itself, prints "connected" and holds both connections until
// the other end closes them. peerChildEnv names the socket the child
// connects fd 3 to.
const (
	peerParentEnv = "MAKA_SANDBOX_TEST_PEER_PARENT"
	peerChildEnv  = "MAKA_SANDBOX_TEST_PEER_CHILD"
)

// peerRole runs the test binary as one of the peer roles, if it is one.
func peerRole() (int, bool) {
	if path := os.Getenv(peerChildEnv); path != "" {
		if err := unix.Connect(3, &unix.SockaddrUnix{Name: path}); err != nil {
			fmt.Fprintln(os.Stderr, "connect:", err)
			return 1, true
		}
		return 0, true
	}
	path := os.Getenv(peerParentEnv)
	if path == "" {
		return 0, false
	}
	if err := peerParent(path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1, true
	}
	return 0, true
}

func peerParent(path string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	sock := os.NewFile(uintptr(fd), "socket")
	defer sock.Close()
	child := exec.Command("/proc/self/exe", "-test.run=^$")
	child.Env = append(os.Environ(), peerParentEnv+"=", peerChildEnv+"="+path)
	child.ExtraFiles = []*os.File{sock}
	child.Stderr = os.Stderr
	// Run returns once the child is reaped: its pid is free again.
	if err := child.Run(); err != nil {
		return fmt.Errorf("child: %w", err)
	}
	own, err := net.Dial("unix", path)
	if err != nil {
		return err
	}
	defer own.Close()
	fmt.Println("connected")
	b := make([]byte, 1)
	_, _ = sock.Read(b)
	_, _ = own.Read(b)
	return nil
}

// peerOfConn is the pid and pidfd of the process that connected c.
func peerOfConn(t *testing.T, c *net.UnixConn) (int, *os.File) {
	t.Helper()
	pidfd, err := peercred.PIDFD(c)
	if err != nil {
		t.Fatalf("SO_PEERPIDFD: %v", err)
	}
	if pidfd != nil {
		t.Cleanup(func() { pidfd.Close() })
	}
	cred, err := peercred.Of(c)
	if err != nil {
		t.Fatal(err)
	}
	return int(cred.Pid), pidfd
}

// A process of a confined call has a child connect to a socket, exit and
// be reaped, and keeps the connection: its peer is dead and its pid free,
// and it is still a call's peer. So are the call's live processes and a
// peer that cannot be read, and a process outside the call is not.
func TestPeerThatExitedAfterConnectingIsACallPeer(t *testing.T) {
	requireLandlock(t)
	ws := realTempDir(t)
	path := filepath.Join(realTempDir(t), "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, Spec{Command: fmt.Sprintf("%s=%s exec %s -test.run=^$", peerParentEnv, path, self),
		Dir: ws, Policy: Policy{Mode: ReadOnly, Workspace: ws}})
	r.waitLine("connected")
	_ = ln.SetDeadline(time.Now().Add(testDeadline))
	accept := func() *net.UnixConn {
		t.Helper()
		c, err := ln.AcceptUnix()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// Connections are accepted in the order they were made.
	dead, live := accept(), accept()
	pid, pidfd := peerOfConn(t, dead)
	if pidfd != nil {
		if err := unix.PidfdSendSignal(int(pidfd.Fd()), 0, nil, 0); !errors.Is(err, unix.ESRCH) {
			t.Fatalf("the child that connected is not gone: %v", err)
		}
	}
	if !IsCallPeer(pid, pidfd) {
		t.Errorf("IsCallPeer(%d, pidfd) = false for a call's child that connected and exited", pid)
	}
	if !IsCallPeer(pid, nil) {
		t.Errorf("IsCallPeer(%d, nil) = false for a call's child that connected and exited", pid)
	}
	if pid, pidfd := peerOfConn(t, live); !IsCallPeer(pid, pidfd) {
		t.Errorf("IsCallPeer(%d) = false for a live process of the call", pid)
	}

	// What cannot be read is a call's while one runs.
	if !IsCallPeer(0, nil) {
		t.Error("IsCallPeer(0) = false: a pid outside the namespace is not refused")
	}

	outside, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	pid, pidfd = peerOfConn(t, accept())
	if IsCallPeer(pid, pidfd) {
		t.Errorf("IsCallPeer(%d) = true for the test process", pid)
	}
	if pidfd != nil {
		dup, err := unix.Dup(int(pidfd.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		closed := os.NewFile(uintptr(dup), "pidfd")
		closed.Close()
		if !IsCallPeer(pid, closed) {
			t.Error("IsCallPeer with a closed pidfd = false")
		}
	}

	dead.Close()
	live.Close()
	if code, _, _, stderr := r.finish(); code != 0 {
		t.Fatalf("the call exited %d: %s", code, stderr)
	}
}
