package soak_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/protocol"
)

// Sizes of TestDiskFull: the tmpfs holding the storage root, and the text
// the big turn streams once the disk is full (more than the whole disk).
const (
	diskSize      = 16 << 20
	diskTextBytes = 2 * diskSize
)

// diskProvider answers "small ..." at once; a "big ..." turn streams a
// first text, waits at a gate, then streams diskTextBytes of text.
type diskProvider struct {
	reached chan struct{} // closed when a big turn waits at the gate
	once    sync.Once
	release chan struct{}
}

func (p *diskProvider) Stream(ctx context.Context, req model.Request, emit func(model.Event) error) (model.Finish, error) {
	last := ""
	for _, m := range req.Messages {
		if m.Role == model.RoleUser {
			last = m.Text
		}
	}
	if !strings.HasPrefix(last, "big") {
		if err := emit(model.Event{Kind: model.EventText, Text: "small answer to " + last}); err != nil {
			return model.Finish{}, err
		}
		return model.Finish{Reason: model.FinishStop}, nil
	}
	if err := emit(model.Event{Kind: model.EventText, Text: "before the disk filled. "}); err != nil {
		return model.Finish{}, err
	}
	p.once.Do(func() { close(p.reached) })
	select {
	case <-p.release:
	case <-ctx.Done():
		return model.Finish{}, context.Cause(ctx)
	}
	chunk := strings.Repeat("0123456789abcdef", 1024)
	for sent := 0; sent < diskTextBytes; sent += len(chunk) {
		if err := emit(model.Event{Kind: model.EventText, Text: chunk}); err != nil {
			return model.Finish{}, err
		}
		pause(ctx, 5*time.Millisecond)
		if ctx.Err() != nil {
			return model.Finish{}, context.Cause(ctx)
		}
	}
	return model.Finish{Reason: model.FinishStop}, nil
}

// mountTmpfs mounts a tmpfs of size bytes at a fresh directory, or skips
// the test when it cannot. It is unmounted when the test ends (after
// everything registered later has been cleaned up).
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700,size="+strconv.Itoa(size)); err != nil {
		t.Skipf("cannot mount a tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

// fillDisk writes a file in dir until the file system is full and returns
// its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, size := range []int{1 << 20, 4096, 1} {
		buf := make([]byte, size)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("filling the disk: %v", err)
				}
				break
			}
		}
	}
	return path
}

// waitEnd waits until turnID of sessionID is terminal or the host has
// shut down (drained); snap is the terminal snapshot when the turn ended
// first.
func waitEnd(t *testing.T, c *client.Conn, k *host.Kernel, sessionID, turnID string) (snap *protocol.TurnSnapshot, drained bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	for {
		select {
		case <-k.Done():
			return nil, true
		default:
		}
		sub, err := c.OpenSubscription(ctx, sessionID)
		if err != nil {
			break // the host is going away
		}
		if rt := sub.Open.Snapshot.RootTurn; rt != nil && rt.TurnID == turnID && rt.Status.Terminal() {
			return rt, false
		}
		for {
			frame, err := sub.Next(ctx)
			if err != nil {
				break // evicted by the flood of deltas, or the host went away: look again
			}
			if p, ok := frame.(protocol.ProjectionFrame); ok {
				if rt := p.Snapshot.RootTurn; rt != nil && rt.TurnID == turnID && rt.Status.Terminal() {
					_ = sub.Close(ctx)
					return rt, false
				}
			}
		}
		_ = sub.Close(ctx)
		if ctx.Err() != nil {
			t.Fatalf("turn %s/%s neither ended nor did the host drain within %v", sessionID, turnID, failAfter)
		}
		if c.Err() != nil {
			break
		}
	}
	select {
	case <-k.Done():
		return nil, true
	case <-ctx.Done():
		t.Fatalf("the connection ended but the host did not shut down within %v", failAfter)
		return nil, false
	}
}

// TestDiskFull fills the disk of the storage root while a turn streams:
// the turn's writes fail and the turn ends failed, or the host drains.
// After space is freed and the host restarted, every turn acknowledged
// before is intact and the failed turn reads back terminal.
func TestDiskFull(t *testing.T) {
	disk := mountTmpfs(t, diskSize)
	p := &diskProvider{reached: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(p.release) }) }
	t.Cleanup(release)
	r := newRig(t, filepath.Join(disk, "root"), domain.Options{Provider: p}, host.Options{})
	k := r.start()
	c := r.dial()
	const sid = "disk"
	if err := createSession(opCtx(t), c, sid, workspace(t), protocol.PermissionModeBypass); err != nil {
		t.Fatal(err)
	}
	f := follow(t, c, sid)
	var recorded []acked
	for _, turnID := range []string{"turn-1", "turn-2", "turn-3"} {
		if _, end := runTurn(t, c, f, sid, turnID, "small "+turnID); end.Status != protocol.TurnCompleted {
			t.Fatalf("turn %s ended %+v", turnID, end)
		}
		recorded = append(recorded, record(t, c, sid, turnID))
	}
	_ = f.sub.Close(opCtx(t))

	big, err := c.StartTurn(opCtx(t), protocol.TurnStartInput{SessionID: sid, TurnID: "turn-big", Content: protocol.MessageContent{Text: "big turn"}})
	if err != nil {
		t.Fatalf("turn.start: %v", err)
	}
	select {
	case <-p.reached:
	case <-time.After(failAfter):
		t.Fatal("the big turn never reached the model")
	}
	filler := fillDisk(t, disk)
	release()
	end, drained := waitEnd(t, c, k, sid, "turn-big")
	switch {
	case drained:
		t.Logf("the host drained (%v)", k.Err())
	case end.Status != protocol.TurnFailed:
		t.Fatalf("the big turn ended %+v with the disk full, want failed", end)
	default:
		t.Logf("the big turn ended failed (%s)", end.FailureClass)
	}
	t.Logf("the host reported a full disk: %v", r.logs.contains("full"))

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := r.stop(); err != nil {
		t.Logf("host close after the disk was full: %v", err)
	}
	r.start()
	c2 := r.dial()
	checkIntact(t, c2, recorded)
	got := record(t, c2, sid, "turn-big")
	if got.end.Status != protocol.TurnFailed || got.end.RunID != big.RunID || len(got.user) != 1 || got.user[0] != "big turn" {
		t.Errorf("the big turn after the restart: %+v", got)
	}
	if !drained && got.end != *end {
		t.Errorf("the big turn after the restart %+v, acknowledged as %+v", got.end, *end)
	}
	// The restarted host works.
	f2 := follow(t, c2, sid)
	if _, end := runTurn(t, c2, f2, sid, "turn-after", "small after"); end.Status != protocol.TurnCompleted {
		t.Fatalf("a turn after the restart ended %+v", end)
	}
}
