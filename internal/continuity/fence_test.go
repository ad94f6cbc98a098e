package continuity

import (
	"context"
	"testing"

	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/protocol"
)

func (h *harness) inLane(sessionID string, fn func(ctx context.Context) error) error {
	return h.gate.Run(context.Background(), sessionID, func(ctx context.Context, _ *lane.Lease) error { return fn(ctx) })
}

func rootStatuses(frames []any) []protocol.TurnStatus {
	var out []protocol.TurnStatus
	for _, fr := range frames {
		if p, ok := fr.(protocol.ProjectionFrame); ok && p.Snapshot.RootTurn != nil {
			out = append(out, p.Snapshot.RootTurn.Status)
		}
	}
	return out
}

// guarantee 43: while the fence is held the terminal root is not published;
// PublishTerminal publishes it once with the next revision, and the
// successor follows.
func TestTerminalFenceHoldsTheTerminalSnapshotUntilPublication(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	h.store.update("s1", func(p *Projection) { p.RootTurn.Status = protocol.TurnAdmitted })
	conn := newFakeConn(t, "conn-a")
	sub := h.openActive(conn, "s1")

	if err := h.inLane("s1", func(ctx context.Context) error {
		_, err := h.c.InstallFence(ctx, "s1", "turn-s1", "run-s1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	h.store.update("s1", func(p *Projection) { p.RootTurn.Status = protocol.TurnRunning })
	h.refresh("s1")
	h.accept("s1", textEvent("s1", "hello"))
	h.store.update("s1", func(p *Projection) {
		p.RootTurn.Status, p.RootTurn.TerminalEventID = protocol.TurnCompleted, "terminal-1"
		p.Session.Status = protocol.SessionActive
	})
	h.refresh("s1") // held back: the fenced root reads terminal
	conn.flushAll()
	if got := rootStatuses(conn.framesOf(sub.SubscriptionID)); len(got) != 1 || got[0] != protocol.TurnRunning {
		t.Fatalf("before publication the subscriber saw roots %v, want [running]", got)
	}
	// A new subscriber gets the last non-terminal snapshot.
	late := newFakeConn(t, "conn-b")
	lateSub := h.openActive(late, "s1")
	if lateSub.Snapshot.RootTurn.Status != protocol.TurnRunning {
		t.Fatalf("late open saw %s, want running", lateSub.Snapshot.RootTurn.Status)
	}
	if err := h.inLane("s1", func(ctx context.Context) error { return h.c.PublishTerminal(ctx, "s1", "turn-s1", "run-s1") }); err != nil {
		t.Fatal(err)
	}
	// Publishing twice fails: the fence is gone.
	if err := h.inLane("s1", func(ctx context.Context) error { return h.c.PublishTerminal(ctx, "s1", "turn-s1", "run-s1") }); err == nil {
		t.Fatal("a second terminal publication succeeded")
	}
	h.refresh("s1") // unchanged: no frame
	// The successor follows the terminal snapshot.
	h.store.update("s1", func(p *Projection) {
		p.RootTurn = &protocol.TurnSnapshot{SessionID: "s1", TurnID: "turn-2", RunID: "run-2", Status: protocol.TurnAdmitted}
	})
	if err := h.inLane("s1", func(ctx context.Context) error { _, err := h.c.InstallFence(ctx, "s1", "turn-2", "run-2"); return err }); err != nil {
		t.Fatal(err)
	}
	conn.flushAll()
	late.flushAll()
	all := []protocol.TurnStatus{protocol.TurnRunning, protocol.TurnCompleted, protocol.TurnAdmitted}
	for _, c := range []struct {
		name   string
		subID  string
		frames []any
		want   []protocol.TurnStatus
	}{
		{"first", sub.SubscriptionID, conn.framesOf(sub.SubscriptionID), all},
		{"late", lateSub.SubscriptionID, late.framesOf(lateSub.SubscriptionID), all[1:]},
	} {
		got := rootStatuses(c.frames)
		if len(got) != len(c.want) {
			t.Fatalf("%s subscriber saw roots %v, want %v", c.name, got, c.want)
		}
		for i := range c.want {
			if got[i] != c.want[i] {
				t.Fatalf("%s subscriber saw roots %v, want %v", c.name, got, c.want)
			}
		}
		requireGapless(t, c.subID, c.frames)
	}
	// Revisions are shared: the terminal snapshot has one revision for both.
	var revs []int64
	for _, fr := range append(conn.framesOf(sub.SubscriptionID), late.framesOf(lateSub.SubscriptionID)...) {
		if p, ok := fr.(protocol.ProjectionFrame); ok && p.Snapshot.RootTurn.Status == protocol.TurnCompleted {
			revs = append(revs, p.Snapshot.ProjectionRevision)
		}
	}
	if len(revs) != 2 || revs[0] != revs[1] {
		t.Fatalf("terminal snapshot revisions %v, want one shared revision", revs)
	}
}

func TestFenceRulesAndRelease(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	// The canonical root must be the fenced turn and not terminal.
	if err := h.inLane("s1", func(ctx context.Context) error { _, err := h.c.InstallFence(ctx, "s1", "other", "run-s1"); return err }); err == nil {
		t.Fatal("fence of a turn that is not the canonical root installed")
	}
	if err := h.inLane("s1", func(ctx context.Context) error {
		_, err := h.c.InstallFence(ctx, "s1", "turn-s1", "run-s1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Same identity again is a no-op; another identity is refused.
	if err := h.inLane("s1", func(ctx context.Context) error {
		_, err := h.c.InstallFence(ctx, "s1", "turn-s1", "run-s1")
		return err
	}); err != nil {
		t.Fatalf("repeated fence: %v", err)
	}
	if err := h.inLane("s1", func(ctx context.Context) error { _, err := h.c.InstallFence(ctx, "s1", "turn-x", "run-x"); return err }); err == nil {
		t.Fatal("a second fence was installed")
	}
	// The fence keeps the session's state without subscribers.
	requireStats(t, h.c, 0, 1)
	// Terminal publication needs a terminal root.
	if err := h.inLane("s1", func(ctx context.Context) error { return h.c.PublishTerminal(ctx, "s1", "turn-s1", "run-s1") }); err == nil {
		t.Fatal("published a non-terminal root as terminal")
	}
	h.c.ReleaseFence("s1", "turn-s1", "run-s1")
	requireStats(t, h.c, 0, 0)
}
