package e2e_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/internal/sandbox"
	"github.com/maka-agent/maka/internal/transport"
	"github.com/maka-agent/maka/protocol"
)

// The roles of the test binary in the fork-connect-exit test.
// forkDialEnv is "<attempts> <session> <endpoint>": the process makes a
// socket, has a child connect it to the endpoint and exit, reaps the
// child, then says hello on the connection; if the host answers, it sets
// the session's mode to bypass and prints "accepted on attempt <n>",
// else it tries again and at last prints "refused <attempts> times".
// forkDialChildEnv names the endpoint the child connects fd 3 to.
const (
	forkDialEnv      = "MAKA_E2E_FORK_DIAL"
	forkDialChildEnv = "MAKA_E2E_FORK_DIAL_CHILD"
)

// forkDialAttempts is how many connections the command makes: before the
// host pinned its peers, a few dozen were enough for one to be admitted
// (the deterministic check is TestPeerThatExitedAfterConnectingIsACallPeer
// in internal/sandbox; -short and the race detector, which slows the start
// of each child, make fewer, so that they fit in a turn's time).
func forkDialAttempts() int {
	if testing.Short() || raceEnabled {
		return 8
	}
	return 200
}

func forkDialRole() (int, bool) {
	if v := os.Getenv(orphanDialEnv); v != "" {
		return orphanDial(v), true
	}
	if endpoint := os.Getenv(forkDialChildEnv); endpoint != "" {
		if err := unix.Connect(3, &unix.SockaddrUnix{Name: endpoint}); err != nil {
			return 1, true
		}
		return 0, true
	}
	v := os.Getenv(forkDialEnv)
	if v == "" {
		return 0, false
	}
	f := strings.SplitN(v, " ", 3)
	n, err := strconv.Atoi(f[0])
	if len(f) != 3 || err != nil {
		fmt.Println("bad", forkDialEnv)
		return 1, true
	}
	fmt.Println(forkDial(n, f[1], f[2]))
	return 0, true
}

func forkDial(attempts int, sid, endpoint string) string {
	hello, err := protocol.EncodeFrame(protocol.Hello{Kind: protocol.KindHello, ClientInstanceID: "fork-dial", Surface: protocol.SurfaceTUI})
	if err != nil {
		return err.Error()
	}
	set, err := protocol.AppendRequest(nil, "from-the-call", protocol.OpSessionPermissionsSet,
		protocol.SessionPermissionsSetInput{SessionID: sid, PermissionMode: protocol.PermissionModeBypass})
	if err != nil {
		return err.Error()
	}
	failed := 0
	for i := 0; i < attempts; i++ {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err.Error()
		}
		sock := os.NewFile(uintptr(fd), "socket")
		child := exec.Command("/proc/self/exe", "-test.run=^$")
		child.Env = append(os.Environ(), forkDialEnv+"=", forkDialChildEnv+"="+endpoint)
		child.ExtraFiles = []*os.File{sock}
		// Run returns once the child that connected is reaped. A child
		// that could not connect (a loaded machine) proves nothing either
		// way: try again, a bounded number of times.
		if err := child.Run(); err != nil {
			sock.Close()
			if failed++; failed > attempts {
				return "the children did not connect: " + err.Error()
			}
			i-- // this attempt made no connection
			continue
		}
		nc, err := net.FileConn(sock)
		sock.Close()
		if err != nil {
			return err.Error()
		}
		tc := transport.New(nc)
		_ = tc.Write(hello)
		v, err := tc.ReadFrame(10 * time.Second)
		if err == nil {
			if f, err := protocol.DecodeHostFrame(v); err == nil {
				if _, ok := f.(*protocol.Accepted); ok {
					_ = tc.Write(set)
					resp, err := tc.ReadFrame(10 * time.Second)
					tc.Close()
					return fmt.Sprintf("accepted on attempt %d: %v %v", i, resp, err)
				}
			}
		}
		tc.Close()
	}
	return fmt.Sprintf("refused %d times", attempts)
}

