// Package continuity owns session subscriptions: the canonical projection
// each subscriber sees, per-subscription gapless sequences, live deltas and
// tool events, and slow-consumer eviction (docs/architecture.md, "The path
// of live session output").
//
// Every subscriber has its own bounded queue; at most one of its frames is on
// the connection's writer at a time. A subscriber that falls 31 frames or
// 256 KiB behind is evicted with one subscription.closed{slow_consumer}
// frame; producers never block on a slow reader, and sibling subscriptions
// and the connection are unaffected.
package continuity

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/google/uuid"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/protocol"
)

// Bounds of subscriptions: per connection, and per subscriber before it is
// evicted as a slow consumer.
const (
	MaxSubscriptionsPerConnection = 16
	SubscriberMaxFrames           = 32
	SubscriberMaxBytes            = 256 * 1024
)

// Projection is the canonical state of a session, read from the durable
// stores and the in-memory queue authority.
type Projection struct {
	Session      protocol.SessionContinuityIdentity
	RootTurn     *protocol.TurnSnapshot
	Queue        protocol.SessionMessageQueueProjection
	Interactions protocol.InteractionProjection
}

// ProjectionReader reads the canonical projection of a session; found is
// false when the session does not exist.
type ProjectionReader func(ctx context.Context, sessionID string) (p Projection, found bool, err error)

// Event is a live runtime event to forward to subscribers.
type Event struct {
	// Type is text_delta, thinking_delta, or a tool event type
	// (tool_start, tool_output_delta, tool_progress, tool_result).
	Type      string
	TurnID    string
	MessageID string // deltas
	Text      string // deltas
	// Tool is the wire form of a tool event; its Type equals Type and its
	// TurnID equals TurnID.
	Tool protocol.SessionToolEvent
}

// Event types of assistant deltas.
const (
	TextDelta     = "text_delta"
	ThinkingDelta = "thinking_delta"
)

// ErrNotCanonicalRoot rejects an event that does not belong to the session's
// canonical, non-terminal root turn.
var ErrNotCanonicalRoot = errors.New("continuity: event does not belong to the canonical active root turn")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("continuity: coordinator closed")

// Publisher is the session continuity owner of one host epoch.
type Publisher struct {
	epoch string
	read  ProjectionReader
	gate  *lane.Gate
	log   *slog.Logger

	mu       sync.Mutex
	closed   bool
	sessions map[string]*sessionState
	conns    map[string]*connState
	subs     map[string]*subscriber
}

type sessionState struct {
	id          string
	projection  Projection
	encoded     []byte // canonical encoding, for change detection
	revision    int64
	subscribers map[*subscriber]struct{}
	// fence is the root turn whose terminal snapshot only
	// PublishTerminal may publish (fence.go); nil when none.
	fence *rootIdentity
	// log is the replay of the fenced root turn's live events so far
	// (replay.go); nil when no fence is held.
	log *turnLog
}

type connState struct {
	id    string
	count int // open + opening
	subs  map[*subscriber]struct{}
	gone  bool
}

// New returns a coordinator for hostEpoch that reads projections with read
// and serialises its reads with the session lanes of gate.
func New(hostEpoch string, read ProjectionReader, gate *lane.Gate, log *slog.Logger) *Publisher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Publisher{
		epoch:    hostEpoch,
		read:     read,
		gate:     gate,
		log:      log,
		sessions: make(map[string]*sessionState),
		conns:    make(map[string]*connState),
		subs:     make(map[string]*subscriber),
	}
}

// Handlers returns the subscription.open and subscription.close handlers.
func (c *Publisher) Handlers() host.Handlers {
	return host.Handlers{
		protocol.OpSubscriptionOpen:  c.open,
		protocol.OpSubscriptionClose: c.close,
		// An extension (docs/protocol.md): notices are opt-in per
		// subscription, so a v0 client never receives a frame it
		// cannot decode.
		protocol.OpSubscriptionNoticesSet: c.setNotices,
	}
}

