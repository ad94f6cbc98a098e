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
// host pinned its peers, a few dozen were enough for one to be admitted.
const forkDialAttempts = 200

func forkDialRole() (int, bool) {
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
	for i := range attempts {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err.Error()
		}
		sock := os.NewFile(uintptr(fd), "socket")
		child := exec.Command("/proc/self/exe", "-test.run=^$")
		child.Env = append(os.Environ(), forkDialEnv+"=", forkDialChildEnv+"="+endpoint)
		child.ExtraFiles = []*os.File{sock}
		// Run returns once the child that connected is reaped.
		if err := child.Run(); err != nil {
			sock.Close()
			return "the child did not connect: " + err.Error()
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
		cmd := fmt.Sprintf("%s='%d %s %s' %s", forkDialEnv, forkDialAttempts, sid, endpoint, self)
		return callsThenDone(bashCall(t, "c1", cmd))(req)
	})
	endpoint = h.host.Kernel.Endpoint()
	createSession(t, h.conn, sid, protocol.PermissionModeExecute)
	runTurn(t, h, sid, "turn-1", "dial")
	res := lastResults(t, h)
	want := fmt.Sprintf("refused %d times", forkDialAttempts)
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
