package continuity

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/protocol"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testEpoch = "host-epoch"

// ---- projection store ----

// store is the canonical projection source of a test. A session whose
// entry in block is set makes its reads wait (after signalling entered)
// until the channel is closed.
type store struct {
	mu      sync.Mutex
	m       map[string]Projection
	block   map[string]chan struct{}
	entered map[string]chan struct{}
	reads   map[string]int
}

func newStore() *store {
	return &store{
		m:       map[string]Projection{},
		block:   map[string]chan struct{}{},
		entered: map[string]chan struct{}{},
		reads:   map[string]int{},
	}
}

func projection(sessionID string) Projection {
	root := protocol.TurnSnapshot{SessionID: sessionID, TurnID: "turn-" + sessionID, RunID: "run-" + sessionID, Status: protocol.TurnRunning}
	return Projection{
		Session:  protocol.SessionContinuityIdentity{SessionID: sessionID, Status: protocol.SessionRunning, CreatedAt: 1, LastUsedAt: 1},
		RootTurn: &root,
		Queue: protocol.SessionMessageQueueProjection{
			HostEpoch: testEpoch, Steering: []protocol.MessageQueueEntrySnapshot{}, Followup: []protocol.MessageQueueEntrySnapshot{},
		},
		Interactions: protocol.InteractionProjection{Pending: []protocol.InteractionSnapshot{}},
	}
}

func (s *store) put(p Projection) {
	s.mu.Lock()
	s.m[p.Session.SessionID] = p
	s.mu.Unlock()
}

func (s *store) add(ids ...string) {
	for _, id := range ids {
		s.put(projection(id))
	}
}

// update changes a stored projection in place.
func (s *store) update(sessionID string, f func(p *Projection)) {
	s.mu.Lock()
	p := s.m[sessionID]
	if p.RootTurn != nil {
		root := *p.RootTurn
		p.RootTurn = &root
	}
	f(&p)
	s.m[sessionID] = p
	s.mu.Unlock()
}

// blockReads makes reads of sessionID wait for the returned release.
func (s *store) blockReads(sessionID string) (entered <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, e := make(chan struct{}), make(chan struct{})
	s.block[sessionID], s.entered[sessionID] = b, e
	var once sync.Once
	return e, func() { once.Do(func() { close(b) }) }
}

func (s *store) readCount(sessionID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[sessionID]
}

func (s *store) read(_ context.Context, sessionID string) (Projection, bool, error) {
	s.mu.Lock()
	s.reads[sessionID]++
	b, e := s.block[sessionID], s.entered[sessionID]
	delete(s.block, sessionID)
	delete(s.entered, sessionID)
	s.mu.Unlock()
	if b != nil {
		close(e)
		<-b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.m[sessionID]
	return p, ok, nil
}

// ---- fake connection ----

type pendingSend struct {
	subscriptionID string
	done           func(error)
}

// fakeConn records the frames handed to a ConnInfo and keeps their
// completion callbacks until the test flushes them.
type fakeConn struct {
	t    *testing.T
	info *host.ConnInfo

	mu      sync.Mutex
	sent    [][]byte
	pending []pendingSend
	sendErr error
	// onSend, if set, runs inside Send before the frame is recorded.
	onSend func()
}

func newFakeConn(t *testing.T, id string) *fakeConn {
	f := &fakeConn{t: t}
	f.info = host.NewConnInfo(host.ConnInfo{
		HostEpoch: testEpoch, ConnectionID: id, Surface: protocol.SurfaceTUI, Principal: "local_os_user",
	}, f.send)
	return f
}

func (f *fakeConn) send(frame []byte, onDone func(error)) error {
	f.mu.Lock()
	hook, err := f.onSend, f.sendErr
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	if err != nil {
		return err
	}
	fr := decodeFrame(f.t, frame)
	f.mu.Lock()
	f.sent = append(f.sent, frame)
	f.pending = append(f.pending, pendingSend{subscriptionID: subscriptionOf(fr), done: onDone})
	f.mu.Unlock()
	return nil
}

// completeNext completes the oldest pending send of subscriptionID ("" for
// any) with err; it reports whether there was one.
func (f *fakeConn) completeNext(subscriptionID string, err error) bool {
	f.mu.Lock()
	for i, p := range f.pending {
		if subscriptionID == "" || p.subscriptionID == subscriptionID {
			f.pending = append(f.pending[:i], f.pending[i+1:]...)
			f.mu.Unlock()
			p.done(err)
			return true
		}
	}
	f.mu.Unlock()
	return false
}

// flush completes up to n sends of subscriptionID ("" for any), including
// the ones the completions trigger.
func (f *fakeConn) flush(subscriptionID string, n int) {
	for i := 0; i < n && f.completeNext(subscriptionID, nil); i++ {
	}
}

// flushAll completes sends until none is pending.
func (f *fakeConn) flushAll() {
	for f.completeNext("", nil) {
	}
}

func (f *fakeConn) pendingCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

// frames decodes every frame sent so far.
func (f *fakeConn) frames() []any {
	f.mu.Lock()
	raw := append([][]byte(nil), f.sent...)
	f.mu.Unlock()
	out := make([]any, len(raw))
	for i, b := range raw {
		out[i] = decodeFrame(f.t, b)
	}
	return out
}

// framesOf returns the frames of one subscription, in order.
func (f *fakeConn) framesOf(subscriptionID string) []any {
	var out []any
	for _, fr := range f.frames() {
		if subscriptionOf(fr) == subscriptionID {
			out = append(out, fr)
		}
	}
	return out
}

func (f *fakeConn) sentCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sent)
}

