package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/maka-agent/maka/protocol"
)

// SubscriptionFailure is why a subscription failed locally.
type SubscriptionFailure string

// Subscription failure reasons.
const (
	SubscriptionSequenceGap        SubscriptionFailure = "sequence_gap"
	SubscriptionHostEpochChanged   SubscriptionFailure = "host_epoch_changed"
	SubscriptionCorrelationChanged SubscriptionFailure = "correlation_changed"
	SubscriptionRevisionInvalid    SubscriptionFailure = "projection_revision_invalid"
	SubscriptionSlowConsumer       SubscriptionFailure = "slow_consumer"
	SubscriptionConnectionClosed   SubscriptionFailure = "connection_closed"
)

// SubscriptionError is returned by Next once a subscription has failed.
type SubscriptionError struct{ Reason SubscriptionFailure }

func (e *SubscriptionError) Error() string { return "session subscription failed: " + string(e.Reason) }

// Local buffer bounds of a subscription.
const (
	subscriptionMaxFrames = 32
	subscriptionMaxBytes  = 256 * 1024
)

// Subscription follows one session's live frames. Frames are delivered in
// sequence; Next returns io.EOF after a subscription.closed frame (which is
// itself delivered first) or after Close.
type Subscription struct {
	c         *Conn
	id        string
	sessionID string
	// Open is the subscription.open result, with the initial snapshot.
	Open protocol.SubscriptionOpenResult

	mu          sync.Mutex
	expected    int64
	revision    int64
	queue       []pushItem
	queuedBytes int
	closedSeen  bool // subscription.closed received
	ended       bool // no more frames will be queued
	failed      error
	wake        chan struct{}
}

type pushItem struct {
	frame any
	size  int
}

// ID returns the subscription id.
func (s *Subscription) ID() string { return s.id }

// SubscriptionOption configures OpenSubscription.
type SubscriptionOption func(*subscriptionOptions)

type subscriptionOptions struct{ notices bool }

// WithNotices asks for the session's notice frames too
// (protocol.NoticeFrame) with subscription.notices.set, an extension of
// docs/protocol.md, once the subscription is open; a notice published
// before that is not received.
func WithNotices() SubscriptionOption {
	return func(o *subscriptionOptions) { o.notices = true }
}

// OpenSubscription calls subscription.open and registers the subscription
// before any of its frames can be read.
func (c *Conn) OpenSubscription(ctx context.Context, sessionID string, opts ...SubscriptionOption) (*Subscription, error) {
	in := protocol.SubscriptionOpenInput{SessionID: sessionID}
	var o subscriptionOptions
	for _, opt := range opts {
		opt(&o)
	}
	var sub *Subscription
	// A subscription opened after the caller gave up is closed again, and
	// its frames are dropped meanwhile.
	late := func(r any) {
		if open, ok := r.(protocol.SubscriptionOpenResult); ok {
			c.retireID(open.SubscriptionID)
		}
	}
	res, err := c.callLate(ctx, protocol.OpSubscriptionOpen, in, func(r any) error {
		open, ok := r.(protocol.SubscriptionOpenResult)
		switch {
		case !ok:
			return fmt.Errorf("subscription.open: unexpected result %T", r)
		case open.HostEpoch != c.hostEpoch:
			return &SubscriptionError{Reason: SubscriptionHostEpochChanged}
		case open.Snapshot.Session.SessionID != sessionID:
			return &SubscriptionError{Reason: SubscriptionCorrelationChanged}
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, dup := c.subs[open.SubscriptionID]; dup {
			return &SubscriptionError{Reason: SubscriptionCorrelationChanged}
		}
		// Registered here, in the reader goroutine, so frames that follow the
		// response are routed to it.
		sub = &Subscription{
			c: c, id: open.SubscriptionID, sessionID: sessionID, Open: open,
			expected: open.NextSequence, revision: open.Snapshot.ProjectionRevision,
			wake: make(chan struct{}, 1),
		}
		c.subs[open.SubscriptionID] = sub
		return nil
	}, late)
	if err != nil {
		return nil, err
	}
	_ = res
	if o.notices {
		if _, err := c.call(ctx, protocol.OpSubscriptionNoticesSet,
			protocol.SubscriptionNoticesSetInput{SubscriptionID: sub.id, Enabled: true}, nil); err != nil {
			_ = sub.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return sub, nil
}

// routePush delivers a subscription frame; an error fails the connection.
func (c *Conn) routePush(frame any, raw protocol.Value) error {
	idv, _ := raw.Get("subscriptionId")
	id := idv.Str()
	c.mu.Lock()
	s, ok := c.subs[id]
	_, retired := c.retired[id]
	c.mu.Unlock()
	if !ok {
		if retired {
			return nil
		}
		return fmt.Errorf("frame for unknown subscription %q", id)
	}
	if reason := s.accept(frame, raw); reason != "" {
		c.retire(s, reason)
	}
	return nil
}

// retire fails one subscription locally and asks the host to close it.
func (c *Conn) retire(s *Subscription, reason SubscriptionFailure) {
	c.mu.Lock()
	delete(c.subs, s.id)
	c.mu.Unlock()
	s.failLocal(reason)
	c.retireID(s.id)
}

// retireID drops the frames of subscription id from now on and asks the
// host to close it; once the host has answered, the id is forgotten. A
// failing close fails the connection.
func (c *Conn) retireID(id string) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.retired[id] = struct{}{}
	c.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultRequestTimeout)
		defer cancel()
		_, err := c.call(ctx, protocol.OpSubscriptionClose, protocol.SubscriptionCloseInput{SubscriptionID: id}, nil)
		// not_found: the host no longer has it (it evicted it), which is
		// what the close wanted.
		if err != nil && !IsCode(err, protocol.ErrNotFound) && !errors.Is(err, ErrConnectionClosed) && c.Err() == nil {
			c.fail(fmt.Errorf("closing failed subscription: %w", err))
			return
		}
		c.mu.Lock()
		delete(c.retired, id)
		c.mu.Unlock()
	}()
}

