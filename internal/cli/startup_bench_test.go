package cli_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The start-up benchmarks of `maka run` (docs/benchmarks.md, "Start-up and
// `maka run`"):
//
//	go test -run '^$' -bench 'BenchmarkRun(Warm|Cold)$' -benchtime 40x ./internal/cli/
//
// MAKA_BENCH_BIN runs another maka build instead of this checkout's (for a
// before/after comparison built the same way, with go build). Each run is
// measured by testdata/rusage, a small process that starts maka the way a
// shell does (see there).

// benchMaka is the maka binary the start-up benchmarks run, written back
// to disk first with the maka-host next to it (when there is one): a
// just-built executable's dirty page-cache pages are not those of an
// installed one (see "Memory" in docs/benchmarks.md).
func benchMaka(b *testing.B) string {
	b.Helper()
	p := makaBin
	if env := os.Getenv("MAKA_BENCH_BIN"); env != "" {
		p = env
	}
	for _, exe := range []string{p, filepath.Join(filepath.Dir(p), "maka-host")} {
		f, err := os.Open(exe)
		if err != nil {
			if exe != p && os.IsNotExist(err) {
				continue // a build from before maka-host
			}
			b.Fatal(err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	return p
}

// runSample is one finished `maka run`: its wall time, from start to exit,
// and its peak resident set (rusage maxrss, what /usr/bin/time -v reports).
type runSample struct {
	wall   time.Duration
	maxRSS int64 // bytes
}

// rusageBin builds testdata/rusage once, next to the test-built maka (the
// package's TestMain removes that directory): runOnce measures maka
// through it (see there why).
var rusageBin = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(filepath.Dir(makaBin), "rusage")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(gobin, "build", "-o", bin, "./testdata/rusage")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./testdata/rusage: %v\n%s", err, out)
	}
	return bin, nil
})

func runOnce(b *testing.B, bin string, env []string, args ...string) runSample {
	b.Helper()
	launcher, err := rusageBin()
	if err != nil {
		b.Fatal(err)
	}
	report := filepath.Join(b.TempDir(), "rusage")
	cmd := exec.Command(launcher, append([]string{report, bin}, args...)...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || string(out) != "scripted: ping\n" {
		b.Fatalf("maka %v: %v, output %q, stderr %q", args, err, out, stderr.String())
	}
	text, err := os.ReadFile(report)
	if err != nil {
		b.Fatal(err)
	}
	var wallNS, maxRSSKiB int64
	if _, err := fmt.Sscanf(string(text), "%d %d", &wallNS, &maxRSSKiB); err != nil {
		b.Fatalf("rusage report %q: %v", text, err)
	}
	return runSample{wall: time.Duration(wallNS), maxRSS: maxRSSKiB * 1024} // Linux: KiB
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
