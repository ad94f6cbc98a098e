//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// rawSocketEnv makes the test binary a command that opens a raw ICMP and
// a packet socket and prints one line per attempt.
const rawSocketEnv = "MAKA_SANDBOX_TEST_RAW_SOCKET"

func rawSocketRole() (int, bool) {
	if os.Getenv(rawSocketEnv) == "" {
		return 0, false
	}
	for _, s := range []struct {
		name              string
		domain, typ, prot int
	}{
		{"raw icmp", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP},
		{"packet", unix.AF_PACKET, unix.SOCK_RAW, 0},
	} {
		fd, err := unix.Socket(s.domain, s.typ|unix.SOCK_CLOEXEC, s.prot)
		if err != nil {
			fmt.Printf("%s: %v\n", s.name, err)
			continue
		}
		unix.Close(fd)
		fmt.Printf("%s: opened\n", s.name)
	}
	return 0, true
}

// capSets parses the Cap* lines of a /proc/<pid>/status.
func capSets(t *testing.T, status string) map[string]uint64 {
	t.Helper()
	sets := map[string]uint64{}
	for _, line := range strings.Split(status, "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "Cap") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		sets[name] = n
	}
	if len(sets) != 5 {
		t.Fatalf("capability sets %v in %q", sets, status)
	}
	return sets
}

// A confined command has no capability, whoever runs the host: as root,
// it can open neither a raw nor a packet socket. An unconfined command
// keeps the host's.
func TestConfinedCommandsHaveNoCapabilities(t *testing.T) {
	requireLandlock(t)
	self, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	own := capSets(t, string(self))
	root := os.Getuid() == 0
	t.Logf("the test's capabilities: effective %x, bounding %x (root %v)", own["CapEff"], own["CapBnd"], root)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	command := "cat /proc/self/status; " + rawSocketEnv + "=1 " + exe + " -test.run=^$"
	for _, mode := range []Mode{ReadOnly, WorkspaceWrite, Off} {
		t.Run(string(mode), func(t *testing.T) {
			ws := realTempDir(t)
			code, stdout, stderr := runCall(t, Spec{Command: command, Dir: ws, Policy: Policy{Mode: mode, Workspace: ws}})
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			got := capSets(t, stdout)
			if mode == Off {
				// The control: the probes see what the host has.
				if got["CapEff"] != own["CapEff"] || got["CapBnd"] != own["CapBnd"] {
					t.Errorf("an unconfined command has effective %x and bounding %x, the host %x and %x",
						got["CapEff"], got["CapBnd"], own["CapEff"], own["CapBnd"])
				}
				if root && !strings.Contains(stdout, "raw icmp: opened") {
					t.Errorf("root's unconfined command opened no raw socket:\n%s", stdout)
				}
				return
			}
			for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
				if got[set] != 0 {
					t.Errorf("%s %x, want 0", set, got[set])
				}
			}
			// The bounding set can be emptied where the host may change
			// it (CAP_SETPCAP).
			if own["CapEff"]&(1<<unix.CAP_SETPCAP) != 0 && got["CapBnd"] != 0 {
				t.Errorf("CapBnd %x, want 0", got["CapBnd"])
			}
			if !root {
				return
			}
			for _, s := range []string{"raw icmp", "packet"} {
				if !strings.Contains(stdout, s+": operation not permitted") {
					t.Errorf("%s socket not refused:\n%s", s, stdout)
				}
			}
		})
	}
}