// decodeFrame decodes one encoded push frame as a client would, checking
// the wire bounds and the frame codec.
func decodeFrame(t *testing.T, b []byte) any {
	t.Helper()
	if len(b) == 0 || b[len(b)-1] != '\n' {
		t.Fatalf("frame is not newline-terminated: %q", b)
	}
	if len(b) > protocol.MaxFrameBytes {
		t.Fatalf("frame of %d bytes exceeds %d", len(b), protocol.MaxFrameBytes)
	}
	v, err := protocol.DecodeFrameText(b[:len(b)-1])
	if err != nil {
		t.Fatalf("frame does not decode: %v", err)
	}
	fr, err := protocol.DecodeHostFrame(v)
	if err != nil {
		t.Fatalf("push frame rejected by the codec: %v", err)
	}
	switch fr.(type) {
	case protocol.ProjectionFrame, protocol.DeltaFrame, protocol.EventFrame, protocol.ClosedFrame, protocol.NoticeFrame:
	default:
		t.Fatalf("not a push frame: %#v", fr)
	}
	return fr
}

func envelope(fr any) (hostEpoch, subscriptionID string, sequence int64) {
	switch f := fr.(type) {
	case protocol.ProjectionFrame:
		return f.HostEpoch, f.SubscriptionID, f.Sequence
	case protocol.DeltaFrame:
		return f.HostEpoch, f.SubscriptionID, f.Sequence
	case protocol.EventFrame:
		return f.HostEpoch, f.SubscriptionID, f.Sequence
	case protocol.ClosedFrame:
		return f.HostEpoch, f.SubscriptionID, f.Sequence
	case protocol.NoticeFrame:
		return f.HostEpoch, f.SubscriptionID, f.Sequence
	}
	return "", "", 0
}

func subscriptionOf(fr any) string { _, id, _ := envelope(fr); return id }

// requireGapless checks that frames belong to subscriptionID and carry
// sequences 1..len(frames).
func requireGapless(t *testing.T, subscriptionID string, frames []any) {
	t.Helper()
	for i, fr := range frames {
		epoch, id, seq := envelope(fr)
		if epoch != testEpoch || id != subscriptionID {
			t.Fatalf("frame %d: epoch %q subscription %q, want %q %q", i, epoch, id, testEpoch, subscriptionID)
		}
		if seq != int64(i+1) {
			t.Fatalf("frame %d has sequence %d, want %d (frames %v)", i, seq, i+1, describe(frames))
		}
	}
}

func describe(frames []any) string {
	var b strings.Builder
	for _, fr := range frames {
		_, _, seq := envelope(fr)
		fmt.Fprintf(&b, "%T#%d ", fr, seq)
	}
	return b.String()
}

// ---- harness ----

type harness struct {
	t     *testing.T
	c     *Publisher
	gate  *lane.Gate
	store *store
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	st := newStore()
	g := lane.New()
	c := New(testEpoch, st.read, g, nil)
	t.Cleanup(func() {
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := g.Close(ctx); err != nil {
			t.Errorf("lane close: %v", err)
		}
	})
	return &harness{t: t, c: c, gate: g, store: st}
}

func spec(t *testing.T, op protocol.Operation) *protocol.OperationSpec {
	t.Helper()
	s, ok := protocol.Lookup(string(op))
	if !ok {
		t.Fatalf("no spec for %s", op)
	}
	return s
}

func (h *harness) call(conn *fakeConn, op protocol.Operation, input any) host.Outcome {
	h.t.Helper()
	call := &host.Call{RequestID: uuid.NewString(), Operation: spec(h.t, op), Input: input, Conn: conn.info}
	return h.c.Handlers()[op](context.Background(), call)
}

func (h *harness) open(conn *fakeConn, sessionID string) host.Outcome {
	h.t.Helper()
	return h.call(conn, protocol.OpSubscriptionOpen, protocol.SubscriptionOpenInput{SessionID: sessionID})
}

func (h *harness) closeSub(conn *fakeConn, subscriptionID string) host.Outcome {
	h.t.Helper()
	return h.call(conn, protocol.OpSubscriptionClose, protocol.SubscriptionCloseInput{SubscriptionID: subscriptionID})
}

// openInactive opens a subscription whose response has not been queued yet;
// activate is its AfterQueued.
func (h *harness) openInactive(conn *fakeConn, sessionID string) (res protocol.SubscriptionOpenResult, activate func(error)) {
	h.t.Helper()
	out := h.open(conn, sessionID)
	if out.Err != nil {
		h.t.Fatalf("open %s: %s %s", sessionID, out.Err.Code, out.Err.Message)
	}
	if out.AfterQueued == nil {
		h.t.Fatal("open outcome has no AfterQueued")
	}
	res, ok := out.Result.(protocol.SubscriptionOpenResult)
	if !ok {
		h.t.Fatalf("open result %T", out.Result)
	}
	requireValidResult(h.t, protocol.OpSubscriptionOpen, res)
	return res, out.AfterQueued
}

// openActive opens a subscription and reports its response as queued.
func (h *harness) openActive(conn *fakeConn, sessionID string) protocol.SubscriptionOpenResult {
	h.t.Helper()
	res, activate := h.openInactive(conn, sessionID)
	activate(nil)
	return res
}

// requireValidResult checks that a result passes the operation's output
// codec, as the host checks before writing it.
func requireValidResult(t *testing.T, op protocol.Operation, result any) {
	t.Helper()
	b, err := protocol.Marshal(result)
	if err != nil {
		t.Fatal(err)
	}
	v, err := protocol.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := spec(t, op).DecodeOutput(v); err != nil {
		t.Fatalf("%s result rejected by its codec: %v", op, err)
	}
}

func requireFailure(t *testing.T, out host.Outcome, code protocol.ErrorCode, message string) {
	t.Helper()
	if out.Err == nil {
		t.Fatalf("outcome succeeded with %#v, want %s", out.Result, code)
	}
	if out.Err.Code != code || (message != "" && out.Err.Message != message) {
		t.Fatalf("failure %s %q, want %s %q", out.Err.Code, out.Err.Message, code, message)
	}
	if out.AfterQueued != nil {
		t.Fatal("a failed outcome carries AfterQueued")
	}
}

func requireStats(t *testing.T, c *Publisher, subscriptions, sessions int) {
	t.Helper()
	if s, n := c.Stats(); s != subscriptions || n != sessions {
		t.Fatalf("stats = %d subscriptions, %d sessions; want %d, %d", s, n, subscriptions, sessions)
	}
}

