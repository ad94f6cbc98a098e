//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The roles of the test binary in the terminal test. ttyHostEnv makes it
// a host whose controlling terminal is its stdin: it runs one call of the
// mode the variable names, whose command is the test binary as
// ttyPushEnv, then prints "pending <n>", the bytes its terminal holds for
// it to read. ttyPushEnv makes it a command that pushes a byte of input
// (TIOCSTI) through /dev/tty, its descriptors 0, 1 and 2, and the
// terminal the variable names by path unless it is "-", and prints one
// line per attempt.
const (
	ttyHostEnv = "MAKA_SANDBOX_TEST_TTY_HOST"
	ttyPushEnv = "MAKA_SANDBOX_TEST_TTY_PUSH"
)

func ttyRole() (int, bool) {
	if path := os.Getenv(ttyPushEnv); path != "" {
		ttyPush(path)
		return 0, true
	}
	mode := os.Getenv(ttyHostEnv)
	if mode == "" {
		return 0, false
	}
	if err := ttyHost(Mode(mode)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1, true
	}
	return 0, true
}

func ttyHost(mode Mode) error {
	// The premise: this host has a controlling terminal a call could
	// inherit.
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("the host has no controlling terminal: %w", err)
	}
	tty.Close()
	ws, err := os.MkdirTemp("", "maka-tty-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(ws)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// A confined command may not push input into the host's terminal by
	// its path either (an unconfined one has the user's authority, root's
	// CAP_SYS_ADMIN included).
	path := "-"
	if mode != Off {
		if path, err = os.Readlink("/proc/self/fd/0"); err != nil {
			return err
		}
	}
	c, err := Start(context.Background(), Spec{
		Command: ttyPushEnv + "=" + path + " exec " + self + " -test.run=^$", Dir: ws,
		Policy: Policy{Mode: mode, Workspace: ws}, Stdout: os.Stdout, Stderr: os.Stderr,
	})
	if err != nil {
		return err
	}
	if code, _, err := c.Wait(); code != 0 || err != nil {
		return fmt.Errorf("the call exited %d: %v", code, err)
	}
	n, err := unix.IoctlGetInt(0, unix.TIOCINQ)
	if err != nil {
		return err
	}
	fmt.Printf("pending %d\n", n)
	return nil
}

func ttyPush(path string) {
	push := func(name string, fd int) {
		b := byte('x')
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&b))); e != 0 {
			fmt.Printf("%s: %v\n", name, e)
			return
		}
		fmt.Printf("%s: pushed\n", name)
	}
	if fd, err := unix.Open("/dev/tty", unix.O_RDWR, 0); err != nil {
		fmt.Printf("/dev/tty: %v\n", err)
	} else {
		push("/dev/tty", fd)
		unix.Close(fd)
	}
	for fd := range 3 {
		push("fd "+strconv.Itoa(fd), fd)
	}
	if path == "-" {
		return
	}
	if fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOCTTY, 0); err != nil {
		fmt.Printf("%s: %v\n", path, err)
	} else {
		push(path, fd)
		unix.Close(fd)
	}
}

// openPty opens a new pseudo-terminal and returns its two ends, the
// terminal in raw mode (so every byte pushed into it counts as pending).
func openPty(t *testing.T) (master, term *os.File) {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	master = os.NewFile(uintptr(m), "ptmx")
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	term = os.NewFile(uintptr(s), "pts")
	t.Cleanup(func() { term.Close() })
	tio, err := unix.IoctlGetTermios(s, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Lflag &^= unix.ICANON | unix.ECHO | unix.ISIG
	if err := unix.IoctlSetTermios(s, unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	return master, term
}

// A host run in a terminal does not hand it to its calls: a command,
// sandboxed or not, cannot push input into the user's terminal (TIOCSTI)
// through /dev/tty or its descriptors.
func TestCallsCannotPushInputIntoTheHostsTerminal(t *testing.T) {
	if b, err := os.ReadFile("/proc/sys/dev/tty/legacy_tiocsti"); err == nil {
		t.Logf("legacy_tiocsti %s", bytes.TrimSpace(b))
	}
	modes := []Mode{Off}
	if Status().Available {
		modes = append(modes, ReadOnly, WorkspaceWrite)
	}
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			_, term := openPty(t)
			host := exec.Command(os.Args[0], "-test.run=^$")
			host.Env = append(os.Environ(), ttyHostEnv+"="+string(mode))
			host.Stdin = term
			var stdout, stderr bytes.Buffer
			host.Stdout, host.Stderr = &stdout, &stderr
			host.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
			if err := host.Run(); err != nil {
				t.Fatalf("host: %v\nstdout %q\nstderr %q", err, stdout.String(), stderr.String())
			}
			out := stdout.String()
			t.Logf("%s", out)
			if strings.Contains(out, "pushed") || !strings.Contains(out, "pending 0\n") {
				t.Errorf("the command pushed input into the host's terminal:\n%s", out)
			}
			if !strings.Contains(out, "/dev/tty: no such device or address") {
				t.Errorf("the command opened a controlling terminal:\n%s", out)
			}
		})
	}
}