// setNotices serves subscription.notices.set for a subscription of the
// calling connection.
func (c *Publisher) setNotices(_ context.Context, call *host.Call) host.Outcome {
	in := call.Input.(protocol.SubscriptionNoticesSetInput)
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.subs[in.SubscriptionID]
	if s == nil || s.connState == nil || s.connState.id != call.Conn.ConnectionID || s.connState.gone {
		return host.Fail(protocol.ErrNotFound, "Session subscription was not found")
	}
	s.notices = in.Enabled
	return host.OK(in)
}

func (c *Publisher) snapshot(st *sessionState) protocol.SessionContinuitySnapshot {
	p := st.projection
	return protocol.SessionContinuitySnapshot{
		SchemaVersion:      1,
		Session:            p.Session,
		ProjectionRevision: st.revision,
		RootTurn:           p.RootTurn,
		Queue:              p.Queue,
		Interactions:       p.Interactions,
	}
}

func encodeProjection(p Projection) ([]byte, error) {
	return protocol.Marshal(struct {
		Session      protocol.SessionContinuityIdentity     `json:"session"`
		RootTurn     *protocol.TurnSnapshot                 `json:"rootTurn"`
		Queue        protocol.SessionMessageQueueProjection `json:"queue"`
		Interactions protocol.InteractionProjection         `json:"interactions"`
	}{p.Session, p.RootTurn, p.Queue, p.Interactions})
}

// validateSnapshot checks that a projection published at revision encodes
// as a wire snapshot the clients accept: within 56 KiB,
// its queue of this host epoch, its root turn and interactions of the
// session. A snapshot that fails here would make every subscriber's
// connection fail on decode.
func (c *Publisher) validateSnapshot(sessionID string, p Projection, revision int64) error {
	snap := protocol.SessionContinuitySnapshot{
		SchemaVersion: protocol.SessionContinuitySchemaVersion, Session: p.Session, ProjectionRevision: revision,
		RootTurn: p.RootTurn, Queue: p.Queue, Interactions: p.Interactions,
	}
	b, err := protocol.Marshal(snap)
	if err != nil {
		return fmt.Errorf("continuity: session %s projection: %w", sessionID, err)
	}
	v, err := protocol.Parse(b)
	if err != nil {
		return fmt.Errorf("continuity: session %s projection: %w", sessionID, err)
	}
	got, err := protocol.DecodeSessionContinuitySnapshot(v)
	switch {
	case err != nil:
		return fmt.Errorf("continuity: session %s projection: %w", sessionID, err)
	case got.Session.SessionID != sessionID:
		return fmt.Errorf("continuity: projection of session %s names session %s", sessionID, got.Session.SessionID)
	case got.Queue.HostEpoch != c.epoch:
		return fmt.Errorf("continuity: session %s projection queue belongs to host epoch %s", sessionID, got.Queue.HostEpoch)
	}
	return nil
}

// commitLocked installs p as the session's canonical projection. If it
// changed (or the state is new), the revision advances and existing
// subscribers get a projection frame. It returns subscribers to pump. A
// projection that is not a valid wire snapshot is not committed.
func (c *Publisher) commitLocked(sessionID string, p Projection, create bool) (*sessionState, []*subscriber, error) {
	enc, err := encodeProjection(p)
	if err != nil {
		return nil, nil, err
	}
	st := c.sessions[sessionID]
	if st == nil {
		if !create {
			return nil, nil, nil
		}
		if err := c.validateSnapshot(sessionID, p, 1); err != nil {
			return nil, nil, err
		}
		st = &sessionState{id: sessionID, subscribers: make(map[*subscriber]struct{})}
		st.projection, st.encoded, st.revision = p, enc, 1
		c.sessions[sessionID] = st
		return st, nil, nil
	}
	if bytes.Equal(enc, st.encoded) || st.fence.holdsBack(p.RootTurn) {
		return st, nil, nil
	}
	if err := c.validateSnapshot(sessionID, p, st.revision+1); err != nil {
		return nil, nil, err
	}
	st.projection, st.encoded = p, enc
	st.revision++
	var touched []*subscriber
	snap := c.snapshot(st)
	for s := range st.subscribers {
		if s.pushLocked(func(seq int64) any {
			return protocol.ProjectionFrame{HostEpoch: c.epoch, SubscriptionID: s.id, Sequence: seq, Snapshot: snap}
		}) {
			touched = append(touched, s)
		}
	}
	return st, touched, nil
}