// A sandboxed command has a child connect to the host's socket, exit and
// be reaped, and keeps the connection, which names a dead peer whose pid
// is free: the host refuses it, every time, and the session stays in
// execute mode.
func TestSandboxedCommandCannotTalkToTheHostThroughAnExitedChild(t *testing.T) {
	st := sandbox.Status()
	if !st.Available {
		t.Skipf("landlock unavailable: %s", st.Reason)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sid := "fork-dial"
	var endpoint string
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		cmd := fmt.Sprintf("%s='%d %s %s' %s", forkDialEnv, forkDialAttempts(), sid, endpoint, self)
		return callsThenDone(bashCall(t, "c1", cmd))(req)
	})
	endpoint = h.host.Kernel.Endpoint()
	createSession(t, h.conn, sid, protocol.PermissionModeExecute)
	runTurn(t, h, sid, "turn-1", "dial")
	res := lastResults(t, h)
	want := fmt.Sprintf("refused %d times", forkDialAttempts())
	if len(res) != 1 || !strings.Contains(res[0].Text(), want) {
		t.Errorf("the command printed %q, want %q", res, want)
	}
	got, err := h.conn.Call(opCtx(t), protocol.OpSessionPermissionsQuery, protocol.SessionPermissionsQueryInput{SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	if p := got.(protocol.SessionPermissions); p.PermissionMode != protocol.PermissionModeExecute {
		t.Errorf("the session's mode is %q after the call, want execute", p.PermissionMode)
	}
}

// orphanDialEnv is "<session> <endpoint> <fifo>": the test binary
// connects to the endpoint, kills its parent at once (so the parent exits
// while the host may be reading the ancestry), says hello, sets the
// session's mode to bypass if the host answered, and writes "accepted" or
// "refused" to the fifo.
const orphanDialEnv = "MAKA_E2E_ORPHAN_DIAL"

// orphanDialAttempts is how many connections the command makes: before
// the host read the ancestry again, one in a few hundred was admitted
// (fewer with -short, as for forkDialAttempts).
func orphanDialAttempts() int {
	if testing.Short() || raceEnabled {
		return 80
	}
	return 400
}

func orphanDial(v string) int {
	f := strings.SplitN(v, " ", 3)
	if len(f) != 3 {
		return 1
	}
	sid, endpoint, fifo := f[0], f[1], f[2]
	out, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		return 1
	}
	defer out.Close()
	nc, err := net.Dial("unix", endpoint)
	_ = unix.Kill(os.Getppid(), unix.SIGKILL)
	if err != nil {
		fmt.Fprintln(out, "dial failed:", err)
		return 0
	}
	tc := transport.New(nc)
	defer tc.Close()
	hello, _ := protocol.EncodeFrame(protocol.Hello{Kind: protocol.KindHello, ClientInstanceID: "orphan-dial", Surface: protocol.SurfaceTUI})
	_ = tc.Write(hello)
	v2, err := tc.ReadFrame(10 * time.Second)
	if err == nil {
		if f, err := protocol.DecodeHostFrame(v2); err == nil {
			if _, ok := f.(*protocol.Accepted); ok {
				set, _ := protocol.AppendRequest(nil, "from-the-call", protocol.OpSessionPermissionsSet,
					protocol.SessionPermissionsSetInput{SessionID: sid, PermissionMode: protocol.PermissionModeBypass})
				_ = tc.Write(set)
				_, _ = tc.ReadFrame(10 * time.Second)
				fmt.Fprintln(out, "accepted")
				return 0
			}
		}
	}
	fmt.Fprintln(out, "refused")
	return 0
}

// A sandboxed command's process connects and its parent exits at once:
// the host, reading the ancestry, finds a parent gone and reads the
// reparented peer again rather than admit it.
func TestSandboxedCommandCannotTalkToTheHostWhileItsAncestorsExit(t *testing.T) {
	st := sandbox.Status()
	if !st.Available {
		t.Skipf("landlock unavailable: %s", st.Reason)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sid := "orphan-dial"
	var endpoint string
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		cmd := fmt.Sprintf("mkfifo r && exec 3<>r || exit 99\n"+
			"for i in $(seq %d); do (%s='%s %s r' %s -test.run=^$; true); done\n"+
			"for i in $(seq %d); do read -r line <&3; case $line in refused) ;; *) echo \"$line\";; esac; done\n"+
			"echo attempts done",
			orphanDialAttempts(), orphanDialEnv, sid, endpoint, self, orphanDialAttempts())
		return callsThenDone(bashCall(t, "c1", cmd))(req)
	})
	endpoint = h.host.Kernel.Endpoint()
	createSession(t, h.conn, sid, protocol.PermissionModeExecute)
	runTurn(t, h, sid, "turn-1", "dial")
	res := lastResults(t, h)
	if len(res) != 1 || !strings.Contains(res[0].Text(), "stdout:\nattempts done") {
		t.Errorf("the command printed %q, want every attempt refused", res)
	}
	got, err := h.conn.Call(opCtx(t), protocol.OpSessionPermissionsQuery, protocol.SessionPermissionsQueryInput{SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	if p := got.(protocol.SessionPermissions); p.PermissionMode != protocol.PermissionModeExecute {
		t.Errorf("the session's mode is %q after the call, want execute", p.PermissionMode)
	}
}
