package storageroot

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	helperEnv     = "MAKA_STORAGEROOT_TEST_HELPER"
	helperRootEnv = "MAKA_STORAGEROOT_TEST_HELPER_ROOT"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode, os.Getenv(helperRootEnv)))
	}
	os.Exit(m.Run())
}

// runHelper is the body of a lock-holding child process: it acquires the
// lock named by mode ("owner", or "reader" for a shared lock), reports the outcome on stdout, holds the lock until
// stdin reaches EOF, then releases it.
func runHelper(mode, root string) int {
	c, err := Resolve(root, KindInteractive)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	var closer io.Closer
	switch mode {
	case "owner":
		o, err := TryAcquireOwner(c)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		if o != nil {
			closer = o
		}
	case "reader":
		release, err := trySharedLock(c)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		if release != nil {
			closer = closerFunc(release)
		}
	default:
		fmt.Println("error: unknown mode", mode)
		return 1
	}
	if closer == nil {
		fmt.Println("contended")
		return 0
	}
	fmt.Println("granted")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := closer.Close(); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	return 0
}

type closerFunc func()

func (f closerFunc) Close() error { f(); return nil }

// trySharedLock takes a shared (read) lock of c's owner.lock without
// waiting, the lock another implementation's reader holds. It returns a nil
// release when the lock is held exclusively. release is idempotent.
func trySharedLock(c *Capability) (release func(), err error) {
	dir, err := PrepareControlDirectory(c)
	if err != nil {
		return nil, err
	}
	fd, err := open(filepath.Join(dir, LockFile), unix.O_RDWR|unix.O_APPEND|unix.O_CREAT, 0o600)
	if err != nil {
		return nil, err
	}
	granted, err := tryLock(fd, true)
	if err != nil || !granted {
		unix.Close(fd)
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			unlock(fd)
			unix.Close(fd)
		})
	}, nil
}

// holderProc is a child test process that holds (or failed to take) a lock.
type holderProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	result string
}

// startHolder starts a child process that tries to take the lock of root
// in mode ("owner" or "reader") and returns once it reported the outcome.
func startHolder(t *testing.T, root, mode string) *holderProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// The race detector otherwise sleeps a second before every exit.
	race := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperRootEnv+"="+root, "GORACE="+race)
	cmd.Stderr = os.Stderr
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
	p := &holderProc{cmd: cmd, stdin: stdin}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper %s: reading outcome: %v", mode, err)
	}
	p.result = strings.TrimSpace(line)
	if strings.HasPrefix(p.result, "error:") {
		t.Fatalf("helper %s: %s", mode, p.result)
	}
	return p
}

// release closes the child's stdin and waits for it to release and exit.
func (p *holderProc) release(t *testing.T) {
	t.Helper()
	_ = p.stdin.Close()
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("helper exit: %v", err)
	}
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v, want storage root error %s", err, code)
	}
	if e.Code != code {
		t.Fatalf("error code = %s (%v), want %s", e.Code, err, code)
	}
}

// cleanupControl removes the per-root control directory of rootID at the
// end of the test.
func cleanupControl(t *testing.T, rootID string) {
	t.Helper()
	ns, err := ControlNamespace()
	if err != nil {
		t.Fatal(err)
	}
	if !IsRootID(rootID) {
		t.Fatalf("bad root id %q", rootID)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(ns, rootID)) })
}

// resolveInteractive resolves a fresh interactive root and schedules the
// removal of its control directory.
func resolveInteractive(t *testing.T) *Capability {
	t.Helper()
	c, err := Resolve(filepath.Join(t.TempDir(), "root"), KindInteractive)
	if err != nil {
		t.Fatal(err)
	}
	cleanupControl(t, c.RootID())
	return c
}

func dirIdentity(t *testing.T, dir string) (dev, ino uint64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	id := identityOf(&st)
	return id.dev, id.ino
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown to another uid")
	}
}
