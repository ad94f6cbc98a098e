package soak_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/transport"
	"github.com/maka-agent/maka/protocol"
)

// Outcomes of a subscription.
const (
	// outcomeClosed: the subscriber closed it (subscription.close) and read
	// every frame up to the end.
	outcomeClosed = "closed"
	// outcomeEvicted: the host evicted it with subscription.closed
	// slow_consumer.
	outcomeEvicted = "evicted"
	// outcomeLocalSlow: the client library's bounded buffer overflowed
	// and it failed the subscription as slow_consumer.
	outcomeLocalSlow = "local_slow_consumer"
	// outcomeDisconnected: the connection was closed under it.
	outcomeDisconnected = "disconnected"
)

// turnSeen is what one subscriber saw of one turn.
type turnSeen struct {
	text     strings.Builder // the text deltas, in order
	terminal protocol.TurnStatus
}

// subRecord is what one subscriber saw.
type subRecord struct {
	kind      string // "fast", "slow" (client library) or "raw" (slow socket)
	session   string
	openTurn  string // the root turn of the snapshot the subscription opened on
	frames    int
	deltas    int
	closed    int    // subscription.closed frames
	outcome   string // one of the outcomes, or a violation
	violation string // why the subscriber's stream was wrong, if it was
	follows   map[string]*turnSeen
}

func newSubRecord(kind, session string, open protocol.SessionContinuitySnapshot) *subRecord {
	r := &subRecord{kind: kind, session: session, follows: map[string]*turnSeen{}}
	if open.RootTurn != nil {
		r.openTurn = open.RootTurn.TurnID
	}
	return r
}

func (r *subRecord) violate(format string, args ...any) {
	if r.violation == "" {
		r.violation = fmt.Sprintf(format, args...)
	}
}

func (r *subRecord) turn(id string) *turnSeen {
	f := r.follows[id]
	if f == nil {
		f = &turnSeen{}
		r.follows[id] = f
	}
	return f
}

// observe records one push frame; expected is the sequence it must carry.
func (r *subRecord) observe(frame any, expected int64) {
	if r.closed > 0 {
		r.violate("frame %T after subscription.closed", frame)
	}
	r.frames++
	var seq int64
	switch f := frame.(type) {
	case protocol.ProjectionFrame:
		seq = f.Sequence
		if rt := f.Snapshot.RootTurn; rt != nil && rt.Status.Terminal() {
			r.turn(rt.TurnID).terminal = rt.Status
		}
	case protocol.DeltaFrame:
		seq = f.Sequence
		r.deltas++
		if f.Delta.Kind == protocol.DeltaText {
			r.turn(f.Delta.TurnID).text.WriteString(f.Delta.Text)
		}
	case protocol.EventFrame:
		seq = f.Sequence
	case protocol.ClosedFrame:
		seq = f.Sequence
		r.closed++
		if f.Reason != protocol.CloseSlowConsumer {
			r.violate("subscription.closed %s", f.Reason)
		}
	default:
		r.violate("unexpected frame %T", frame)
		return
	}
	if seq != expected {
		r.violate("sequence %d, want %d", seq, expected)
	}
}