func pumpAll(subs []*subscriber) {
	for _, s := range subs {
		s.pump()
	}
}

// open serves subscription.open.
func (c *Publisher) open(ctx context.Context, call *host.Call) host.Outcome {
	in := call.Input.(protocol.SubscriptionOpenInput)
	connID := call.Conn.ConnectionID
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return host.Fail(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
	}
	cs := c.conns[connID]
	if cs == nil {
		cs = &connState{id: connID, subs: make(map[*subscriber]struct{})}
		c.conns[connID] = cs
	}
	if cs.gone {
		c.mu.Unlock()
		return host.Fail(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
	}
	if cs.count >= MaxSubscriptionsPerConnection {
		c.mu.Unlock()
		return host.Fail(protocol.ErrOperationConflict, "Runtime Host connection subscription limit reached")
	}
	cs.count++
	c.mu.Unlock()

	var sub *subscriber
	var result protocol.SubscriptionOpenResult
	var notFound bool
	err := c.gate.Run(ctx, in.SessionID, func(ctx context.Context, _ *lane.Lease) error {
		p, found, err := c.read(ctx, in.SessionID)
		if err != nil {
			return err
		}
		if !found {
			notFound = true
			return nil
		}
		c.mu.Lock()
		if c.closed || cs.gone {
			c.mu.Unlock()
			return ErrClosed
		}
		st, touched, err := c.commitLocked(in.SessionID, p, true)
		if err != nil {
			c.mu.Unlock()
			return err
		}
		sub = newSubscriber(c, st, call.Conn, cs)
		st.subscribers[sub] = struct{}{}
		cs.subs[sub] = struct{}{}
		c.subs[sub.id] = sub
		if st.log != nil && st.fence != nil {
			// After the snapshot, what the running root turn produced
			// before this subscription (replay.go).
			sub.replay = st.log.items(st.fence.turnID)
			sub.replayNext = sub.nextSeq
			sub.nextSeq += int64(len(sub.replay))
		}
		result = protocol.SubscriptionOpenResult{
			HostEpoch: c.epoch, SubscriptionID: sub.id, NextSequence: 1, Snapshot: c.snapshot(st),
		}
		c.mu.Unlock()
		pumpAll(touched)
		return nil
	})
	if err != nil || notFound {
		c.mu.Lock()
		cs.count--
		if cs.count == 0 && len(cs.subs) == 0 && c.conns[connID] == cs {
			delete(c.conns, connID)
		}
		c.dropIfUnusedLocked(in.SessionID)
		c.mu.Unlock()
		if notFound {
			return host.Fail(protocol.ErrNotFound, "Session was not found")
		}
		c.log.Error("subscription open failed", "session", in.SessionID, "err", err)
		return host.Fail(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
	}
	return host.Outcome{Result: result, AfterQueued: func(err error) {
		if err != nil {
			c.remove(sub)
			return
		}
		c.mu.Lock()
		sub.active = true
		c.mu.Unlock()
		sub.pump()
	}}
}

// close serves subscription.close.
func (c *Publisher) close(_ context.Context, call *host.Call) host.Outcome {
	in := call.Input.(protocol.SubscriptionCloseInput)
	c.mu.Lock()
	// A live connection without subscription state has nothing open: its
	// close of an id is idempotent unless the id is another connection's.
	cs := c.conns[call.Conn.ConnectionID]
	if cs != nil && cs.gone {
		c.mu.Unlock()
		return host.Fail(protocol.ErrNotFound, "Session subscription was not found")
	}
	s := c.subs[in.SubscriptionID]
	if s != nil && s.connState != cs {
		c.mu.Unlock()
		return host.Fail(protocol.ErrNotFound, "Session subscription was not found")
	}
	if s != nil {
		c.removeLocked(s)
	}
	c.mu.Unlock()
	if s != nil {
		// A frame taken from the queue just before the removal may still be
		// on its way to the connection; it must be queued there before this
		// response so that nothing of the subscription follows it.
		s.sending.Wait()
	}
	return host.OK(protocol.SubscriptionCloseResult{SubscriptionID: in.SubscriptionID})
}

// DetachConnection silently removes every subscription of a connection.
func (c *Publisher) DetachConnection(connectionID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := c.conns[connectionID]
	if cs == nil {
		return // never subscribed: nothing to drop
	}
	cs.gone = true
	for s := range cs.subs {
		c.removeLocked(s)
	}
	if cs.count == 0 {
		delete(c.conns, connectionID)
	}
}

func (c *Publisher) remove(s *subscriber) {
	c.mu.Lock()
	c.removeLocked(s)
	c.mu.Unlock()
}

func (c *Publisher) removeLocked(s *subscriber) {
	if s.removed {
		return
	}
	s.removed = true
	s.queue, s.replay = nil, nil
	delete(c.subs, s.id)
	delete(s.st.subscribers, s)
	if _, ok := s.connState.subs[s]; ok {
		delete(s.connState.subs, s)
		s.connState.count--
	}
	if cs := s.connState; cs.count == 0 && c.conns[cs.id] == cs {
		delete(c.conns, cs.id)
	}
	c.dropIfUnusedLocked(s.st.id)
}

// dropIfUnusedLocked forgets a session's publication state once nobody
// subscribes and no terminal fence is held: a later open starts again at
// revision 1.
func (c *Publisher) dropIfUnusedLocked(sessionID string) {
	if st := c.sessions[sessionID]; st != nil && len(st.subscribers) == 0 && st.fence == nil {
		delete(c.sessions, sessionID)
	}
}

// Refresh re-reads the canonical projection of a subscribed session and
// publishes it if it changed. It runs in the session's lane; call
// RefreshInLane from inside a lane op.
func (c *Publisher) Refresh(ctx context.Context, sessionID string) error {
	return c.gate.Run(ctx, sessionID, func(ctx context.Context, _ *lane.Lease) error {
		return c.RefreshInLane(ctx, sessionID)
	})
}

// RefreshInLane is Refresh for a caller already inside sessionID's lane.
func (c *Publisher) RefreshInLane(ctx context.Context, sessionID string) error {
	c.mu.Lock()
	_, subscribed := c.sessions[sessionID]
	closed := c.closed
	c.mu.Unlock()
	if closed || !subscribed {
		return nil
	}
	p, found, err := c.read(ctx, sessionID)
	if err != nil || !found {
		return err
	}
	c.mu.Lock()
	_, touched, err := c.commitLocked(sessionID, p, false)
	c.mu.Unlock()
	pumpAll(touched)
	return err
}

// AcceptRuntimeEvent forwards one live event of runID to the session's
// subscribers. Empty deltas and empty tool output or progress chunks, and
// events of sessions nobody subscribes to, are dropped; an event that does
// not belong to the canonical active root is rejected with
// ErrNotCanonicalRoot, and an event of an unknown type with another error.
func (c *Publisher) AcceptRuntimeEvent(sessionID, runID string, ev Event) error {
	switch ev.Type {
	case TextDelta, ThinkingDelta:
		if ev.Text == "" {
			return nil
		}
	case protocol.ToolStart, protocol.ToolOutputDelta, protocol.ToolProgress, protocol.ToolResult:
		if ev.Tool.Type != ev.Type {
			return fmt.Errorf("continuity: %s event carries a %q tool event", ev.Type, ev.Tool.Type)
		}
		if (ev.Type == protocol.ToolOutputDelta || ev.Type == protocol.ToolProgress) && ev.Tool.Chunk == "" {
			return nil
		}
	default:
		return fmt.Errorf("continuity: unknown event type %q", ev.Type)
	}
	c.mu.Lock()
	st := c.sessions[sessionID]
	if c.closed || st == nil {
		c.mu.Unlock()
		return nil
	}
	root := st.projection.RootTurn
	toolTurnMismatch := ev.Type != TextDelta && ev.Type != ThinkingDelta && ev.Tool.TurnID != ev.TurnID
	canonical := root != nil && root.TurnID == ev.TurnID && root.RunID == runID && !root.Status.Terminal() && !toolTurnMismatch
	if canonical && st.log != nil && st.fence != nil && *st.fence == (rootIdentity{ev.TurnID, runID}) {
		st.log.add(ev)
	}
	if len(st.subscribers) == 0 {
		c.mu.Unlock()
		return nil
	}
	if !canonical {
		c.mu.Unlock()
		return fmt.Errorf("%w: session %s turn %s run %s", ErrNotCanonicalRoot, sessionID, ev.TurnID, runID)
	}
	var frames []func(sub *subscriber, seq int64) any
	switch ev.Type {
	case TextDelta, ThinkingDelta:
		kind := protocol.DeltaText
		if ev.Type == ThinkingDelta {
			kind = protocol.DeltaThinking
		}
		for _, chunk := range protocol.SplitDelta(ev.Text) {
			delta := protocol.SessionAssistantDelta{Kind: kind, TurnID: ev.TurnID, RunID: runID, MessageID: ev.MessageID, Text: chunk}
			frames = append(frames, func(sub *subscriber, seq int64) any {
				return protocol.DeltaFrame{HostEpoch: c.epoch, SubscriptionID: sub.id, Sequence: seq, SessionID: sessionID, Delta: delta}
			})
		}
	default:
		tool := ev.Tool
		frames = append(frames, func(sub *subscriber, seq int64) any {
			return protocol.EventFrame{HostEpoch: c.epoch, SubscriptionID: sub.id, Sequence: seq, SessionID: sessionID, RunID: runID, Event: tool}
		})
	}
	var touched []*subscriber
	for s := range st.subscribers {
		pushed := false
		for _, build := range frames {
			if s.pushLocked(func(seq int64) any { return build(s, seq) }) {
				pushed = true
			}
		}
		if pushed {
			touched = append(touched, s)
		}
	}
	c.mu.Unlock()
	pumpAll(touched)
	return nil
}

// PublishNotice sends a notice about sessionID to its subscribers that
// asked for notices (subscription.open with notices); the others, v0
// clients among them, never see one. Like runtime events, a notice is
// live only: a subscriber that falls behind is evicted.
func (c *Publisher) PublishNotice(sessionID string, n protocol.SessionNotice) {
	c.mu.Lock()
	st := c.sessions[sessionID]
	if c.closed || st == nil {
		c.mu.Unlock()
		return
	}
	var touched []*subscriber
	for s := range st.subscribers {
		if !s.notices {
			continue
		}
		if s.pushLocked(func(seq int64) any {
			return protocol.NoticeFrame{HostEpoch: c.epoch, SubscriptionID: s.id, Sequence: seq, SessionID: sessionID, Notice: n}
		}) {
			touched = append(touched, s)
		}
	}
	c.mu.Unlock()
	pumpAll(touched)
}

// Close tears every subscription down without frames; later opens fail.
func (c *Publisher) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, s := range c.subs {
		s.removed = true
		s.queue, s.replay = nil, nil
	}
	c.subs = map[string]*subscriber{}
	c.sessions = map[string]*sessionState{}
	c.conns = map[string]*connState{}
}

// Stats reports the number of live subscriptions and sessions with
// publication state (for tests and diagnostics).
func (c *Publisher) Stats() (subscriptions, sessions int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.subs), len(c.sessions)
}

