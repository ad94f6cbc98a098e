package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/protocol"
)

// buildMaka builds the executables (maka, and maka-host which "maka host
// serve" execs) with the toolchain that built this test and returns maka;
// when MAKA_BENCH_BIN names a maka executable it uses that one instead (to
// compare two builds with the same benchmark; an older single executable
// serves the host itself).
func buildMaka(tb testing.TB) string {
	tb.Helper()
	bin := os.Getenv("MAKA_BENCH_BIN")
	dir := filepath.Dir(bin)
	if bin == "" {
		dir = tb.TempDir()
		bin = filepath.Join(dir, "maka")
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		cmd := exec.Command(gobin, "build", "-o", dir, "github.com/maka-agent/maka/cmd/...")
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
		if out, err := cmd.CombinedOutput(); err != nil {
			tb.Fatalf("go build: %v\n%s", err, out)
		}
	}
	// An installed executable has long been written back to disk; one just
	// built has not, and the kernel cannot page out dirty page-cache pages,
	// so without this the host's MADV_PAGEOUT after start frees nothing and
	// the measure counts about 15 MiB of executable that no installed host
	// keeps resident.
	served := filepath.Join(dir, "maka-host") // what 'maka host serve' execs
	if _, err := os.Stat(served); err != nil {
		served = bin // a single executable that serves the host itself
	}
	f, err := os.Open(served)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		tb.Fatal(err)
	}
	return bin
}

// procMemory is a process's resident memory from /proc/PID/status: all of
// it (VmRSS) and its private part (RssAnon: heap, stacks, runtime; the rest
// is clean executable and library pages the kernel can drop and share).
type procMemory struct{ rss, anon int }

func readMemory(tb testing.TB, pid int) procMemory {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	var m procMemory
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		for key, dst := range map[string]*int{"VmRSS:": &m.rss, "RssAnon:": &m.anon} {
			if rest, ok := strings.CutPrefix(line, key); ok {
				*dst, _ = strconv.Atoi(strings.Fields(rest)[0])
				found++
			}
		}
	}
	if found != 2 {
		tb.Fatalf("/proc/%d/status has no VmRSS or RssAnon", pid)
	}
	return m
}

// serveProcess starts `maka host serve` on a fresh root and waits until it
// answers.
func serveProcess(tb testing.TB, bin string, args ...string) (pid int, root string, endpoint string) {
	tb.Helper()
	root = filepath.Join(tb.TempDir(), "root")
	capability, err := storageroot.Resolve(root, storageroot.KindInteractive)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if ns, err := storageroot.ControlNamespace(); err == nil {
			os.RemoveAll(filepath.Join(ns, capability.RootID()))
		}
	})
	var stderr bytes.Buffer
	cmd := exec.Command(bin, append([]string{"host", "serve", "--root", root, "--idle-grace", "0", "--log-level", "error"}, args...)...)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		res, err := client.Connect(context.Background(), client.Options{RootPath: root, Surface: protocol.SurfaceInspect})
		if err == nil && res.Kind == client.Connected {
			st, err := res.Conn.Status(context.Background())
			res.Conn.Close()
			if err == nil && st.State == protocol.StateReady {
				return cmd.Process.Pid, root, res.Registration.Endpoint
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("host did not become ready: %s", stderr.String())
	return 0, "", ""
}