// libReader reads one client-library subscription until it ends; a slow
// reader pauses between frames (a slow consumer, not synchronisation).
func libReader(ctx context.Context, sub *client.Subscription, rec *subRecord, slow bool, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	expected := sub.Open.NextSequence
	for {
		frame, err := sub.Next(ctx)
		if err != nil {
			var se *client.SubscriptionError
			switch {
			case errors.Is(err, io.EOF) && rec.closed == 1:
				rec.outcome = outcomeEvicted
			case errors.Is(err, io.EOF):
				rec.outcome = outcomeClosed
			case errors.As(err, &se) && se.Reason == client.SubscriptionSlowConsumer:
				rec.outcome = outcomeLocalSlow
			case errors.As(err, &se) && se.Reason == client.SubscriptionConnectionClosed:
				rec.outcome = outcomeDisconnected
			default:
				rec.outcome = "error"
				rec.violate("subscription ended: %v", err)
			}
			return
		}
		rec.observe(frame, expected)
		expected++
		if slow {
			pause(ctx, time.Duration(50+rng.IntN(100))*time.Millisecond)
		}
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// rawBurst is how many frames a raw slow consumer reads between stalls.
const rawBurst = 64

// rawSub is one subscription of a raw slow connection.
type rawSub struct {
	rec      *subRecord
	expected int64
}

// rawSlowConsumer connects to endpoint without the client library and
// opens a subscription to each session. Then it alternates between not
// reading its socket for stall and reading at most rawBurst frames, so
// that the host's writes to it back up and the host evicts its
// subscriptions. It
// returns what each subscription saw once every subscription was evicted,
// the connection ended, or ctx or limit ended; the connection is then
// closed abruptly.
func rawSlowConsumer(ctx context.Context, endpoint string, sessions []string, stall, limit time.Duration) ([]*subRecord, error) {
	nc, err := net.DialTimeout("unix", endpoint, 5*time.Second)
	if err != nil {
		return nil, err
	}
	tc := transport.New(nc)
	defer tc.Close()
	if err := tc.WriteValue(protocol.Hello{Kind: protocol.KindHello, ClientInstanceID: "raw-slow", Surface: protocol.SurfaceInspect}); err != nil {
		return nil, err
	}
	v, err := tc.ReadFrame(10 * time.Second)
	if err != nil {
		return nil, fmt.Errorf("handshake: %w", err)
	}
	if hs, err := protocol.DecodeHostFrame(v); err != nil {
		return nil, err
	} else if _, ok := hs.(*protocol.Accepted); !ok {
		return nil, fmt.Errorf("handshake: %T", hs)
	}
	for _, sid := range sessions {
		b, err := protocol.AppendRequest(nil, "open-"+sid, protocol.OpSubscriptionOpen, protocol.SubscriptionOpenInput{SessionID: sid})
		if err != nil {
			return nil, err
		}
		if err := tc.Write(b); err != nil {
			return nil, err
		}
	}
	subs := map[string]*rawSub{}
	var recs []*subRecord
	end := time.Now().Add(limit)
	evicted, opened := 0, 0
	burst := 0
	for ctx.Err() == nil && time.Now().Before(end) && (opened < len(sessions) || evicted < len(subs)) {
		if opened == len(sessions) && burst >= rawBurst {
			// Stop reading for a while.
			pause(ctx, stall)
			burst = 0
		}
		v, err := tc.ReadFrame(50 * time.Millisecond)
		if transport.IsCode(err, transport.CodeReadTimeout) {
			burst = rawBurst // caught up
			continue
		}
		burst++
		if err != nil {
			// The host closed the connection: every open subscription
			// ends with it.
			for _, s := range subs {
				if s.rec.outcome == "" {
					s.rec.outcome = outcomeDisconnected
				}
			}
			return recs, nil
		}
		frame, err := protocol.DecodeHostFrame(v)
		if err != nil {
			return recs, fmt.Errorf("raw frame: %w", err)
		}
		if resp, ok := frame.(*protocol.Response); ok {
			opened++
			if !resp.OK {
				return recs, fmt.Errorf("raw subscription.open: %s %s", resp.Error.Code, resp.Error.Message)
			}
			open, ok := resp.Result.(protocol.SubscriptionOpenResult)
			if !ok {
				return recs, fmt.Errorf("raw subscription.open: result %T", resp.Result)
			}
			rec := newSubRecord("raw", open.Snapshot.Session.SessionID, open.Snapshot)
			recs = append(recs, rec)
			subs[open.SubscriptionID] = &rawSub{rec: rec, expected: open.NextSequence}
			continue
		}
		idv, _ := v.Get("subscriptionId")
		s := subs[idv.Str()]
		if s == nil {
			return recs, fmt.Errorf("raw frame %T for an unknown subscription", frame)
		}
		s.rec.observe(frame, s.expected)
		s.expected++
		if _, ok := frame.(protocol.ClosedFrame); ok && s.rec.closed == 1 {
			s.rec.outcome = outcomeEvicted
			evicted++
		}
	}
	for _, s := range subs {
		if s.rec.outcome == "" {
			s.rec.outcome = outcomeDisconnected // closed abruptly below
		}
	}
	return recs, nil
}
