package client_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/internal/transport"
	"github.com/maka-agent/maka/protocol"
)

// inProcessSpawner is a fake launcher: each launch tries to become the
// root's host inside the test process, on a goroutine, like a candidate
// process would (the owner lock decides; a loser just ends).
type inProcessSpawner struct {
	t *testing.T

	mu       sync.Mutex
	launches int
	winners  []*host.Kernel
	losers   int
	args     [][]string
	wg       sync.WaitGroup
	// gate, if set, holds every candidate until it is closed.
	gate <-chan struct{}
}

func newInProcessSpawner(t *testing.T) *inProcessSpawner {
	sp := &inProcessSpawner{t: t}
	t.Cleanup(func() {
		sp.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		sp.mu.Lock()
		defer sp.mu.Unlock()
		for _, k := range sp.winners {
			if err := k.Close(ctx); err != nil {
				t.Errorf("host close: %v", err)
			}
		}
	})
	return sp
}

func (sp *inProcessSpawner) launch(_ context.Context, c client.Candidate) error {
	sp.mu.Lock()
	sp.launches++
	sp.args = append(sp.args, c.Args)
	sp.mu.Unlock()
	sp.wg.Add(1)
	go func() {
		defer sp.wg.Done()
		if sp.gate != nil {
			<-sp.gate
		}
		capability, err := storageroot.ResolveExisting(c.RootPath, storageroot.KindInteractive, c.RootID)
		if err != nil {
			sp.t.Errorf("candidate: resolve root: %v", err)
			return
		}
		owner, err := storageroot.TryAcquireOwner(capability)
		if err != nil {
			sp.t.Errorf("candidate: lock: %v", err)
			return
		}
		if owner == nil {
			sp.mu.Lock()
			sp.losers++
			sp.mu.Unlock()
			return
		}
		k, err := host.Start(context.Background(), host.Options{Owner: owner, IdleGrace: host.MaxTimerDuration})
		if err != nil {
			sp.t.Errorf("candidate: start: %v", err)
			return
		}
		sp.mu.Lock()
		sp.winners = append(sp.winners, k)
		sp.mu.Unlock()
	}()
	return nil
}

func TestConnectOrSpawnManyCallersStartOneHost(t *testing.T) {
	root, capability := newRoot(t)
	sp := newInProcessSpawner(t)
	const callers = 12
	results := make([]client.SpawnResult, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = client.ConnectOrSpawn(testContext(t), client.Options{RootPath: root, Surface: protocol.SurfaceRun},
				client.SpawnOptions{Launch: sp.launch, Deadline: 10 * time.Second})
		}()
	}
	close(start)
	wg.Wait()
	epochs := map[string]int{}
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if res.Kind != client.Connected {
			t.Fatalf("caller %d: %s (%s), last %+v", i, res.Kind, res.Failure, res.Last)
		}
		epochs[res.Conn.HostEpoch()]++
		requireUsable(t, res.Conn)
		res.Conn.Close()
		if res.RootID != capability.RootID() || res.RootPath != capability.Path() {
			t.Errorf("caller %d: root %s %s, want %s %s", i, res.RootPath, res.RootID, capability.Path(), capability.RootID())
		}
	}
	sp.wg.Wait()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if len(sp.winners) != 1 {
		t.Fatalf("%d hosts started, want 1", len(sp.winners))
	}
	if len(epochs) != 1 {
		t.Fatalf("callers reached %d host epochs, want 1: %v", len(epochs), epochs)
	}
	if _, ok := epochs[sp.winners[0].HostEpoch()]; !ok {
		t.Fatalf("callers reached %v, not the winner %s", epochs, sp.winners[0].HostEpoch())
	}
	if sp.launches < 1 || sp.losers != sp.launches-1 {
		t.Fatalf("%d launches, %d losers, want every launch but one to lose", sp.launches, sp.losers)
	}
	want := client.HostServeArgs(capability.Path(), capability.RootID())
	for _, args := range sp.args {
		if strings.Join(args, " ") != strings.Join(want, " ") {
			t.Fatalf("candidate args %q, want %q", args, want)
		}
	}
}