func textEvent(sessionID, text string) Event {
	return Event{Type: TextDelta, TurnID: "turn-" + sessionID, MessageID: "message-" + sessionID, Text: text}
}

func (h *harness) accept(sessionID string, ev Event) {
	h.t.Helper()
	if err := h.c.AcceptRuntimeEvent(sessionID, "run-"+sessionID, ev); err != nil {
		h.t.Fatalf("event for %s rejected: %v", sessionID, err)
	}
}

func (h *harness) acceptText(sessionID string, n int) {
	h.t.Helper()
	for i := 1; i <= n; i++ {
		h.accept(sessionID, textEvent(sessionID, fmt.Sprintf("chunk-%d", i)))
	}
}

func (h *harness) refresh(sessionID string) {
	h.t.Helper()
	if err := h.c.Refresh(context.Background(), sessionID); err != nil {
		h.t.Fatalf("refresh %s: %v", sessionID, err)
	}
}

// ---- guarantee 41 ----

func TestOpenReturnsSnapshotAndReleasesFramesOnlyAfterActivation(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	conn := newFakeConn(t, "conn-a")

	// No publication state yet: the event is dropped, not replayed later.
	h.accept("s1", textEvent("s1", "before the open"))
	requireStats(t, h.c, 0, 0)

	res, activate := h.openInactive(conn, "s1")
	if res.HostEpoch != testEpoch || res.NextSequence != 1 {
		t.Fatalf("open result epoch %q nextSequence %d", res.HostEpoch, res.NextSequence)
	}
	if _, err := uuid.Parse(res.SubscriptionID); err != nil {
		t.Fatalf("subscriptionId %q is not a UUID", res.SubscriptionID)
	}
	snap := res.Snapshot
	if snap.SchemaVersion != 1 || snap.ProjectionRevision != 1 || snap.Session.SessionID != "s1" ||
		snap.RootTurn == nil || snap.RootTurn.TurnID != "turn-s1" || snap.Queue.HostEpoch != testEpoch {
		t.Fatalf("snapshot %+v", snap)
	}
	requireStats(t, h.c, 1, 1)

	// Accepted after the open barrier, before activation: queued, not sent.
	h.acceptText("s1", 3)
	h.store.update("s1", func(p *Projection) { p.Queue.QueueRevision = 1 })
	h.refresh("s1")
	if n := conn.sentCount(); n != 0 {
		t.Fatalf("%d frames sent before the open response was queued", n)
	}

	activate(nil)
	if n, p := conn.sentCount(), conn.pendingCount(); n != 1 || p != 1 {
		t.Fatalf("after activation: %d sent, %d in flight; want one frame in flight", n, p)
	}
	conn.flushAll()
	h.acceptText("s1", 2)
	conn.flushAll()

	frames := conn.frames()
	requireGapless(t, res.SubscriptionID, frames)
	if len(frames) != 6 {
		t.Fatalf("got %d frames (%s), want 6", len(frames), describe(frames))
	}
	want := []string{"chunk-1", "chunk-2", "chunk-3", "", "chunk-1", "chunk-2"}
	for i, fr := range frames {
		switch f := fr.(type) {
		case protocol.DeltaFrame:
			if f.Delta.Text != want[i] || f.SessionID != "s1" || f.Delta.Kind != protocol.DeltaText ||
				f.Delta.TurnID != "turn-s1" || f.Delta.RunID != "run-s1" || f.Delta.MessageID != "message-s1" {
				t.Fatalf("frame %d: %+v", i, f)
			}
		case protocol.ProjectionFrame:
			if want[i] != "" || f.Snapshot.ProjectionRevision != 2 || f.Snapshot.Queue.QueueRevision != 1 {
				t.Fatalf("frame %d: projection %+v", i, f.Snapshot)
			}
		default:
			t.Fatalf("frame %d: unexpected %T", i, fr)
		}
	}
}

func TestOpenWhoseResponseCannotBeQueuedIsAborted(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	conn := newFakeConn(t, "conn-a")
	_, activate := h.openInactive(conn, "s1")
	h.acceptText("s1", 2)
	activate(errors.New("response lost"))
	requireStats(t, h.c, 0, 0)
	h.acceptText("s1", 1)
	if n := conn.sentCount(); n != 0 {
		t.Fatalf("aborted subscription sent %d frames", n)
	}
	// The connection's slot was released.
	for range MaxSubscriptionsPerConnection {
		h.openActive(conn, "s1")
	}
}

func TestOpenFailsWhenConnectionEndsDuringOpen(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1", "s2")
	conn := newFakeConn(t, "conn-a")
	h.openActive(conn, "s2")
	entered, release := h.store.blockReads("s1")
	defer release()
	done := make(chan host.Outcome, 1)
	go func() { done <- h.open(conn, "s1") }()
	<-entered
	h.c.DetachConnection("conn-a")
	release()
	requireFailure(t, <-done, protocol.ErrInternalFailure, "")
	requireStats(t, h.c, 0, 0)
	if n := conn.sentCount(); n != 0 {
		t.Fatalf("%d frames sent", n)
	}
}

// ---- guarantee 42 ----

func TestFrameBoundEvictsAnInactiveSubscriberWithSequenceOne(t *testing.T) {
	for _, events := range []int{SubscriberMaxFrames - 1, SubscriberMaxFrames} {
		t.Run(fmt.Sprint(events), func(t *testing.T) {
			h := newHarness(t)
			h.store.add("s1")
			conn := newFakeConn(t, "conn-a")
			res, activate := h.openInactive(conn, "s1")
			h.acceptText("s1", events)
			activate(nil)
			conn.flushAll()
			frames := conn.frames()
			requireGapless(t, res.SubscriptionID, frames)
			if events < SubscriberMaxFrames {
				// 31 queued frames fit: all are delivered, nothing is closed.
				if len(frames) != events {
					t.Fatalf("got %s, want %d deltas", describe(frames), events)
				}
				for _, fr := range frames {
					if _, ok := fr.(protocol.DeltaFrame); !ok {
						t.Fatalf("unexpected %T", fr)
					}
				}
				requireStats(t, h.c, 1, 1)
				return
			}
			// 31 queued plus the new one: only the closing frame, sequence 1.
			if len(frames) != 1 {
				t.Fatalf("got %s, want one closing frame", describe(frames))
			}
			closed, ok := frames[0].(protocol.ClosedFrame)
			if !ok || closed.Reason != protocol.CloseSlowConsumer || closed.Sequence != 1 {
				t.Fatalf("got %#v, want subscription.closed slow_consumer sequence 1", frames[0])
			}
			requireStats(t, h.c, 0, 0)
			h.acceptText("s1", 1)
			if n := conn.sentCount(); n != 1 {
				t.Fatalf("%d frames after the closing frame", n-1)
			}
		})
	}
}

