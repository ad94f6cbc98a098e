package client_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/control"
	"github.com/maka-agent/maka/protocol"
)

const listenAsEnv = "MAKA_TEST_LISTEN_AS"

// listenAs is the helper process: it listens on path, says "ready", and
// reports whether any byte ever arrived before its stdin closes.
func listenAs(path string) int {
	ln, err := net.Listen("unix", path)
	if err != nil {
		fmt.Println("listen:", err)
		return 1
	}
	defer ln.Close()
	_ = os.Chmod(path, 0o777)
	got := make(chan int, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, _ := c.Read(make([]byte, 1))
				got <- n
			}()
		}
	}()
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // the test is done
	select {
	case n := <-got:
		fmt.Println("bytes", n)
	default:
		fmt.Println("bytes 0")
	}
	return 0
}

// A client refuses a host socket served by another user: its peer
// credentials show the other uid before the hello is sent.
func TestSocketOfAnotherUserIsRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to serve a socket as another uid")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv is not installed")
	}
	root, capability := newRoot(t)
	dir := controlDir(t, capability)
	// A copy of this test binary and a socket directory uid 65534 can use.
	shared, err := os.MkdirTemp("", "maka-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(shared, "client.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	endpoint := filepath.Join(shared, "h.sock")
	cmd := exec.Command("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", bin, "-test.run", "^$")
	cmd.Env = append(os.Environ(), listenAsEnv+"="+endpoint)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("helper: %q %v", line, err)
	}
	if err := control.WriteRegistration(dir, control.Registration{
		Kind: control.RegistrationKind, SchemaVersion: control.RegistrationSchemaVersion, RootID: capability.RootID(),
		HostEpoch: uuid.NewString(), Endpoint: endpoint, ProtocolMin: 0, ProtocolMax: 0,
		State: protocol.StateReady, PID: int64(cmd.Process.Pid), CreatedAt: "2024-01-01T00:00:00.000Z",
	}); err != nil {
		t.Fatal(err)
	}
	res, err := client.Connect(testContext(t), client.Options{RootPath: root, Surface: protocol.SurfaceInspect})
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind == client.Connected {
		res.Conn.Close()
	}
	stdin.Close()
	line, _ := out.ReadString('\n')
	_ = cmd.Wait()
	if res.Kind != client.Unavailable || res.Reason != client.ConnectFailed || res.Err == nil || !strings.Contains(res.Err.Error(), "uid 65534") {
		t.Fatalf("connect to another user's socket: %s %s %v", res.Kind, res.Reason, res.Err)
	}
	if strings.TrimSpace(line) != "bytes 0" {
		t.Fatalf("the other user's server received data: %q", line)
	}
}