func TestConnectOrSpawnReusesARunningHost(t *testing.T) {
	f := startHost(t, nil)
	sp := newInProcessSpawner(t)
	res, err := client.ConnectOrSpawn(testContext(t), client.Options{RootPath: f.root, Surface: protocol.SurfaceRun},
		client.SpawnOptions{Launch: sp.launch})
	if err != nil || res.Kind != client.Connected {
		t.Fatalf("%+v %v", res, err)
	}
	defer res.Conn.Close()
	if res.Conn.HostEpoch() != f.kernel.HostEpoch() || res.Launched != 0 || sp.launches != 0 {
		t.Fatalf("epoch %s (host %s), %d launches", res.Conn.HostEpoch(), f.kernel.HostEpoch(), sp.launches)
	}
}

func TestConnectOrSpawnDeadline(t *testing.T) {
	root, _ := newRoot(t)
	var mu sync.Mutex
	launches := 0
	const deadline = 400 * time.Millisecond
	begin := time.Now()
	res, err := client.ConnectOrSpawn(testContext(t), client.Options{RootPath: root, Surface: protocol.SurfaceRun},
		client.SpawnOptions{Deadline: deadline, Launch: func(context.Context, client.Candidate) error {
			mu.Lock()
			launches++
			mu.Unlock()
			return nil // a candidate that never comes up
		}})
	elapsed := time.Since(begin)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != client.Failed || res.Failure != client.StartupTimeout || res.Conn != nil {
		t.Fatalf("result %+v, want failed/startup_timeout", res)
	}
	if elapsed < deadline || elapsed > deadline+2*time.Second {
		t.Fatalf("gave up after %v, want about %v", elapsed, deadline)
	}
	// One launch per LaunchInterval at most: at 0, 250 ms (and never more
	// than the deadline allows).
	maxLaunches := int(deadline/client.LaunchInterval) + 1
	if launches < 1 || launches > maxLaunches || res.Launched != launches {
		t.Fatalf("%d launches (result says %d), want 1..%d", launches, res.Launched, maxLaunches)
	}
	if res.Last.Kind != client.Unavailable || res.Last.Reason != client.NotRegistered {
		t.Fatalf("last attempt %+v, want unavailable/not_registered", res.Last)
	}
}

