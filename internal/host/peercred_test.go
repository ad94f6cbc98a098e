package host_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const peerDialEnv = "MAKA_TEST_PEER_DIAL"

// peerDial is the helper process: it connects to endpoint, sends a hello
// and prints "answered" if the host answered it, "closed" if the host
// closed the connection without a byte.
func peerDial(endpoint string) int {
	c, err := net.Dial("unix", endpoint)
	if err != nil {
		fmt.Println("dial failed:", err)
		return 1
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, `{"kind":"hello","clientInstanceId":"peer","surface":"inspect","protocolMin":0,"protocolMax":0}`+"\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	switch {
	case err == nil && strings.Contains(line, `"accepted"`):
		fmt.Println("answered")
	case line == "" && (err == io.EOF || errors.Is(err, syscall.ECONNRESET)):
		// Closed unanswered (a reset when the hello was still unread).
		fmt.Println("closed")
	default:
		fmt.Printf("unexpected: %q %v\n", line, err)
	}
	return 0
}

// runPeer runs the test binary as a helper process (as another uid when
// asUID is set) and returns what it printed.
func runPeer(t *testing.T, bin, endpoint string, asUID string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var cmd *exec.Cmd
	if asUID != "" {
		cmd = exec.CommandContext(ctx, "setpriv", "--reuid", asUID, "--regid", asUID, "--clear-groups", bin, "-test.run", "^$")
	} else {
		cmd = exec.CommandContext(ctx, bin, "-test.run", "^$")
	}
	cmd.Env = append(os.Environ(), peerDialEnv+"="+endpoint)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper process: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// The trust boundary is the account: a connection from another uid is
// closed before its hello is read, even when the file modes would let it
// reach the socket.
func TestPeerOfAnotherUIDIsClosedBeforeHello(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another uid")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv is not installed")
	}
	f := withRuntimeHost(t, nil)
	endpoint := f.kernel.Endpoint()

	// A copy of this test binary the other uid can execute.
	dir, err := os.MkdirTemp("", "maka-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "peer.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Open the endpoint's modes so that only the peer check stands in the
	// way (the host creates them 0700 / 0600).
	sockDir := filepath.Dir(endpoint)
	st, err := os.Stat(sockDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(sockDir, st.Mode().Perm()) })
	if err := os.Chmod(endpoint, 0o777); err != nil {
		t.Fatal(err)
	}

	if got := runPeer(t, bin, endpoint, ""); got != "answered" {
		t.Fatalf("same-uid peer: %s, want answered", got)
	}
	if got := runPeer(t, bin, endpoint, "65534"); got != "closed" {
		t.Fatalf("peer of uid 65534: %s, want closed", got)
	}
	// The host still serves its own user.
	c := f.connectClient()
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatalf("status after the refused peer: %v", err)
	}
}
