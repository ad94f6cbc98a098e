// Command peers measures maka beside three other agent clients (Codex
// CLI, Claude Code, opencode), each installed from the npm registry into
// a reused prefix and run with its own temporary HOME against the
// benchmark's fake model on the loopback: a trivial one-shot turn, a turn
// with one shell call, 20 turns of one session, the client's peak RSS and
// CPU, the daemon's idle memory, and the bytes each sends to the model
// for the trivial turn. It is run by hand (docs/benchmarks.md, "Beside
// the peers"):
//
//	GOTOOLCHAIN=go1.27.3 go run ./internal/bench/peers
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/maka-agent/maka/internal/modeltest"
)

type options struct {
	dir, codex, claude, opencode, maka, peers, dump string
	n, shellN, turns                                int
	install, keep                                   bool
	timeout                                         time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.dir, "dir", filepath.Join(os.TempDir(), "maka-bench-peers"), "npm prefix the peers are installed into (reused between runs)")
	flag.StringVar(&o.codex, "codex", "latest", "version of @openai/codex to install")
	flag.StringVar(&o.claude, "claude", "latest", "version of @anthropic-ai/claude-code to install")
	flag.StringVar(&o.opencode, "opencode", "latest", "version of opencode-ai to install")
	flag.BoolVar(&o.install, "install", true, "run npm install (false: use what -dir holds)")
	flag.StringVar(&o.maka, "maka", "", "maka executable, with maka-host beside it (default: build ./cmd/...)")
	flag.StringVar(&o.peers, "peers", "maka,codex,claude,opencode", "clients to measure")
	flag.IntVar(&o.n, "n", 5, "runs of the trivial turn (median)")
	flag.IntVar(&o.shellN, "shell-n", 3, "runs of the shell-call turn (median)")
	flag.IntVar(&o.turns, "turns", 20, "turns of the one-session run")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Minute, "limit of one client run")
	flag.BoolVar(&o.keep, "keep", false, "keep the peers' temporary homes and workspaces (their logs) and print where")
	flag.StringVar(&o.dump, "dump", "", "write every request body the fake model receives into this directory")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := bench(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

// result is what was measured of one client.
type result struct {
	p                 *peer
	trivial, shell    usage // medians
	cold              usage // maka: the trivial turn when the client starts the host
	session           time.Duration
	sessionTurns      int
	requests, bytes   int // of the first measured trivial turn
	log               []modeltest.Logged
	daemonKiB         int64
	daemonNote        string
	hostCPU           time.Duration // maka: the host's CPU per trivial turn
	shellRan          bool
	shellTool, failed string
}

func bench(ctx context.Context, o options) error {
	var cleanup cleanups
	defer cleanup.run()
	base, err := os.MkdirTemp("", "maka-bench-peers-run-")
	if err != nil {
		return err
	}
	cleanup.Cleanup(func() {
		if o.keep {
			fmt.Fprintf(os.Stderr, "kept %s\n", base)
			return
		}
		os.RemoveAll(base)
	})
	if o.dump != "" {
		if err := os.MkdirAll(o.dump, 0o755); err != nil {
			return err
		}
	}
	f := newFake(&cleanup, o.dump)
	url := f.srv.URL
	fmt.Fprintf(os.Stderr, "fake model at %s\n", url)

	inst := &install{dir: o.dir}
	want := strings.Split(o.peers, ",")
	var peers []*peer
	var skipped []string
	for _, name := range want {
		var p *peer
		var err error
		switch name {
		case "maka":
			bin := o.maka
			if bin == "" {
				fmt.Fprintln(os.Stderr, "building ./cmd/...")
				bin, err = buildMaka(ctx, base)
			}
			if err == nil {
				p, err = makaPeer(ctx, base, bin, url, &cleanup)
			}
		case "codex", "claude", "opencode":
			pkg, version := map[string]string{"codex": "@openai/codex", "claude": "@anthropic-ai/claude-code", "opencode": "opencode-ai"}[name],
				map[string]string{"codex": o.codex, "claude": o.claude, "opencode": o.opencode}[name]
			if o.install {
				fmt.Fprintf(os.Stderr, "npm install %s@%s\n", pkg, version)
				err = inst.npmInstall(ctx, pkg, version)
			}
			if err == nil {
				switch name {
				case "codex":
					p, err = codexPeer(base, inst, url)
				case "claude":
					p, err = claudePeer(base, inst, url)
				default:
					p, err = opencodePeer(base, inst, url)
				}
			}
		default:
			err = fmt.Errorf("unknown client")
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "skipping %s: %v\n", name, err)
			skipped = append(skipped, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		peers = append(peers, p)
	}
	var results []*result
	for _, p := range peers {
		fmt.Fprintf(os.Stderr, "measuring %s %s\n", p.name, p.version)
		r := measure(ctx, o, f, p)
		if r.failed != "" {
			fmt.Fprintf(os.Stderr, "%s failed: %s\n", p.name, r.failed)
		}
		results = append(results, r)
	}
	printTable(o, results, skipped)
	return nil
}

// measure runs every scenario of one client; the first failure ends it.
func measure(ctx context.Context, o options, f *fake, p *peer) *result {
	r := &result{p: p}
	once := func(argv []string) (usage, error) {
		c, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		u, _, err := run(c, p.work, p.env, argv)
		return u, err
	}
	// the daemon first, on a fresh start, before any turn
	r.daemonKiB = p.idleKiB
	if p.daemon != nil {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		pid, stop, err := p.daemon(c)
		cancel()
		if err != nil {
			r.daemonNote = "failed: " + err.Error()
		} else {
			time.Sleep(time.Second) // let it settle (maka pages out its startup after 200 ms)
			r.daemonKiB = treeRSS(pid)
			stop()
		}
	}
	// one warm-up turn (caches, first-run files), not counted
	if _, err := once(p.first(trivialPrompt)); err != nil {
		r.failed = "warm-up: " + err.Error()
		return r
	}
	var trivial []usage
	var host time.Duration
	for i := range o.n {
		mark := f.mark()
		before := cpuTime(p.hostPID)
		u, err := once(p.first(trivialPrompt))
		if p.hostPID != 0 {
			host += cpuTime(p.hostPID) - before
		}
		if err != nil {
			r.failed = "trivial: " + err.Error()
			return r
		}
		if i == 0 {
			r.log = f.since(mark)
			for _, l := range r.log {
				r.requests++
				r.bytes += l.Bytes
			}
		}
		trivial = append(trivial, u)
	}
	r.trivial = median(trivial)
	if p.hostPID != 0 && o.n > 0 {
		r.hostCPU = host / time.Duration(o.n)
	}
	if p.cold != nil {
		var cold []usage
		for range o.n {
			u, err := once(p.cold(trivialPrompt))
			if err != nil {
				r.failed = "cold: " + err.Error()
				return r
			}
			if _, err := once(p.stopCold); err != nil {
				r.failed = "cold host stop: " + err.Error()
				return r
			}
			cold = append(cold, u)
		}
		r.cold = median(cold)
	}
	calls0, ran0 := f.shellStats()
	var shell []usage
	for range o.shellN {
		u, err := once(p.first(shellPrompt))
		if err != nil {
			r.failed = "shell: " + err.Error()
			return r
		}
		shell = append(shell, u)
	}
	r.shell = median(shell)
	calls, ran := f.shellStats()
	r.shellRan = ran-ran0 == o.shellN
	for name, n := range calls {
		if n > calls0[name] {
			r.shellTool = name
		}
	}
	start := time.Now()
	for i := range o.turns {
		argv := p.cont(trivialPrompt)
		if i == 0 {
			argv = p.first(trivialPrompt)
		}
		if _, err := once(argv); err != nil {
			r.failed = fmt.Sprintf("session turn %d: %v", i+1, err)
			return r
		}
		r.sessionTurns++
	}
	r.session = time.Since(start)
	return r
}

// median returns the run with the median wall time, and the median of
// each other figure on its own.
func median(us []usage) usage {
	if len(us) == 0 {
		return usage{}
	}
	pick := func(get func(usage) int64) int64 {
		v := make([]int64, len(us))
		for i, u := range us {
			v[i] = get(u)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return usage{
		wall:   time.Duration(pick(func(u usage) int64 { return int64(u.wall) })),
		maxRSS: pick(func(u usage) int64 { return u.maxRSS }),
		cpu:    time.Duration(pick(func(u usage) int64 { return int64(u.cpu) })),
	}
}

func printTable(o options, results []*result, skipped []string) {
	var maka *result
	for _, r := range results {
		if r.p.name == "maka" {
			maka = r
		}
	}
	fmt.Printf("\n%s, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), machine())
	fmt.Println("In brackets: maka's figure ÷ the peer's (below 1: maka's is smaller).")
	fmt.Println()
	cols := []string{"measure"}
	for _, r := range results {
		cols = append(cols, r.p.name+" "+r.p.version)
	}
	fmt.Println("| " + strings.Join(cols, " | ") + " |")
	fmt.Println("|" + strings.Repeat("---|", len(cols)))
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	mib := func(k int64) string { return fmt.Sprintf("%.1f MiB", float64(k)/1024) }
	row := func(name string, val func(*result) (string, float64, bool)) {
		cells := []string{name}
		mv := 0.0
		if maka != nil {
			_, mv, _ = val(maka)
		}
		for _, r := range results {
			s, v, ok := val(r)
			if !ok {
				cells = append(cells, s)
				continue
			}
			if r != maka && maka != nil && v > 0 && mv > 0 {
				s += fmt.Sprintf(" (%.2g×)", mv/v)
			}
			cells = append(cells, s)
		}
		fmt.Println("| " + strings.Join(cells, " | ") + " |")
	}
	row(fmt.Sprintf("trivial turn, wall (median of %d)", o.n), func(r *result) (string, float64, bool) {
		if r.trivial.wall == 0 {
			return "failed", 0, false
		}
		return ms(r.trivial.wall), float64(r.trivial.wall), true
	})
	row(fmt.Sprintf("trivial turn, the client starts the host, wall (maka only, median of %d)", o.n), func(r *result) (string, float64, bool) {
		if r.cold.wall == 0 {
			return "n/a", 0, false
		}
		return ms(r.cold.wall), 0, false
	})
	row(fmt.Sprintf("shell-call turn, wall (median of %d)", o.shellN), func(r *result) (string, float64, bool) {
		if r.shell.wall == 0 {
			return "failed", 0, false
		}
		s := ms(r.shell.wall)
		if !r.shellRan {
			s += " (command output not seen)"
		}
		return s, float64(r.shell.wall), true
	})
	row(fmt.Sprintf("%d turns of one session, wall", o.turns), func(r *result) (string, float64, bool) {
		if r.session == 0 {
			return "failed", 0, false
		}
		return ms(r.session), float64(r.session), true
	})
	row("client peak RSS, trivial turn (median)", func(r *result) (string, float64, bool) {
		if r.trivial.maxRSS == 0 {
			return "failed", 0, false
		}
		return mib(r.trivial.maxRSS), float64(r.trivial.maxRSS), true
	})
	row("client CPU user+sys, trivial turn (median)", func(r *result) (string, float64, bool) {
		if r.trivial.wall == 0 {
			return "failed", 0, false
		}
		return ms(r.trivial.cpu), float64(r.trivial.cpu), true
	})
	row("client CPU user+sys, shell-call turn (median)", func(r *result) (string, float64, bool) {
		if r.shell.wall == 0 {
			return "failed", 0, false
		}
		return ms(r.shell.cpu), float64(r.shell.cpu), true
	})
	row("host CPU per trivial turn (maka only)", func(r *result) (string, float64, bool) {
		if r.p.hostPID == 0 {
			return "n/a", 0, false
		}
		return ms(r.hostCPU), 0, false
	})
	row("daemon idle RSS", func(r *result) (string, float64, bool) {
		if r.p.daemon == nil && r.p.idleKiB == 0 {
			return "n/a", 0, false
		}
		if r.daemonKiB == 0 {
			return r.daemonNote, 0, false
		}
		return mib(r.daemonKiB), float64(r.daemonKiB), true
	})
	row("requests to the model, trivial turn", func(r *result) (string, float64, bool) {
		if r.requests == 0 {
			return "failed", 0, false
		}
		return fmt.Sprint(r.requests), float64(r.requests), true
	})
	row("bytes sent to the model, trivial turn", func(r *result) (string, float64, bool) {
		if r.requests == 0 {
			return "failed", 0, false
		}
		return fmt.Sprintf("%d", r.bytes), float64(r.bytes), true
	})
	fmt.Println()
	for _, r := range results {
		tool := r.shellTool
		if tool == "" {
			tool = "none"
		}
		var reqs []string
		for _, l := range r.log {
			reqs = append(reqs, fmt.Sprintf("%s %s %d B", l.Method, l.Path, l.Bytes))
		}
		fmt.Printf("- %s: shell tool %s; rusage counts %s; the trivial turn's requests: %s",
			r.p.name, tool, r.p.counted, strings.Join(reqs, ", "))
		if r.failed != "" {
			fmt.Printf("; FAILED: %s", r.failed)
		}
		fmt.Println()
	}
	for _, s := range skipped {
		fmt.Printf("- skipped %s\n", s)
	}
}

// machine describes the machine the run is on.
func machine() string {
	cpu := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	load := "?"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return fmt.Sprintf("%d CPU (%s), load average %s", numCPU(), cpu, load)
}