func TestConnectOrSpawnLaunchErrorsAreReported(t *testing.T) {
	root, _ := newRoot(t)
	boom := errors.New("no such binary")
	res, err := client.ConnectOrSpawn(testContext(t), client.Options{RootPath: root, Surface: protocol.SurfaceRun},
		client.SpawnOptions{Deadline: 100 * time.Millisecond, Launch: func(context.Context, client.Candidate) error { return boom }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != client.Failed || !errors.Is(res.LaunchErr, boom) || res.Launched != 0 {
		t.Fatalf("result %+v", res)
	}
	if !strings.Contains(res.String(), "no such binary") {
		t.Fatalf("description %q does not carry the launch error", res.String())
	}
}

func TestConnectOrSpawnUnresponsiveHost(t *testing.T) {
	// The registered host accepts the socket but never answers the hello.
	root, _ := startScriptedHost(t, func(tc *transport.Conn) bool {
		_, _ = tc.ReadFrame(0)
		return false
	}, nil)
	launched := make(chan struct{}, 64)
	res, err := client.ConnectOrSpawn(testContext(t),
		client.Options{RootPath: root, Surface: protocol.SurfaceRun, HandshakeTimeout: 50 * time.Millisecond},
		client.SpawnOptions{Deadline: time.Second, Launch: func(context.Context, client.Candidate) error {
			launched <- struct{}{}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != client.Failed || res.Failure != client.HostUnresponsive {
		t.Fatalf("result %+v, want failed/host_unresponsive", res)
	}
	// The last attempt timed out in its handshake, or (on a loaded
	// machine) in its dial, cut by the election deadline.
	if res.Last.Reason != client.HandshakeFailed && res.Last.Reason != client.ConnectFailed {
		t.Fatalf("last attempt %+v", res.Last)
	}
}

func TestConnectOrSpawnIncompatibleHost(t *testing.T) {
	for _, tc := range []struct {
		replacement string
		want        client.ResultKind
	}{
		{protocol.ReplacementBlockedByResidency, client.Incompatible},
		{protocol.ReplacementWaitForIdleExit, client.Failed},
	} {
		t.Run(tc.replacement, func(t *testing.T) {
			epoch := make(chan string, 1)
			root, fh := startScriptedHost(t, func(c *transport.Conn) bool {
				e := <-epoch
				epoch <- e
				_ = c.WriteValue(protocol.Incompatible{Kind: protocol.KindIncompatible, HostEpoch: e, ProtocolMin: 5, ProtocolMax: 5,
					State: protocol.StateReady, Replacement: tc.replacement})
				return false
			}, nil)
			epoch <- fh.epoch
			launches := 0
			res, err := client.ConnectOrSpawn(testContext(t), client.Options{RootPath: root, Surface: protocol.SurfaceRun},
				client.SpawnOptions{Deadline: 200 * time.Millisecond, Launch: func(context.Context, client.Candidate) error {
					launches++
					return nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Kind != tc.want {
				t.Fatalf("result %+v, want %s", res, tc.want)
			}
			if launches != 0 {
				t.Fatalf("%d candidates launched against an incompatible host, want none", launches)
			}
			if tc.want == client.Incompatible && (res.Handshake == nil || res.Handshake.Replacement != tc.replacement) {
				t.Fatalf("handshake %+v", res.Handshake)
			}
		})
	}
}

func TestConnectOrSpawnContextCancel(t *testing.T) {
	root, _ := newRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	launched := make(chan struct{})
	var once sync.Once
	go func() {
		<-launched
		cancel()
	}()
	_, err := client.ConnectOrSpawn(ctx, client.Options{RootPath: root, Surface: protocol.SurfaceRun},
		client.SpawnOptions{Deadline: 30 * time.Second, Launch: func(context.Context, client.Candidate) error {
			once.Do(func() { close(launched) })
			return nil
		}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

func TestConnectOrSpawnInvalidOptions(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, so := range []client.SpawnOptions{
		{Deadline: -time.Second, Executable: "/bin/true"},
		{Deadline: client.MaxElectionDeadline + time.Second, Executable: "/bin/true"},
		{IdleGrace: -time.Second, Executable: "/bin/true"},
	} {
		if _, err := client.ConnectOrSpawn(testContext(t), client.Options{RootPath: missing, Surface: protocol.SurfaceRun}, so); err == nil {
			t.Errorf("options %+v accepted", so)
		}
	}
	if _, err := os.Lstat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("invalid options created the root: %v", err)
	}
}

func TestDefaultCandidateArguments(t *testing.T) {
	root, capability := newRoot(t)
	var got client.Candidate
	_, err := client.ConnectOrSpawn(testContext(t), client.Options{RootPath: root, Surface: protocol.SurfaceRun},
		client.SpawnOptions{Deadline: 30 * time.Millisecond, Executable: "/opt/maka", IdleGrace: 1500 * time.Millisecond,
			ExtraArgs: []string{"--model-script", "/s.json"},
			Launch:    func(_ context.Context, c client.Candidate) error { got = c; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	want := append(client.HostServeArgs(capability.Path(), capability.RootID()), "--idle-grace", "1.5s", "--model-script", "/s.json")
	if got.Executable != "/opt/maka" || strings.Join(got.Args, "\x00") != strings.Join(want, "\x00") {
		t.Fatalf("candidate %s %q, want /opt/maka %q", got.Executable, got.Args, want)
	}
	if got.LogFile != filepath.Join(controlDir(t, capability), client.HostLogFile) || got.Dir != "/" {
		t.Fatalf("candidate log %s dir %s", got.LogFile, got.Dir)
	}
}

func TestLaunchDetached(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "host.log")
	if err := os.WriteFile(logFile, []byte("earlier\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The child reports its stdin, its session and process group leadership.
	script := `read -r line; echo "stdin=[$line]"; echo "to stderr" >&2; ` +
		`test "$(ps -o sid= -p $$ | tr -d ' ')" = "$$" && echo "own session"; exit 2`
	pid, exited, err := client.LaunchDetached(client.Candidate{
		Executable: "/bin/sh", Args: []string{"-c", script}, Dir: "/", LogFile: logFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	if pid <= 0 {
		t.Fatalf("pid %d", pid)
	}
	within(t, exited, "launched process was not reaped")
	f, err := os.Open(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	got := strings.Join(lines, "|")
	for _, want := range []string{"earlier", "stdin=[]", "to stderr", "own session"} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q lacks %q", got, want)
		}
	}
	st, err := os.Stat(logFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("log mode %v %v", st.Mode(), err)
	}

	if _, _, err := client.LaunchDetached(client.Candidate{Executable: filepath.Join(dir, "missing"), LogFile: logFile}); err == nil {
		t.Fatal("launching a missing executable succeeded")
	}
}
