package soak_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/protocol"
)

// Shape of the soak's load.
const (
	soakClients      = 24
	bypassSessions   = 11
	askSessions      = 5
	rawSlowConsumers = 2
	maxSubsPerClient = 3
	scriptDelayMs    = 10
	// rawSlowStall is how long a raw slow connection reads nothing once
	// it has caught up; rawSlowRun is how long it lives.
	rawSlowStall = 1500 * time.Millisecond
	rawSlowRun   = 8 * time.Second
)

type sessionInfo struct{ id, mode string }

// turnRec is a turn whose turn.start was acknowledged.
type turnRec struct {
	session, turnID, runID string
	kind, user             string
	starter                string // connection id of the starting client
	// stopAnswers are the turn.stop answers for this turn, and decision
	// the approval answer that won for its Bash call (guarded by soak.mu).
	stopAnswers []protocol.TurnSnapshot
	decision    string
}

// soakCounters are the soak's event counts.
type soakCounters struct {
	starts, busy                      atomic.Int64
	stops, stopsCancelled             atomic.Int64
	allow, deny, resolved, ownSkipped atomic.Int64
	unknownSkipped                    atomic.Int64
	connects, disconnects             atomic.Int64
	subsOpened, subsClosed, rawRuns   atomic.Int64
	approvalScans, sweepAnswered      atomic.Int64
	closeNotFound                     atomic.Int64
}

// soak is the shared state of one soak run.
type soak struct {
	rig      *rig
	endpoint string
	sessions []sessionInfo
	ask      []sessionInfo
	seed     uint64
	// ctx ends the run: the client loops stop starting new actions.
	ctx context.Context
	// readerCtx bounds the subscription readers; it only ends if the
	// test overruns.
	readerCtx context.Context
	n         soakCounters

	mu       sync.Mutex
	turns    []*turnRec
	byKey    map[string]*turnRec
	subs     []*subRecord
	problems []string
}

func (s *soak) problem(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.problems) < 100 {
		s.problems = append(s.problems, fmt.Sprintf(format, args...))
	}
}

func (s *soak) register(r *turnRec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.turns = append(s.turns, r)
	s.byKey[r.session+"/"+r.turnID] = r
}

func (s *soak) lookup(session, turnID string) *turnRec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byKey[session+"/"+turnID]
}

// recentTurn returns one of the last turns started, or nil.
func (s *soak) recentTurn(rng *rand.Rand) *turnRec {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.turns) == 0 {
		return nil
	}
	n := min(len(s.turns), 12)
	return s.turns[len(s.turns)-1-rng.IntN(n)]
}

// decided records the winning answer to the approval of a turn; an
// equivalent later answer is answered with the stored winner, a different
// one must have been refused (already_resolved).
func (s *soak) decided(session, turnID, decision string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tr := s.byKey[session+"/"+turnID]; tr != nil {
		if tr.decision != "" && tr.decision != decision {
			s.problems = append(s.problems, fmt.Sprintf("turn %s/%s: two approvals won (%s, %s)", session, turnID, tr.decision, decision))
		}
		tr.decision = decision
	}
}

func (s *soak) keep(recs ...*subRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs = append(s.subs, recs...)
}

// reader is one subscription of a client and its reading goroutine.
type reader struct {
	sub  *client.Subscription
	rec  *subRecord
	done chan struct{}
}

// clientState is a soak client's current connection.
type clientState struct {
	id      int
	conn    *client.Conn
	readers []*reader
}

// disconnect closes the connection abruptly (its subscriptions are not
// closed first) and collects what its readers saw.
func (s *soak) disconnect(cs *clientState) {
	cs.conn.Close()
	for _, r := range cs.readers {
		<-r.done
		s.keep(r.rec)
	}
	cs.readers = nil
}

func opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), failAfter)
}

