package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The start-up benchmarks of `maka run` (docs/benchmarks.md, "Start-up and
// `maka run`"):
//
//	go test -run '^$' -bench 'BenchmarkRun(Warm|Cold)$' -benchtime 40x ./internal/cli/
//
// MAKA_BENCH_BIN runs another maka build instead of this checkout's (for a
// before/after comparison built the same way, with go build).

// benchMaka is the maka binary the start-up benchmarks run, written back
// to disk first: a just-built executable's dirty page-cache pages are not
// those of an installed one (see "Memory" in docs/benchmarks.md).
func benchMaka(b *testing.B) string {
	b.Helper()
	p := makaBin
	if env := os.Getenv("MAKA_BENCH_BIN"); env != "" {
		p = env
	}
	f, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return p
}

// runSample is one finished `maka run`: its wall time, from start to exit,
// and its peak resident set (rusage maxrss, what /usr/bin/time -v reports).
type runSample struct {
	wall   time.Duration
	maxRSS int64 // bytes
}

func runOnce(b *testing.B, bin string, env []string, args ...string) runSample {
	b.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	begin := time.Now()
	out, err := cmd.Output()
	wall := time.Since(begin)
	if err != nil || string(out) != "scripted: ping\n" {
		b.Fatalf("maka %v: %v, output %q, stderr %q", args, err, out, stderr.String())
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		b.Fatal("no rusage")
	}
	return runSample{wall: wall, maxRSS: ru.Maxrss * 1024} // Linux: KiB
}

// reportRuns reports the p50 and p90 wall times and the p50 peak RSS.
func reportRuns(b *testing.B, samples []runSample) {
	walls := make([]time.Duration, len(samples))
	rss := make([]int64, len(samples))
	for i, s := range samples {
		walls[i], rss[i] = s.wall, s.maxRSS
	}
	slices.Sort(walls)
	slices.Sort(rss)
	at := func(p float64) int { return int(p * float64(len(samples)-1)) }
	b.ReportMetric(float64(walls[at(0.5)].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(walls[at(0.9)].Microseconds())/1000, "p90-ms")
	b.ReportMetric(float64(rss[at(0.5)])/(1<<20), "p50-maxrss-MiB")
}

// benchScript writes the echo model script and returns its path.
func benchScript(b *testing.B) string {
	script := filepath.Join(b.TempDir(), "script.json")
	if err := os.WriteFile(script, []byte(echoScript), 0o600); err != nil {
		b.Fatal(err)
	}
	return script
}

// BenchmarkRunWarm measures a trivial `maka run` (scripted model, one
// turn) against a host that is already up: the whole process, start to
// exit, and its peak RSS.
func BenchmarkRunWarm(b *testing.B) {
	bin, script := benchMaka(b), benchScript(b)
	env := append(os.Environ(), "XDG_CONFIG_HOME="+b.TempDir())
	root := filepath.Join(b.TempDir(), "root")
	// The first run starts the host; it stays up for the benchmark.
	runOnce(b, bin, env, "run", "--root", root, "--host-arg=--model-script="+script, "--host-arg=--idle-grace=2m", "ping")
	b.Cleanup(func() { stopBenchHost(b, root) })
	samples := make([]runSample, 0, b.N)
	b.ResetTimer()
	for range b.N {
		samples = append(samples, runOnce(b, bin, env, "run", "--root", root, "ping"))
	}
	b.StopTimer()
	reportRuns(b, samples)
}

// BenchmarkRunCold measures a trivial `maka run` on a root without a host:
// the process starts the host, runs the turn and exits. Every iteration
// uses a fresh root and stops its host afterwards.
func BenchmarkRunCold(b *testing.B) {
	bin, script := benchMaka(b), benchScript(b)
	env := append(os.Environ(), "XDG_CONFIG_HOME="+b.TempDir())
	samples := make([]runSample, 0, b.N)
	b.ResetTimer()
	for range b.N {
		root := filepath.Join(b.TempDir(), "root")
		samples = append(samples, runOnce(b, bin, env, "run", "--root", root, "--host-arg=--model-script="+script, "--host-arg=--idle-grace=10s", "ping"))
		b.StopTimer()
		stopBenchHost(b, root)
		b.StartTimer()
	}
	b.StopTimer()
	reportRuns(b, samples)
}