func TestSlowConsumerIsEvictedAfterItsLastSentFrameWhileSiblingsReceiveEverything(t *testing.T) {
	// The slow subscriber has frames 1..4 written and frame 4 in flight when
	// it stalls; frames 5..34 fill its queue to 31 (with the in-flight one),
	// so event 35 evicts it.
	const stallAfter = 4
	for _, total := range []int{34, 35, 40} {
		t.Run(fmt.Sprint(total), func(t *testing.T) {
			h := newHarness(t)
			h.store.add("s1", "s2")
			slowConn := newFakeConn(t, "slow")
			siblingConn := newFakeConn(t, "sibling")
			slow := h.openActive(slowConn, "s1")
			other := h.openActive(slowConn, "s2") // another session on the slow connection
			sibling := h.openActive(siblingConn, "s1")
			for i := 1; i <= total; i++ {
				h.accept("s1", textEvent("s1", fmt.Sprintf("chunk-%d", i)))
				h.accept("s2", textEvent("s2", fmt.Sprintf("chunk-%d", i)))
				siblingConn.flushAll()
				slowConn.flush(other.SubscriptionID, 1)
				if i < stallAfter {
					slowConn.flush(slow.SubscriptionID, 1)
				}
			}
			evicted := total > stallAfter+SubscriberMaxFrames-2
			// Sibling subscriptions see every frame, gapless.
			for _, c := range []struct {
				conn *fakeConn
				id   string
			}{{siblingConn, sibling.SubscriptionID}, {slowConn, other.SubscriptionID}} {
				frames := c.conn.framesOf(c.id)
				requireGapless(t, c.id, frames)
				if len(frames) != total {
					t.Fatalf("sibling got %d frames, want %d", len(frames), total)
				}
			}
			if !evicted {
				requireStats(t, h.c, 3, 2)
			}
			slowConn.flushAll()
			frames := slowConn.framesOf(slow.SubscriptionID)
			requireGapless(t, slow.SubscriptionID, frames)
			if !evicted {
				if len(frames) != total {
					t.Fatalf("got %s, want %d deltas", describe(frames), total)
				}
				return
			}
			if len(frames) != stallAfter+1 {
				t.Fatalf("got %s, want %d deltas and the closing frame", describe(frames), stallAfter)
			}
			for _, fr := range frames[:stallAfter] {
				if _, ok := fr.(protocol.DeltaFrame); !ok {
					t.Fatalf("got %s", describe(frames))
				}
			}
			if c, ok := frames[stallAfter].(protocol.ClosedFrame); !ok || c.Reason != protocol.CloseSlowConsumer {
				t.Fatalf("last frame %#v, want subscription.closed slow_consumer", frames[stallAfter])
			}
			requireStats(t, h.c, 2, 2)
			// Nothing more for the evicted subscription; the others go on.
			h.acceptText("s1", 1)
			siblingConn.flushAll()
			slowConn.flushAll()
			if n := len(slowConn.framesOf(slow.SubscriptionID)); n != stallAfter+1 {
				t.Fatalf("evicted subscription received %d more frames", n-stallAfter-1)
			}
			if n := len(siblingConn.framesOf(sibling.SubscriptionID)); n != total+1 {
				t.Fatalf("sibling has %d frames, want %d", n, total+1)
			}
		})
	}
}

