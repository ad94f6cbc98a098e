package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
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
// serve" execs) with the toolchain that built this test; it returns maka.
func buildMaka(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	bin := filepath.Join(dir, "maka")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(gobin, "build", "-o", dir, "github.com/maka-agent/maka/cmd/...")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	// An installed executable has long been written back to disk; one just
	// built has not, and the kernel cannot page out dirty page-cache pages,
	// so without this the host's MADV_PAGEOUT after start frees nothing and
	// the measure counts about 15 MiB of executable that no installed host
	// keeps resident.
	f, err := os.Open(filepath.Join(dir, "maka-host")) // what 'maka host serve' execs
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		tb.Fatal(err)
	}
	return bin
}

func rssKiB(tb testing.TB, pid int) int {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(rest)[0])
			return n
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}

// serveProcess starts `maka host serve` on a fresh root and waits until it
// answers.
func serveProcess(tb testing.TB, bin string) (pid int, root string, endpoint string) {
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
	cmd := exec.Command(bin, "host", "serve", "--root", root, "--idle-grace", "0", "--log-level", "error")
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

// BenchmarkIdleMemory reports the resident memory of an idle host process
// and the extra memory per idle connection, measured with 1,000 of them.
// Run with -benchtime=1x.
func BenchmarkIdleMemory(b *testing.B) {
	bin := buildMaka(b)
	for range b.N {
		pid, root, endpoint := serveProcess(b, bin)
		time.Sleep(500 * time.Millisecond) // let startup garbage be collected
		idle := rssKiB(b, pid)

		const n = 1000
		conns := make([]net.Conn, 0, n)
		for i := range n {
			c, err := net.Dial("unix", endpoint)
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
			fmt.Fprintf(c, `{"kind":"hello","clientInstanceId":"idle-%d","surface":"inspect","protocolMin":0,"protocolMax":0}`+"\n", i)
			if _, err := bufio.NewReader(c).ReadSlice('\n'); err != nil {
				b.Fatal(err)
			}
		}
		res, err := client.Connect(context.Background(), client.Options{RootPath: root, Surface: protocol.SurfaceInspect})
		if err != nil || res.Kind != client.Connected {
			b.Fatal("observer", err)
		}
		st, err := res.Conn.Status(context.Background())
		res.Conn.Close()
		if err != nil || st.Connections != n+1 {
			b.Fatalf("status %+v %v", st, err)
		}
		time.Sleep(500 * time.Millisecond)
		loaded := rssKiB(b, pid)
		for _, c := range conns {
			c.Close()
		}
		b.ReportMetric(float64(idle)/1024, "idle-RSS-MiB")
		b.ReportMetric(float64(loaded-idle)/n, "KiB/idle-conn")
	}
}