// ---- subscriber ----

type frame struct {
	seq     int64
	data    []byte
	closing bool
}

type subscriber struct {
	c         *Publisher
	id        string
	st        *sessionState
	conn      *host.ConnInfo
	connState *connState

	// guarded by c.mu
	notices     bool // asked for notice frames (subscription.notices.set)
	active      bool
	removed     bool
	evicted     bool
	queue       []frame // not yet handed to the connection
	queuedBytes int     // queue + in-flight frame
	inFlight    *frame
	lastFlushed int64
	nextSeq     int64
	// replay is the running turn's frames before the subscription opened
	// (replay.go), numbered from replayNext; held outside the bounded
	// queue and sent before it.
	replay     []replayItem
	replayNext int64

	// sending counts pump calls between taking a frame from the queue and
	// Send returning; Add happens under c.mu and only while not removed.
	sending sync.WaitGroup

	closedReserve int
}

func newSubscriber(c *Publisher, st *sessionState, conn *host.ConnInfo, cs *connState) *subscriber {
	s := &subscriber{c: c, id: uuid.NewString(), st: st, conn: conn, connState: cs, nextSeq: 1}
	// The closing frame's size is reserved in the byte bound so that an
	// eviction always fits.
	b, _ := protocol.EncodeFrame(protocol.ClosedFrame{
		HostEpoch: c.epoch, SubscriptionID: s.id, Sequence: protocol.MaxSafeInteger, Reason: protocol.CloseSlowConsumer,
	})
	s.closedReserve = len(b)
	return s
}