// runClient is one soak client: until the run ends it picks random
// actions. Operations are not tied to the run's end, so that every
// acknowledged turn.start is known.
func (s *soak) runClient(id int) {
	rng := rand.New(rand.NewPCG(s.seed, uint64(id)))
	var cs *clientState
	defer func() {
		if cs != nil {
			s.disconnect(cs)
		}
	}()
	next := 0
	for s.ctx.Err() == nil {
		if cs == nil {
			conn, err := s.rig.connect()
			if err != nil {
				s.problem("client %d: connect: %v", id, err)
				pause(s.ctx, 100*time.Millisecond)
				continue
			}
			s.n.connects.Add(1)
			cs = &clientState{id: id, conn: conn}
		}
		switch r := rng.IntN(100); {
		case r < 30:
			next++
			s.startTurn(cs, rng, fmt.Sprintf("c%02d-%05d", id, next))
		case r < 34:
			s.stopTurn(cs, rng)
		case r < 49:
			s.openSub(cs, rng)
		case r < 56:
			s.closeSub(cs, rng)
		case r < 76:
			s.approve(cs, rng)
		case r < 80:
			s.disconnect(cs)
			cs = nil
			s.n.disconnects.Add(1)
		default:
			pause(s.ctx, time.Duration(5+rng.IntN(60))*time.Millisecond)
		}
	}
}

func (s *soak) startTurn(cs *clientState, rng *rand.Rand, turnID string) {
	sess := s.sessions[rng.IntN(len(s.sessions))]
	kind := []string{kindText, kindRead, kindGlob}[rng.IntN(3)]
	if sess.mode == protocol.PermissionModeAsk {
		kind = kindBash
		if rng.IntN(4) == 0 {
			kind = kindText
		}
	}
	user := kind + " " + turnID
	ctx, cancel := opContext()
	defer cancel()
	snap, err := cs.conn.StartTurn(ctx, protocol.TurnStartInput{SessionID: sess.id, TurnID: turnID, Content: protocol.MessageContent{Text: user}})
	switch {
	case err == nil:
		if snap.SessionID != sess.id || snap.TurnID != turnID || snap.RunID == "" {
			s.problem("turn.start %s/%s answered %+v", sess.id, turnID, snap)
			return
		}
		s.n.starts.Add(1)
		s.register(&turnRec{session: sess.id, turnID: turnID, runID: snap.RunID, kind: kind, user: user, starter: cs.conn.ConnectionID()})
	case client.IsCode(err, protocol.ErrSessionBusy):
		s.n.busy.Add(1)
	default:
		s.problem("turn.start %s/%s: %v", sess.id, turnID, err)
	}
}

func (s *soak) stopTurn(cs *clientState, rng *rand.Rand) {
	tr := s.recentTurn(rng)
	if tr == nil {
		return
	}
	ctx, cancel := opContext()
	defer cancel()
	snap, err := cs.conn.StopTurn(ctx, protocol.TurnStopInput{SessionID: tr.session, TurnID: tr.turnID, RunID: tr.runID})
	if err != nil {
		s.problem("turn.stop %s/%s: %v", tr.session, tr.turnID, err)
		return
	}
	s.n.stops.Add(1)
	s.mu.Lock()
	tr.stopAnswers = append(tr.stopAnswers, snap)
	s.mu.Unlock()
	if snap.TurnID != tr.turnID || snap.RunID != tr.runID {
		s.problem("turn.stop %s/%s answered %+v", tr.session, tr.turnID, snap)
	}
	if snap.Status == protocol.TurnCancelled && snap.AbortSource == "turn.stop" {
		s.n.stopsCancelled.Add(1)
	}
}

func (s *soak) openSub(cs *clientState, rng *rand.Rand) {
	if len(cs.readers) >= maxSubsPerClient {
		return
	}
	sess := s.sessions[rng.IntN(len(s.sessions))]
	ctx, cancel := opContext()
	defer cancel()
	sub, err := cs.conn.OpenSubscription(ctx, sess.id)
	if err != nil {
		s.problem("subscription.open %s: %v", sess.id, err)
		return
	}
	s.n.subsOpened.Add(1)
	slow := rng.IntN(4) == 0
	kind := "fast"
	if slow {
		kind = "slow"
	}
	r := &reader{sub: sub, rec: newSubRecord(kind, sess.id, sub.Open.Snapshot), done: make(chan struct{})}
	seed := rng.Uint64()
	go func() {
		defer close(r.done)
		libReader(s.readerCtx, sub, r.rec, slow, seed)
	}()
	cs.readers = append(cs.readers, r)
}