// deltaFrameOverhead returns the encoded size of a delta frame of
// subscriptionID with sequence seq, minus its (ASCII) text.
func deltaFrameOverhead(t *testing.T, subscriptionID string, seq int64) int {
	t.Helper()
	b, err := protocol.EncodeFrame(protocol.DeltaFrame{
		HostEpoch: testEpoch, SubscriptionID: subscriptionID, Sequence: seq, SessionID: "s1",
		Delta: protocol.SessionAssistantDelta{Kind: protocol.DeltaText, TurnID: "turn-s1", RunID: "run-s1", MessageID: "message-s1", Text: "x"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(b) - 1
}

// largeDeltaEvictionPoint returns the event that evicts a subscriber of
// ASCII deltas of textLen bytes while its first frame stays in flight: the
// first one that makes the queued bytes plus reserve exceed 256 KiB.
func largeDeltaEvictionPoint(overhead func(seq int64) int, textLen, reserve int) int {
	total := reserve
	for seq := int64(1); ; seq++ {
		total += overhead(seq) + textLen
		if total > SubscriberMaxBytes {
			return int(seq)
		}
	}
}

func TestByteBoundEvictsASubscriberOfLargeDeltas(t *testing.T) {
	// The subscription id has a fixed length, so any id sizes the frames.
	id := uuid.NewString()
	closed, err := protocol.EncodeFrame(protocol.ClosedFrame{
		HostEpoch: testEpoch, SubscriptionID: id, Sequence: protocol.MaxSafeInteger, Reason: protocol.CloseSlowConsumer,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Pick a delta size near 16 KiB at which the reserved closing frame
	// decides whether the last delta still fits.
	overheads := map[int64]int{}
	overhead := func(seq int64) int {
		if _, ok := overheads[seq]; !ok {
			overheads[seq] = deltaFrameOverhead(t, id, seq)
		}
		return overheads[seq]
	}
	var text string
	var limit int
	for n := protocol.SessionLiveDeltaMaxBytes; n > protocol.SessionLiveDeltaMaxBytes-2048 && text == ""; n-- {
		with := largeDeltaEvictionPoint(overhead, n, len(closed))
		if with != largeDeltaEvictionPoint(overhead, n, 0) {
			text, limit = strings.Repeat("x", n), with
		}
	}
	if text == "" {
		t.Fatal("no delta size depends on the closing-frame reserve")
	}
	if limit >= SubscriberMaxFrames-1 {
		t.Fatalf("byte bound at %d frames would not fire before the frame bound", limit)
	}
	for _, events := range []int{limit - 1, limit} {
		t.Run(fmt.Sprint(events), func(t *testing.T) {
			h := newHarness(t)
			h.store.add("s1")
			conn := newFakeConn(t, "conn-a")
			res := h.openActive(conn, "s1")
			for range events {
				h.accept("s1", textEvent("s1", text)) // frame 1 stays in flight
			}
			conn.flushAll()
			frames := conn.frames()
			requireGapless(t, res.SubscriptionID, frames)
			if events < limit {
				if len(frames) != events {
					t.Fatalf("got %d frames, want %d deltas", len(frames), events)
				}
				for _, fr := range frames {
					if d, ok := fr.(protocol.DeltaFrame); !ok || d.Delta.Text != text {
						t.Fatalf("unexpected frame %T", fr)
					}
				}
				return
			}
			if len(frames) != 2 {
				t.Fatalf("got %s, want the in-flight delta and the closing frame", describe(frames))
			}
			if c, ok := frames[1].(protocol.ClosedFrame); !ok || c.Reason != protocol.CloseSlowConsumer || c.Sequence != 2 {
				t.Fatalf("got %#v, want subscription.closed slow_consumer sequence 2", frames[1])
			}
			requireStats(t, h.c, 0, 0)
		})
	}
}

// ---- guarantee 45 ----

func TestEventOutsideTheCanonicalActiveRootIsRejected(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1", "s2")
	conn := newFakeConn(t, "conn-a")
	res := h.openActive(conn, "s1")
	h.openActive(conn, "s2")
	h.store.update("s2", func(p *Projection) { p.RootTurn = nil })
	h.refresh("s2")
	conn.flushAll()
	before := len(conn.framesOf(res.SubscriptionID))

	reject := func(sessionID, runID string, ev Event) {
		t.Helper()
		err := h.c.AcceptRuntimeEvent(sessionID, runID, ev)
		if !errors.Is(err, ErrNotCanonicalRoot) {
			t.Fatalf("event %+v of run %s: %v, want ErrNotCanonicalRoot", ev, runID, err)
		}
	}
	wrongTurn := textEvent("s1", "x")
	wrongTurn.TurnID = "turn-other"
	reject("s1", "run-s1", wrongTurn)
	reject("s1", "run-other", textEvent("s1", "x"))
	reject("s2", "run-s2", textEvent("s2", "x")) // no root turn
	tool := Event{Type: protocol.ToolStart, TurnID: "turn-s1", Tool: protocol.SessionToolEvent{
		Type: protocol.ToolStart, ID: "ev-1", TurnID: "turn-other", TS: 1, ToolUseID: "use-1", ToolName: "bash",
	}}
	reject("s1", "run-s1", tool) // the tool event names another turn

	h.store.update("s1", func(p *Projection) {
		p.RootTurn.Status = protocol.TurnCompleted
		p.RootTurn.TerminalEventID = "terminal-1"
	})
	h.refresh("s1")
	reject("s1", "run-s1", textEvent("s1", "after the terminal cut"))

	// Without subscribers events are dropped before the canonical check.
	if err := h.c.AcceptRuntimeEvent("nobody", "run-x", textEvent("nobody", "x")); err != nil {
		t.Fatalf("event of an unsubscribed session: %v", err)
	}
	if err := h.c.AcceptRuntimeEvent("s1", "run-s1", Event{Type: "bogus", TurnID: "turn-s1"}); err == nil || errors.Is(err, ErrNotCanonicalRoot) {
		t.Fatalf("unknown event type: %v", err)
	}

	conn.flushAll()
	frames := conn.framesOf(res.SubscriptionID)
	requireGapless(t, res.SubscriptionID, frames)
	if len(frames) != before+1 {
		t.Fatalf("got %s, want only the terminal projection after %d frames", describe(frames), before)
	}
	if p, ok := frames[before].(protocol.ProjectionFrame); !ok || p.Snapshot.RootTurn.Status != protocol.TurnCompleted {
		t.Fatalf("last frame %#v", frames[before])
	}
}

func TestEmptyDeltasAndChunksAreDropped(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	conn := newFakeConn(t, "conn-a")
	h.openActive(conn, "s1")
	h.accept("s1", textEvent("s1", ""))
	h.accept("s1", Event{Type: ThinkingDelta, TurnID: "turn-s1", MessageID: "m"})
	for _, typ := range []string{protocol.ToolOutputDelta, protocol.ToolProgress} {
		h.accept("s1", Event{Type: typ, TurnID: "turn-s1", Tool: protocol.SessionToolEvent{
			Type: typ, ID: "ev", TurnID: "turn-s1", TS: 1, ToolUseID: "use", Stream: "stdout",
		}})
	}
	if n := conn.sentCount(); n != 0 {
		t.Fatalf("%d frames for empty events", n)
	}
}

// ---- guarantee 46 ----

func TestLongAssistantTextIsSplitIntoSequencedChunks(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	conn := newFakeConn(t, "conn-a")
	res := h.openActive(conn, "s1")

	// Multi-byte code points, characters JSON escapes, and a run of control
	// characters whose escaped form is six times their size.
	text := strings.Repeat("é漢😀a\"\\\n", 3000) + strings.Repeat("\x01", 20000) + "end"
	h.accept("s1", Event{Type: ThinkingDelta, TurnID: "turn-s1", MessageID: "message-s1", Text: text})
	conn.flushAll()
	frames := conn.frames()
	requireGapless(t, res.SubscriptionID, frames)
	if len(frames) < 4 {
		t.Fatalf("text of %d bytes arrived in %d frames", len(text), len(frames))
	}
	var joined strings.Builder
	for i, fr := range frames {
		d, ok := fr.(protocol.DeltaFrame)
		if !ok {
			t.Fatalf("frame %d is %T", i, fr)
		}
		chunk := d.Delta.Text
		if len(chunk) == 0 || len(chunk) > protocol.SessionLiveDeltaMaxBytes || !utf8.ValidString(chunk) {
			t.Fatalf("chunk %d: %d bytes, valid UTF-8 %v", i, len(chunk), utf8.ValidString(chunk))
		}
		if d.Delta.Kind != protocol.DeltaThinking {
			t.Fatalf("chunk %d kind %s", i, d.Delta.Kind)
		}
		joined.WriteString(chunk)
	}
	if joined.String() != text {
		t.Fatal("chunks do not reassemble the text")
	}
}

func TestMaximalToolOutputDeltaIsExactlyOneFrame(t *testing.T) {
	chunks := map[string]string{
		"ascii":      strings.Repeat("o", protocol.ToolOutputDeltaChunkMaxBytes),
		"three-byte": strings.Repeat("€", protocol.ToolOutputDeltaChunkMaxBytes/3),
		"escaped":    strings.Repeat("\x1b", protocol.ToolOutputDeltaChunkMaxBytes/3),
	}
	for name, chunk := range chunks {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.store.add("s1")
			conn := newFakeConn(t, "conn-a")
			res := h.openActive(conn, "s1")
			ev := protocol.SessionToolEvent{
				Type: protocol.ToolOutputDelta, ID: "event-1", TurnID: "turn-s1", TS: 1700000000000, ToolUseID: "tool-use-1",
				Seq: 7, Stream: "stderr", Chunk: chunk, Redacted: true, CreatedAt: 1700000000001,
			}
			h.accept("s1", Event{Type: protocol.ToolOutputDelta, TurnID: "turn-s1", Tool: ev})
			conn.flushAll()
			frames := conn.frames()
			requireGapless(t, res.SubscriptionID, frames)
			if len(frames) != 1 {
				t.Fatalf("got %s, want one event frame", describe(frames))
			}
			f, ok := frames[0].(protocol.EventFrame)
			if !ok {
				t.Fatalf("got %T", frames[0])
			}
			if f.SessionID != "s1" || f.RunID != "run-s1" || f.Event != ev {
				t.Fatalf("event not preserved: %+v", f)
			}
			requireStats(t, h.c, 1, 1)
		})
	}
}

// ---- guarantee 47 ----

func TestSeventeenthConcurrentSubscriptionIsAConflict(t *testing.T) {
	h := newHarness(t)
	conn := newFakeConn(t, "conn-a")
	other := newFakeConn(t, "conn-b")
	var subs []protocol.SubscriptionOpenResult
	for i := range MaxSubscriptionsPerConnection - 1 {
		id := fmt.Sprintf("s%d", i)
		h.store.add(id)
		subs = append(subs, h.openActive(conn, id))
	}
	// The sixteenth is still opening: it counts against the limit.
	h.store.add("blocked", "extra")
	entered, release := h.store.blockReads("blocked")
	defer release()
	opening := make(chan host.Outcome, 1)
	go func() { opening <- h.open(conn, "blocked") }()
	<-entered
	const limitMessage = "Runtime Host connection subscription limit reached"
	requireFailure(t, h.open(conn, "extra"), protocol.ErrOperationConflict, limitMessage)
	h.openActive(other, "extra") // the limit is per connection
	release()
	out := <-opening
	if out.Err != nil {
		t.Fatalf("sixteenth open: %v", out.Err)
	}
	out.AfterQueued(nil)
	requireFailure(t, h.open(conn, "extra"), protocol.ErrOperationConflict, limitMessage)

	closeOut := h.closeSub(conn, subs[0].SubscriptionID)
	if closeOut.Err != nil {
		t.Fatal(closeOut.Err)
	}
	h.openActive(conn, "extra")
	// 16 on conn-a and one on conn-b; s0 was dropped with its only subscriber.
	requireStats(t, h.c, MaxSubscriptionsPerConnection+1, MaxSubscriptionsPerConnection)
}

func TestSubscriptionClose(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	a := newFakeConn(t, "conn-a")
	b := newFakeConn(t, "conn-b")
	stranger := newFakeConn(t, "conn-never-subscribed")
	subA := h.openActive(a, "s1")
	subB := h.openActive(b, "s1")

	echo := func(out host.Outcome, id string) {
		t.Helper()
		if out.Err != nil {
			t.Fatalf("close: %s %s", out.Err.Code, out.Err.Message)
		}
		if r, ok := out.Result.(protocol.SubscriptionCloseResult); !ok || r.SubscriptionID != id {
			t.Fatalf("close result %#v", out.Result)
		}
		requireValidResult(t, protocol.OpSubscriptionClose, out.Result)
	}
	const notFound = "Session subscription was not found"
	// Another connection's subscription is not found and stays open.
	requireFailure(t, h.closeSub(b, subA.SubscriptionID), protocol.ErrNotFound, notFound)
	requireFailure(t, h.closeSub(stranger, subA.SubscriptionID), protocol.ErrNotFound, notFound)
	h.acceptText("s1", 1)
	a.flushAll()
	if n := len(a.framesOf(subA.SubscriptionID)); n != 1 {
		t.Fatalf("subscription got %d frames after a foreign close", n)
	}

	echo(h.closeSub(a, subA.SubscriptionID), subA.SubscriptionID)
	requireStats(t, h.c, 1, 1)
	h.acceptText("s1", 2)
	a.flushAll()
	b.flushAll()
	if n := len(a.framesOf(subA.SubscriptionID)); n != 1 {
		t.Fatalf("closed subscription got %d more frames", n-1)
	}
	// Already gone: idempotent.
	echo(h.closeSub(a, subA.SubscriptionID), subA.SubscriptionID)
	unknown := uuid.NewString()
	echo(h.closeSub(a, unknown), unknown)
	// The remaining subscriber is unaffected.
	frames := b.framesOf(subB.SubscriptionID)
	requireGapless(t, subB.SubscriptionID, frames)
	if len(frames) != 3 {
		t.Fatalf("sibling got %s", describe(frames))
	}
	echo(h.closeSub(b, subB.SubscriptionID), subB.SubscriptionID)
	requireStats(t, h.c, 0, 0)
}

func TestCloseResponseFollowsEveryFrameHandedToTheConnection(t *testing.T) {
	synctest.Test(t, testCloseResponseFollowsEveryFrameHandedToTheConnection)
}

func testCloseResponseFollowsEveryFrameHandedToTheConnection(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	conn := newFakeConn(t, "conn-a")
	res := h.openActive(conn, "s1")

	var mu sync.Mutex
	var log []string
	record := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	inSend, releaseSend := make(chan struct{}), make(chan struct{})
	conn.mu.Lock()
	conn.onSend = func() {
		close(inSend)
		<-releaseSend
		record("send")
	}
	conn.mu.Unlock()

	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		h.accept("s1", textEvent("s1", "racing the close"))
	}()
	<-inSend
	closed := make(chan host.Outcome, 1)
	go func() {
		out := h.closeSub(conn, res.SubscriptionID)
		record("close")
		closed <- out
	}()
	// The close must wait for the frame already taken from the queue:
	// once every goroutine is blocked, it has not answered.
	synctest.Wait()
	select {
	case <-closed:
		t.Fatal("subscription.close answered while one of its frames was still being handed to the connection")
	default:
	}
	close(releaseSend)
	if out := <-closed; out.Err != nil {
		t.Fatal(out.Err)
	}
	<-accepted
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(log, ",") != "send,close" {
		t.Fatalf("order %v", log)
	}
}

// ---- guarantee 48 ----

func TestSubscribersOfASessionShareProjectionRevisions(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	a, b, c := newFakeConn(t, "conn-a"), newFakeConn(t, "conn-b"), newFakeConn(t, "conn-c")
	subA := h.openActive(a, "s1")
	subB := h.openActive(b, "s1")
	if subA.Snapshot.ProjectionRevision != 1 || subB.Snapshot.ProjectionRevision != 1 {
		t.Fatalf("revisions %d and %d, want 1", subA.Snapshot.ProjectionRevision, subB.Snapshot.ProjectionRevision)
	}
	requireStats(t, h.c, 2, 1)

	h.refresh("s1") // unchanged: nothing is published
	if a.sentCount()+b.sentCount() != 0 {
		t.Fatal("an unchanged projection was published")
	}

	entry := protocol.MessageQueueEntrySnapshot{
		EntryID: "e1", MessageID: "m1", Content: protocol.MessageContent{Text: "queued"},
		Placement: protocol.PlacementNextTurn, State: protocol.MessageQueued,
	}
	h.store.update("s1", func(p *Projection) {
		p.Queue.QueueRevision = 1
		p.Queue.Followup = []protocol.MessageQueueEntrySnapshot{entry}
	})
	h.refresh("s1")
	h.refresh("s1")
	a.flushAll()
	b.flushAll()
	for _, x := range []struct {
		conn *fakeConn
		id   string
	}{{a, subA.SubscriptionID}, {b, subB.SubscriptionID}} {
		frames := x.conn.frames()
		requireGapless(t, x.id, frames)
		if len(frames) != 1 {
			t.Fatalf("got %s, want one projection", describe(frames))
		}
		p, ok := frames[0].(protocol.ProjectionFrame)
		if !ok || p.Snapshot.ProjectionRevision != 2 || len(p.Snapshot.Queue.Followup) != 1 || p.Snapshot.Queue.Followup[0].EntryID != "e1" {
			t.Fatalf("got %#v", frames[0])
		}
	}

	// A change seen first by another open is published to the existing
	// subscribers with the revision the new subscriber starts from.
	h.store.update("s1", func(p *Projection) { p.Session.LastUsedAt = 2 })
	subC := h.openActive(c, "s1")
	if subC.Snapshot.ProjectionRevision != 3 || subC.Snapshot.Session.LastUsedAt != 2 {
		t.Fatalf("third subscriber snapshot %+v", subC.Snapshot)
	}
	a.flushAll()
	b.flushAll()
	c.flushAll()
	for _, conn := range []*fakeConn{a, b} {
		frames := conn.frames()
		if len(frames) != 2 {
			t.Fatalf("got %s", describe(frames))
		}
		if p, ok := frames[1].(protocol.ProjectionFrame); !ok || p.Snapshot.ProjectionRevision != 3 {
			t.Fatalf("got %#v", frames[1])
		}
	}
	if n := c.sentCount(); n != 0 {
		t.Fatalf("new subscriber got %d frames for its own open", n)
	}
}

func TestInvalidProjectionIsNotPublished(t *testing.T) {
	h := newHarness(t)
	foreign := projection("s1")
	foreign.Queue.HostEpoch = "another-epoch"
	h.store.put(foreign)
	conn := newFakeConn(t, "conn-a")
	requireFailure(t, h.open(conn, "s1"), protocol.ErrInternalFailure, "")
	requireStats(t, h.c, 0, 0)

	h.store.add("s1")
	res := h.openActive(conn, "s1")
	h.store.update("s1", func(p *Projection) { p.RootTurn.SessionID = "s2" })
	if err := h.c.Refresh(context.Background(), "s1"); err == nil {
		t.Fatal("a projection whose root turn belongs to another session was accepted")
	}
	h.store.update("s1", func(p *Projection) { p.RootTurn.SessionID = "s1"; p.Session.LastUsedAt = 5 })
	h.refresh("s1")
	conn.flushAll()
	frames := conn.frames()
	requireGapless(t, res.SubscriptionID, frames)
	if len(frames) != 1 || frames[0].(protocol.ProjectionFrame).Snapshot.ProjectionRevision != 2 {
		t.Fatalf("got %s", describe(frames))
	}
}

// ---- lifecycle ----

func TestOpenOfUnknownSessionIsNotFound(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	conn := newFakeConn(t, "conn-a")
	for range MaxSubscriptionsPerConnection + 4 {
		requireFailure(t, h.open(conn, "missing"), protocol.ErrNotFound, "Session was not found")
	}
	requireStats(t, h.c, 0, 0)
	// Failed opens released their slots.
	for range MaxSubscriptionsPerConnection {
		h.openActive(conn, "s1")
	}
}

func TestDetachConnectionDropsItsSubscriptionsSilently(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1", "s2")
	a, b := newFakeConn(t, "conn-a"), newFakeConn(t, "conn-b")
	h.openActive(a, "s1")
	h.openActive(a, "s2")
	subB := h.openActive(b, "s2")
	h.store.update("s1", func(p *Projection) { p.Queue.QueueRevision = 4 })
	h.refresh("s1")
	h.acceptText("s2", 1) // frames in flight on both connections
	sentBefore := a.sentCount()

	h.c.DetachConnection("conn-a")
	requireStats(t, h.c, 1, 1)
	a.flushAll()
	h.acceptText("s1", 1)
	h.acceptText("s2", 1)
	a.flushAll()
	b.flushAll()
	if n := a.sentCount(); n != sentBefore {
		t.Fatalf("detached connection got %d more frames", n-sentBefore)
	}
	frames := b.framesOf(subB.SubscriptionID)
	requireGapless(t, subB.SubscriptionID, frames)
	if len(frames) != 2 {
		t.Fatalf("remaining subscriber got %s", describe(frames))
	}
	// Nothing of the connection is kept (a detached connection sends no
	// more requests; keeping tombstones would grow without bound): a close
	// from it is an idempotent close of an id that is gone.
	if out := h.closeSub(a, uuid.NewString()); out.Err != nil {
		t.Fatalf("close after detach: %+v", out.Err)
	}
	if subs, _ := h.c.Stats(); subs != 1 {
		t.Fatalf("%d subscriptions after detach, want 1", subs)
	}
	h.c.DetachConnection("conn-a")       // idempotent
	h.c.DetachConnection("conn-unknown") // never subscribed

	// s1's publication state was dropped: a new open starts at revision 1.
	res := h.openActive(b, "s1")
	if res.Snapshot.ProjectionRevision != 1 || res.Snapshot.Queue.QueueRevision != 4 {
		t.Fatalf("reopened snapshot %+v", res.Snapshot)
	}
}

func TestSendFailureRemovesTheSubscriberSilently(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	conn := newFakeConn(t, "conn-a")
	h.openActive(conn, "s1")
	h.acceptText("s1", 2)
	if !conn.completeNext("", errors.New("write failed")) {
		t.Fatal("no frame in flight")
	}
	requireStats(t, h.c, 0, 0)
	if conn.pendingCount() != 0 || conn.sentCount() != 1 {
		t.Fatalf("%d sent, %d pending after a failed write", conn.sentCount(), conn.pendingCount())
	}

	refusing := newFakeConn(t, "conn-b")
	refusing.sendErr = host.ErrWriterClosed
	h.openActive(refusing, "s1")
	h.acceptText("s1", 1)
	requireStats(t, h.c, 0, 0)
}

func TestCloseTearsDownAndRefusesLaterOpens(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	conn := newFakeConn(t, "conn-a")
	h.openActive(conn, "s1")
	h.acceptText("s1", 3)
	h.c.Close()
	requireStats(t, h.c, 0, 0)
	conn.flushAll()
	if n := conn.sentCount(); n != 1 {
		t.Fatalf("%d frames sent, want only the one in flight before Close", n)
	}
	requireFailure(t, h.open(conn, "s1"), protocol.ErrInternalFailure, "")
	requireStats(t, h.c, 0, 0)
	if err := h.c.AcceptRuntimeEvent("s1", "run-s1", textEvent("s1", "x")); err != nil {
		t.Fatalf("event after close: %v", err)
	}
	if err := h.c.Refresh(context.Background(), "s1"); err != nil {
		t.Fatalf("refresh after close: %v", err)
	}
	if n := h.store.readCount("s1"); n != 1 {
		t.Fatalf("%d projection reads, want only the open's", n)
	}
}

func TestNoticesReachOnlySubscriptionsThatAskedForThem(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	plain, asked := newFakeConn(t, "conn-v0"), newFakeConn(t, "conn-notices")
	h.openActive(plain, "s1")
	res := h.openActive(asked, "s1")
	// Only the subscription's own connection may ask for its notices.
	if out := h.call(plain, protocol.OpSubscriptionNoticesSet, protocol.SubscriptionNoticesSetInput{SubscriptionID: res.SubscriptionID, Enabled: true}); out.Err == nil || out.Err.Code != protocol.ErrNotFound {
		t.Fatalf("notices.set from another connection: %+v", out)
	}
	if out := h.call(asked, protocol.OpSubscriptionNoticesSet, protocol.SubscriptionNoticesSetInput{SubscriptionID: res.SubscriptionID, Enabled: true}); out.Err != nil {
		t.Fatalf("notices.set: %+v", out.Err)
	}
	n := protocol.SessionNotice{Kind: protocol.NoticeContextCompacted, TurnID: "turn-s1", BeforeTokens: 900, AfterTokens: 300, Message: "context compacted (900 → 300 tokens)"}
	h.c.PublishNotice("s1", n)
	h.acceptText("s1", 1)
	plain.flushAll()
	asked.flushAll()
	if frames := plain.frames(); len(frames) != 1 {
		t.Fatalf("v0 subscription got %s, want only the delta", describe(frames))
	}
	frames := asked.frames()
	requireGapless(t, res.SubscriptionID, frames)
	if len(frames) != 2 {
		t.Fatalf("got %s, want the notice and the delta", describe(frames))
	}
	if f, ok := frames[0].(protocol.NoticeFrame); !ok || f.Notice != n || f.SessionID != "s1" {
		t.Fatalf("frame 0: %#v", frames[0])
	}
}