// pushLocked queues one frame built for the next sequence number, evicting
// the subscriber instead when it is too far behind. It reports whether the
// subscriber needs pumping.
func (s *subscriber) pushLocked(build func(seq int64) any) bool {
	if s.removed || s.evicted {
		return false
	}
	data, err := protocol.EncodeFrame(build(s.nextSeq))
	backlog := len(s.queue)
	if s.inFlight != nil {
		backlog++
	}
	if err != nil || backlog >= SubscriberMaxFrames-1 ||
		s.queuedBytes+len(data)+s.closedReserve > SubscriberMaxBytes {
		s.evictLocked()
		return true
	}
	s.queue = append(s.queue, frame{seq: s.nextSeq, data: data})
	s.queuedBytes += len(data)
	s.nextSeq++
	return true
}

// evictLocked discards unsent frames and queues subscription.closed with
// the sequence after the last frame the client will actually receive.
func (s *subscriber) evictLocked() {
	s.evicted = true
	s.queue, s.replay = nil, nil
	s.queuedBytes = 0
	seq := s.lastFlushed + 1
	if s.inFlight != nil {
		seq = s.inFlight.seq + 1
		s.queuedBytes = len(s.inFlight.data)
	}
	data, _ := protocol.EncodeFrame(protocol.ClosedFrame{
		HostEpoch: s.c.epoch, SubscriptionID: s.id, Sequence: seq, Reason: protocol.CloseSlowConsumer,
	})
	s.queue = []frame{{seq: seq, data: data, closing: true}}
	s.queuedBytes += len(data)
	s.nextSeq = seq + 1
}