func (s *soak) closeSub(cs *clientState, rng *rand.Rand) {
	if len(cs.readers) == 0 {
		return
	}
	i := rng.IntN(len(cs.readers))
	r := cs.readers[i]
	cs.readers = append(cs.readers[:i], cs.readers[i+1:]...)
	ctx, cancel := opContext()
	defer cancel()
	if err := r.sub.Close(ctx); err != nil {
		if client.IsCode(err, protocol.ErrNotFound) {
			// The host evicted it meanwhile; its closed frame is on the way.
			s.n.closeNotFound.Add(1)
		} else {
			s.problem("subscription.close %s: %v", r.rec.session, err)
		}
	}
	s.n.subsClosed.Add(1)
	<-r.done
	s.keep(r.rec)
}

// approve looks at the pending approvals of an ask session (in the
// snapshot of a short subscription) and answers those of turns another
// connection started.
func (s *soak) approve(cs *clientState, rng *rand.Rand) {
	sess := s.ask[rng.IntN(len(s.ask))]
	ctx, cancel := opContext()
	defer cancel()
	sub, err := cs.conn.OpenSubscription(ctx, sess.id)
	if err != nil {
		s.problem("subscription.open %s: %v", sess.id, err)
		return
	}
	s.n.approvalScans.Add(1)
	pending := sub.Open.Snapshot.Interactions.Pending
	if err := sub.Close(ctx); err != nil && !client.IsCode(err, protocol.ErrNotFound) {
		s.problem("subscription.close %s: %v", sess.id, err)
	}
	for _, p := range pending {
		if p.Request.Kind != protocol.InteractionKindPermission {
			s.problem("pending interaction of kind %s in %s", p.Request.Kind, sess.id)
			continue
		}
		tr := s.lookup(sess.id, p.TurnID)
		switch {
		case tr == nil:
			// Its turn.start has not been acknowledged yet.
			s.n.unknownSkipped.Add(1)
			continue
		case tr.starter == cs.conn.ConnectionID():
			s.n.ownSkipped.Add(1)
			continue
		}
		decision := protocol.InteractionDecisionAllow
		if rng.IntN(3) == 0 {
			decision = protocol.InteractionDecisionDeny
		}
		res, err := cs.conn.AnswerInteraction(ctx, protocol.InteractionAnswerInput{
			InteractionID: p.InteractionID,
			Answer:        protocol.InteractionAnswer{Kind: protocol.InteractionKindPermission, Decision: decision},
		})
		switch {
		case err == nil:
			if res.Status != protocol.InteractionStatusAnswered || res.Outcome == nil || res.Outcome.Decision != decision {
				s.problem("interaction.answer %s: %+v", p.InteractionID, res)
			}
			s.decided(sess.id, p.TurnID, decision)
			if decision == protocol.InteractionDecisionAllow {
				s.n.allow.Add(1)
			} else {
				s.n.deny.Add(1)
			}
		case client.IsCode(err, protocol.ErrAlreadyResolved):
			s.n.resolved.Add(1)
		default:
			s.problem("interaction.answer %s: %v", p.InteractionID, err)
		}
	}
}

// runRawSlow repeatedly connects a raw slow consumer to every session.
func (s *soak) runRawSlow() {
	ids := make([]string, len(s.sessions))
	for i, sess := range s.sessions {
		ids[i] = sess.id
	}
	for s.ctx.Err() == nil {
		recs, err := rawSlowConsumer(s.ctx, s.endpoint, ids, rawSlowStall, rawSlowRun)
		s.keep(recs...)
		s.n.rawRuns.Add(1)
		if err != nil {
			s.problem("raw slow consumer: %v", err)
			pause(s.ctx, 100*time.Millisecond)
		}
	}
}