// accept applies the client-side checks of one frame; it returns a failure
// reason, or "".
func (s *Subscription) accept(frame any, raw protocol.Value) SubscriptionFailure {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		if s.closedSeen {
			return SubscriptionCorrelationChanged
		}
		return ""
	}
	str := func(k string) string { v, _ := raw.Get(k); return v.Str() }
	if str("hostEpoch") != s.Open.HostEpoch {
		return SubscriptionHostEpochChanged
	}
	seqv, _ := raw.Get("sequence")
	if int64(seqv.Number()) != s.expected {
		return SubscriptionSequenceGap
	}
	s.expected++
	kindv, _ := raw.Get("kind")
	switch kindv.Str() {
	case protocol.KindSubscriptionProjection:
		snap, _ := raw.Get("snapshot")
		sess, _ := snap.Get("session")
		sid, _ := sess.Get("sessionId")
		if sid.Str() != s.sessionID {
			return SubscriptionCorrelationChanged
		}
		rev, _ := snap.Get("projectionRevision")
		if int64(rev.Number()) <= s.revision {
			return SubscriptionRevisionInvalid
		}
		s.revision = int64(rev.Number())
	case protocol.KindSubscriptionDelta, protocol.KindSubscriptionEvent, protocol.KindSubscriptionNotice:
		if str("sessionId") != s.sessionID {
			return SubscriptionCorrelationChanged
		}
	}
	size, _ := protocol.EncodedSize(raw)
	size++
	if len(s.queue) >= subscriptionMaxFrames || s.queuedBytes+size > subscriptionMaxBytes {
		return SubscriptionSlowConsumer
	}
	s.queue = append(s.queue, pushItem{frame: frame, size: size})
	s.queuedBytes += size
	if kindv.Str() == protocol.KindSubscriptionClosed {
		s.closedSeen = true
		s.ended = true
		s.c.mu.Lock()
		delete(s.c.subs, s.id)
		s.c.mu.Unlock()
	}
	s.signal()
	return ""
}

func (s *Subscription) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Subscription) failLocal(reason SubscriptionFailure) {
	s.mu.Lock()
	if s.failed == nil && !(s.ended && s.closedSeen) {
		s.failed = &SubscriptionError{Reason: reason}
		s.queue = nil
		s.queuedBytes = 0
	}
	s.ended = true
	s.mu.Unlock()
	s.signal()
}

// Next returns the next push frame: a protocol.ProjectionFrame, DeltaFrame,
// EventFrame, NoticeFrame (WithNotices) or ClosedFrame. It returns io.EOF once the subscription has
// ended normally, or a *SubscriptionError.
func (s *Subscription) Next(ctx context.Context) (any, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			it := s.queue[0]
			s.queue[0] = pushItem{}
			s.queue = s.queue[1:]
			s.queuedBytes -= it.size
			s.mu.Unlock()
			return it.frame, nil
		}
		failed, ended := s.failed, s.ended
		s.mu.Unlock()
		if failed != nil {
			return nil, failed
		}
		if ended {
			return nil, io.EOF
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close calls subscription.close; frames already received stay readable,
// then Next returns io.EOF.
func (s *Subscription) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	_, err := s.c.call(ctx, protocol.OpSubscriptionClose, protocol.SubscriptionCloseInput{SubscriptionID: s.id}, nil)
	s.c.mu.Lock()
	retry := false
	if s.c.subs[s.id] == s {
		delete(s.c.subs, s.id)
		retry = err != nil
	}
	s.c.mu.Unlock()
	if retry {
		// The host may still hold the subscription: drop its late frames
		// and close it again in the background.
		s.c.retireID(s.id)
	}
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	s.signal()
	return err
}
