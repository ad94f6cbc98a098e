package turns

import (
	"slices"
	"sync/atomic"
	"testing"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/protocol"
)

type countedResidency struct {
	n    *atomic.Int64
	done atomic.Bool
}

func (r *countedResidency) Release() {
	if r.done.CompareAndSwap(false, true) {
		r.n.Add(-1)
	}
}

// queueHarness drives one session's queue through the owner's state
// changes, white-box: the session has an active root that runs no loop,
// and entries are placed directly, as an accepted submit would.
type queueHarness struct {
	t     *testing.T
	c     *Owner
	held  atomic.Int64
	root  *activeRoot
	owner *steering
}

func newQueueHarness(t *testing.T) *queueHarness {
	h := &queueHarness{t: t}
	gate := lane.New()
	t.Cleanup(func() { _ = gate.Close(t.Context()) })
	h.c = New(Options{HostEpoch: "epoch", Gate: gate,
		Residency: func() host.Residency {
			h.held.Add(1)
			return &countedResidency{n: &h.held}
		}})
	h.root = &activeRoot{sessionID: "s", turnID: "t", runID: "r", started: make(chan struct{}), done: make(chan struct{}),
		stop: func(error) {}}
	h.c.mu.Lock()
	s := h.c.sessionLocked("s")
	s.root = h.root
	s.queue.open = true
	h.owner = &steering{c: h.c, s: s, root: h.root, generation: s.queue.generation}
	h.root.steering = h.owner
	h.c.mu.Unlock()
	h.root.inter = h.c.inter.BindRun("s", "t", "r")
	return h
}

// fence commits the stop fence of the harness's root.
func (h *queueHarness) fence() (protocol.QueueRetractResult, error) {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	return h.c.stopFenceLocked(h.c.sessions["s"])
}

// add queues an accepted message.
func (h *queueHarness) add(id string, placement protocol.MessagePlacement) {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions["s"]
	e := &entry{id: "e-" + id, messageID: id, content: protocol.MessageContent{Text: id}, placement: placement, resid: c.opts.Residency()}
	if placement == protocol.PlacementCurrentTurn {
		s.queue.steering = append(s.queue.steering, e)
	} else {
		s.queue.followups = append(s.queue.followups, e)
	}
	c.mutatedLocked(s)
}

// view lists the projection as id:state, steering then follow-ups.
func (h *queueHarness) view() (int64, []string) {
	p := h.c.QueueProjection("s")
	var out []string
	for _, e := range slices.Concat(p.Steering, p.Followup) {
		out = append(out, e.MessageID+":"+string(e.State))
	}
	return p.QueueRevision, out
}

func (h *queueHarness) expect(rev int64, want ...string) {
	h.t.Helper()
	got, list := h.view()
	if got != rev || !slices.Equal(list, want) {
		h.t.Fatalf("queue at revision %d %v, want %d %v", got, list, rev, want)
	}
}

func leaseIDs(msgs []agent.SteeringMessage, ids ...string) []string {
	var out []string
	for _, id := range ids {
		for _, m := range msgs {
			if m.MessageID == id {
				out = append(out, m.LeaseID)
			}
		}
	}
	return out
}

func TestLeasesRetractAndNackOrder(t *testing.T) {
	h := newQueueHarness(t)
	const cur, nxt = protocol.PlacementCurrentTurn, protocol.PlacementNextTurn
	h.add("a", cur)
	h.add("b", cur)
	h.add("c", cur)
	h.add("f", nxt)
	leased := h.owner.Pull()
	if len(leased) != 3 || leased[0].MessageID != "a" || leased[2].MessageID != "c" {
		t.Fatalf("pull leased %+v", leased)
	}
	h.add("d", cur)
	// In-flight first, then queued steering, then follow-ups.
	h.expect(6, "a:in_flight", "b:in_flight", "c:in_flight", "d:queued", "f:queued")
	// A retract takes the queued entries only.
	got, refused, err := h.c.Retract("s")
	if err != nil || refused {
		t.Fatalf("retract: %v %v", refused, err)
	}
	if got.QueueRevision != 7 || len(got.Retracted) != 2 || got.Retracted[0].MessageID != "d" || got.Retracted[1].MessageID != "f" {
		t.Fatalf("retract answered %+v", got)
	}
	h.expect(7, "a:in_flight", "b:in_flight", "c:in_flight")
	if h.held.Load() != 3 {
		t.Fatalf("%d residencies held after the retract, want 3", h.held.Load())
	}
	// A nack returns the entries to the front, in their original order.
	h.add("e", cur)
	h.owner.Nack(leaseIDs(leased, "b", "a"))
	h.expect(9, "c:in_flight", "a:queued", "b:queued", "e:queued")
	h.owner.Ack(leaseIDs(leased, "c"))
	h.expect(10, "a:queued", "b:queued", "e:queued")
	if h.held.Load() != 3 {
		t.Fatalf("%d residencies held after the ack, want 3", h.held.Load())
	}
	// Leased, then fenced: a late nack discards instead of re-queuing.
	leased = h.owner.Pull()
	h.add("g", nxt)
	fence, err := h.fence()
	if err != nil {
		t.Fatal(err)
	}
	if fence.QueueRevision != 13 || len(fence.Retracted) != 1 || fence.Retracted[0].MessageID != "g" {
		t.Fatalf("fence answered %+v", fence)
	}
	if again, err := h.fence(); err != nil || again.QueueRevision != fence.QueueRevision {
		t.Fatalf("second fence answered %+v %v", again, err)
	}
	if more := h.owner.Pull(); len(more) != 0 {
		t.Fatalf("pull after the fence leased %+v", more)
	}
	h.owner.Nack(leaseIDs(leased, "a", "b", "e"))
	h.expect(14)
	if h.held.Load() != 0 {
		t.Fatalf("%d residencies held after the discard", h.held.Load())
	}
	h.owner.release()
	batch, err := h.c.beginTransition(h.root)
	if err != nil || !batch.Empty() {
		t.Fatalf("transition: %+v %v", batch, err)
	}
	if err := h.root.inter.Close(t.Context(), ClosureTurnTerminal); err != nil {
		t.Fatal(err)
	}
	h.c.goIdle(h.root)
	h.expect(0)
	h.c.mu.Lock()
	n := len(h.c.sessions)
	h.c.mu.Unlock()
	if n != 0 {
		t.Fatal("idle queue state was not reclaimed")
	}
	if err := h.c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := h.c.inter.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestEndingARootWithAcceptedMessagesFailsStop(t *testing.T) {
	h := newQueueHarness(t)
	h.add("f", protocol.PlacementNextTurn)
	if err := h.c.endOwnership(h.root); err == nil {
		t.Fatal("ending the root dropped an accepted message")
	}
	if !h.c.Failed() {
		t.Fatal("the authority did not fail stop")
	}
	h.expect(1, "f:queued")
	if err := h.c.Close(t.Context()); err == nil {
		t.Fatal("close succeeded with an accepted message")
	}
}