// pump hands the next queued frame to the connection if none is in flight.
// Called without c.mu held: Send may fail the connection synchronously.
func (s *subscriber) pump() {
	c := s.c
	c.mu.Lock()
	if !s.active || s.removed || s.inFlight != nil {
		c.mu.Unlock()
		return
	}
	if len(s.replay) > 0 {
		s.takeReplayLocked()
	}
	if len(s.queue) == 0 {
		c.mu.Unlock()
		return
	}
	f := s.queue[0]
	s.queue = s.queue[1:]
	s.inFlight = &f
	s.sending.Add(1)
	c.mu.Unlock()
	err := s.conn.Send(f.data, func(err error) { s.flushed(f, err) })
	s.sending.Done()
	if err != nil {
		c.remove(s)
	}
}

// takeReplayLocked moves the next replay frame to the head of the queue,
// counted in the byte bound only while it is queued or in flight. A frame
// that does not encode evicts the subscriber.
func (s *subscriber) takeReplayLocked() {
	it := s.replay[0]
	s.replay = s.replay[1:]
	data, err := protocol.EncodeFrame(it.build(s, s.replayNext))
	if err != nil {
		s.evictLocked()
		return
	}
	s.queue = append([]frame{{seq: s.replayNext, data: data}}, s.queue...)
	s.queuedBytes += len(data)
	s.replayNext++
}

func (s *subscriber) flushed(f frame, err error) {
	c := s.c
	c.mu.Lock()
	s.inFlight = nil
	s.queuedBytes -= len(f.data)
	if err != nil || f.closing {
		c.removeLocked(s)
		c.mu.Unlock()
		return
	}
	s.lastFlushed = f.seq
	c.mu.Unlock()
	s.pump()
}
