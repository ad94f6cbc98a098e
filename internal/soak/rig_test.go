package soak_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/protocol"
)

// failAfter bounds every single wait of the tests so that a broken host
// fails a test instead of hanging it; it never orders events.
const failAfter = 30 * time.Second

// rig runs the full host (kernel and domain composition) in process on one
// storage root, and can stop and start it again on the same root.
type rig struct {
	t        *testing.T
	root     string
	cap      *storageroot.Capability
	opts     domain.Options
	hostOpts host.Options
	logs     *logRing

	mu sync.Mutex
	k  *host.Kernel
}

// newRig prepares a rig on root (created if missing) without starting it.
// The root's control directory is removed when the test ends, after every
// host started by the rig has stopped.
func newRig(t *testing.T, root string, opts domain.Options, hostOpts host.Options) *rig {
	t.Helper()
	capability, err := storageroot.Resolve(root, storageroot.KindInteractive)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, root: root, cap: capability, opts: opts, hostOpts: hostOpts, logs: newLogRing(t, 200)}
	t.Cleanup(func() {
		if ns, err := storageroot.ControlNamespace(); err == nil {
			os.RemoveAll(filepath.Join(ns, capability.RootID()))
		}
	})
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("host close at the end of the test: %v", err)
		}
	})
	return r
}

// newRoot returns a fresh storage root path in the test's directory.
func newRoot(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "root")
}

// start starts a host on the rig's root; it fails the test if the host
// does not become ready.
func (r *rig) start() *host.Kernel {
	r.t.Helper()
	owner, err := storageroot.TryAcquireOwner(r.cap)
	if err != nil || owner == nil {
		r.t.Fatalf("owner lock: %v", err)
	}
	opts := r.hostOpts
	opts.Owner = owner
	opts.DisableIdleExit = true
	opts.Logger = r.logs.logger()
	opts.CompositionFactory = domain.Factory(r.cap.Path(), r.logs.logger(), r.opts)
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	k, err := host.Start(ctx, opts)
	if err != nil {
		r.t.Fatalf("host start: %v", err)
	}
	r.mu.Lock()
	r.k = k
	r.mu.Unlock()
	return k
}

// kernel returns the running host.
func (r *rig) kernel() *host.Kernel {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.k
}

// stop closes the running host, if any, and waits for its shutdown.
func (r *rig) stop() error {
	r.mu.Lock()
	k := r.k
	r.k = nil
	r.mu.Unlock()
	if k == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	return k.Close(ctx)
}

// connect opens a client connection to the rig's host; the caller closes
// it.
func (r *rig) connect() (*client.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	res, err := client.Connect(ctx, client.Options{
		RootPath: r.root, Surface: protocol.SurfaceTUI,
		HandshakeTimeout: 10 * time.Second, RequestTimeout: failAfter,
	})
	if err != nil {
		return nil, err
	}
	if res.Kind != client.Connected {
		return nil, errors.Join(errors.New("connect: "+string(res.Kind)+" "+string(res.Reason)), res.Err)
	}
	return res.Conn, nil
}

// dial is connect for the test goroutine: the connection is closed when
// the test ends.
func (r *rig) dial() *client.Conn {
	r.t.Helper()
	c, err := r.connect()
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	return c
}

// logRing keeps the host's last warnings and errors and prints them when
// the test fails.
type logRing struct {
	mu    sync.Mutex
	lines []string
	max   int
}

func newLogRing(t *testing.T, max int) *logRing {
	l := &logRing{max: max}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, line := range l.snapshot() {
			t.Log("host log: " + line)
		}
	})
	return l
}

func (l *logRing) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimRight(string(p), "\n"))
	if len(l.lines) > l.max {
		l.lines = l.lines[len(l.lines)-l.max:]
	}
	return len(p), nil
}

func (l *logRing) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

func (l *logRing) contains(s string) bool {
	for _, line := range l.snapshot() {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

func (l *logRing) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// opCtx returns a context bounded by failAfter for one operation.
func opCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	t.Cleanup(cancel)
	return ctx
}

// createSession creates a session working in dir with the given
// permission mode.
func createSession(ctx context.Context, c *client.Conn, sessionID, dir, mode string) error {
	res, err := c.Call(ctx, protocol.OpSessionCreate, protocol.SessionCreateInput{
		SessionID: sessionID, Workspace: protocol.HostPathWorkspace(dir), Name: "soak " + sessionID,
		PermissionMode: protocol.PermissionMode(mode),
	})
	if err != nil {
		return err
	}
	if sum, ok := res.(protocol.SessionSummary); !ok || string(sum.PermissionMode) != mode {
		return errors.New("session create: unexpected result")
	}
	return nil
}

// workspace returns a fresh workspace directory holding notes.txt.
func workspace(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("soak notes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// transcript reads every page of a session's transcript.
func transcript(ctx context.Context, c *client.Conn, sessionID string) ([]protocol.TranscriptMessage, error) {
	var out []protocol.TranscriptMessage
	in := protocol.SessionTranscriptPageInput{SessionID: sessionID, Limit: protocol.SessionTranscriptMaxLimit}
	for {
		res, err := c.Call(ctx, protocol.OpSessionTranscriptPage, in)
		if err != nil {
			return nil, err
		}
		page, ok := res.(protocol.SessionTranscriptPage)
		if !ok {
			return nil, errors.New("transcript page: unexpected result")
		}
		out = append(out, page.Messages...)
		if page.NextCursor == nil {
			return out, nil
		}
		in.Cursor = *page.NextCursor
	}
}

// assistantText concatenates, in order, the assistant texts of turnID.
func assistantText(msgs []protocol.TranscriptMessage, turnID string) string {
	var b strings.Builder
	for _, m := range msgs {
		if m.TurnID == turnID && m.Role == protocol.TranscriptRoleAssistant {
			b.WriteString(m.Text)
		}
	}
	return b.String()
}

// userTexts returns the user texts of turnID.
func userTexts(msgs []protocol.TranscriptMessage, turnID string) []string {
	var out []string
	for _, m := range msgs {
		if m.TurnID == turnID && m.Role == protocol.TranscriptRoleUser {
			out = append(out, m.Text)
		}
	}
	return out
}

// toolStatuses returns the statuses of the tool results of turnID.
func toolStatuses(msgs []protocol.TranscriptMessage, turnID string) []string {
	var out []string
	for _, m := range msgs {
		if m.TurnID == turnID && m.Role == protocol.TranscriptRoleTool {
			out = append(out, m.Status)
		}
	}
	return out
}
