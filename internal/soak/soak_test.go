package soak_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/protocol"
)

var soakFor = flag.Duration("soak", 0, "how long TestSoak drives the host (0: 3m, or 20s with -short)")

func soakDuration() time.Duration {
	switch {
	case *soakFor > 0:
		return *soakFor
	case testing.Short():
		return 20 * time.Second
	}
	return 3 * time.Minute
}

// Resource bounds of the soak.
const (
	// soakPeakHeapLimit bounds the Go heap in use (host, clients and the
	// test's records together).
	soakPeakHeapLimit = 768 << 20
	// settleWithin bounds the wait for goroutines and descriptors to
	// return to their baselines.
	settleWithin = 15 * time.Second
)

// TestSoak runs dozens of clients against one in-process host for a
// bounded time (see -soak): they connect and disconnect abruptly, open
// fast and slow subscriptions, start turns that stream text and call
// tools, stop some of them, and answer approvals of turns other
// connections started. Two raw connections read their socket slowly so
// that the host evicts their subscriptions. Afterwards every acknowledged
// turn is terminal, every subscription saw a gapless sequence (or exactly
// one subscription.closed slow_consumer), what a subscriber streamed of a
// turn equals the turn's durable transcript, and goroutines and
// descriptors are back to their baselines.
func TestSoak(t *testing.T) {
	duration := soakDuration()
	runtime.GC()
	goroutines0 := runtime.NumGoroutine()
	fds0, sockets0 := fdCounts()

	r := newRig(t, newRoot(t), domain.Options{Provider: newDispatcher(t, scriptDelayMs)}, host.Options{})
	k := r.start()
	sweeper, err := r.connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sweeper.Close() })
	s := &soak{rig: r, endpoint: k.Endpoint(), seed: uint64(time.Now().UnixNano()), byKey: map[string]*turnRec{}}
	for i := range bypassSessions + askSessions {
		sess := sessionInfo{id: fmt.Sprintf("bypass-%02d", i), mode: protocol.PermissionModeBypass}
		if i >= bypassSessions {
			sess = sessionInfo{id: fmt.Sprintf("ask-%02d", i-bypassSessions), mode: protocol.PermissionModeAsk}
			s.ask = append(s.ask, sess)
		}
		s.sessions = append(s.sessions, sess)
		if err := createSession(opCtx(t), sweeper, sess.id, workspace(t), sess.mode); err != nil {
			t.Fatalf("session %s: %v", sess.id, err)
		}
	}
	runtime.GC()
	goroutines1 := runtime.NumGoroutine()
	fds1, sockets1 := fdCounts()
	t.Logf("soak: %v, %d clients, %d bypass and %d ask sessions, %d raw slow consumers, seed %d",
		duration, soakClients, bypassSessions, askSessions, rawSlowConsumers, s.seed)

	samples := startSampler(100 * time.Millisecond)
	var stopSampling sync.Once
	t.Cleanup(func() { stopSampling.Do(samples.finish) })
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	readerCtx, cancelReaders := context.WithTimeout(context.Background(), duration+2*failAfter)
	defer cancelReaders()
	s.ctx, s.readerCtx = ctx, readerCtx
	start := time.Now()
	var wg sync.WaitGroup
	for i := range soakClients {
		wg.Go(func() { s.runClient(i) })
	}
	for range rawSlowConsumers {
		wg.Go(s.runRawSlow)
	}
	wg.Wait()
	elapsed := time.Since(start)

	// Turns still waiting for an approval or streaming are brought to an
	// end: pending approvals are denied from the sweeper's connection.
	if err := s.sweep(sweeper); err != nil {
		t.Errorf("sweep: %v", err)
	}
	stopSampling.Do(samples.finish)

	for _, p := range s.problems {
		t.Errorf("client: %s", p)
	}
	stats := s.checkTurns(t, sweeper)
	subStats := s.checkSubscriptions(t, stats.transcripts)

	// Every client is gone: the idle host is back to the goroutines and
	// sockets it had before the load.
	goroutinesSettled := settle(settleWithin, func() bool { return runtime.NumGoroutine() <= goroutines1 })
	goroutines2 := runtime.NumGoroutine()
	socketsSettled := settle(settleWithin, func() bool { _, s := fdCounts(); return s <= sockets1 })
	fds2, sockets2 := fdCounts()
	if !goroutinesSettled {
		t.Errorf("goroutines after the load: %d, baseline %d\n%s", goroutines2, goroutines1, goroutineDump())
	}
	if !socketsSettled {
		t.Errorf("sockets after the load: %d, baseline %d\n%s", sockets2, sockets1, fdDump())
	}

	sweeper.Close()
	if err := r.stop(); err != nil {
		t.Errorf("host close: %v", err)
	}
	// Without the host, the process is back to where it started.
	goroutinesGone := settle(settleWithin, func() bool { return runtime.NumGoroutine() <= goroutines0 })
	goroutines3 := runtime.NumGoroutine()
	fdsGone := settle(settleWithin, func() bool { n, _ := fdCounts(); return n <= fds0 })
	fds3, sockets3 := fdCounts()
	if !goroutinesGone {
		t.Errorf("goroutines after the host closed: %d, before it started %d\n%s", goroutines3, goroutines0, goroutineDump())
	}
	if !fdsGone {
		t.Errorf("descriptors after the host closed: %d, before it started %d\n%s", fds3, fds0, fdDump())
	}
	samples.mu.Lock()
	peakHeap, peakG, peakFDs, peakRSS := samples.peakHeap, samples.peakGoroutines, samples.peakFDs, samples.peakRSSKiB
	samples.mu.Unlock()
	if peakHeap > soakPeakHeapLimit {
		t.Errorf("peak heap in use %d MiB, limit %d MiB", peakHeap>>20, soakPeakHeapLimit>>20)
	}

	n := &s.n
	t.Logf("soak figures (%v of load, %d clients, race detector: %v):", elapsed.Round(time.Second), soakClients, raceEnabled)
	t.Logf("  turns: %d started (%.1f/s), %d session_busy; completed %d, cancelled %d, failed %d %v",
		n.starts.Load(), float64(n.starts.Load())/elapsed.Seconds(), n.busy.Load(), stats.completed, stats.cancelled, stats.failed, stats.failureClasses)
	t.Logf("  stops: %d turn.stop calls, %d answered cancelled by turn.stop; approvals: %d allowed, %d denied, %d already resolved, %d own skipped, %d denied by the final sweep",
		n.stops.Load(), n.stopsCancelled.Load(), n.allow.Load(), n.deny.Load(), n.resolved.Load(), n.ownSkipped.Load(), n.sweepAnswered.Load())
	t.Logf("  connections: %d connects, %d abrupt disconnects, %d raw slow connections",
		n.connects.Load(), n.disconnects.Load(), n.rawRuns.Load())
	t.Logf("  subscriptions: %d (%v); frames %d, text deltas %d; outcomes %v",
		subStats.total, subStats.byKind, subStats.frames, subStats.deltas, subStats.outcomes)
	t.Logf("  evictions: %d by the host (subscription.closed slow_consumer), %d by the client library's buffer",
		subStats.outcomes[outcomeEvicted], subStats.outcomes[outcomeLocalSlow])
	t.Logf("  durable record: %d streamed turns compared with their transcripts, all equal: %v", subStats.followed, subStats.followedOK)
	t.Logf("  memory: peak heap in use %.1f MiB, peak RSS %.1f MiB (VmHWM %.1f MiB)",
		float64(peakHeap)/(1<<20), float64(peakRSS)/1024, float64(procStatusKiB("VmHWM"))/1024)
	t.Logf("  goroutines: %d before the host, %d idle host, peak %d, %d after the load, %d after the host closed",
		goroutines0, goroutines1, peakG, goroutines2, goroutines3)
	t.Logf("  descriptors: %d (%d sockets) before the host, %d (%d sockets) idle host, peak %d, %d (%d sockets) after the load, %d (%d sockets) after the host closed",
		fds0, sockets0, fds1, sockets1, peakFDs, fds2, sockets2, fds3, sockets3)
	if n.starts.Load() == 0 || stats.completed == 0 || subStats.followed == 0 {
		t.Errorf("the soak did too little: %d turns started, %d completed, %d followed", n.starts.Load(), stats.completed, subStats.followed)
	}
}

// sweep brings every acknowledged turn to its end: for each session with
// a turn that is not terminal it follows the session and denies pending
// approvals until the session's turns are all terminal.
func (s *soak) sweep(c *client.Conn) error {
	bySession := map[string][]*turnRec{}
	for _, tr := range s.turns {
		bySession[tr.session] = append(bySession[tr.session], tr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*failAfter)
	defer cancel()
	for _, sid := range slices.Sorted(maps.Keys(bySession)) {
		if err := s.sweepSession(ctx, c, sid, bySession[sid]); err != nil {
			return fmt.Errorf("session %s: %w", sid, err)
		}
	}
	return nil
}

func (s *soak) sweepSession(ctx context.Context, c *client.Conn, sid string, turns []*turnRec) error {
	for {
		sub, err := c.OpenSubscription(ctx, sid)
		if err != nil {
			return err
		}
		done, err := s.sweepFollow(ctx, c, sub, turns)
		_ = sub.Close(ctx)
		if done || err != nil {
			return err
		}
		// The subscription failed (slow consumer): open a fresh one.
	}
}

// sweepFollow answers pending approvals and waits for the turns to be
// terminal; done is false when the subscription ended first.
func (s *soak) sweepFollow(ctx context.Context, c *client.Conn, sub *client.Subscription, turns []*turnRec) (done bool, err error) {
	deny := func(snap protocol.SessionContinuitySnapshot) error {
		for _, p := range snap.Interactions.Pending {
			_, err := c.AnswerInteraction(ctx, protocol.InteractionAnswerInput{
				InteractionID: p.InteractionID,
				Answer:        protocol.InteractionAnswer{Kind: p.Request.Kind, Decision: protocol.InteractionDecisionDeny},
			})
			switch {
			case err == nil:
				s.n.sweepAnswered.Add(1)
				s.decided(p.SessionID, p.TurnID, protocol.InteractionDecisionDeny)
			case !client.IsCode(err, protocol.ErrAlreadyResolved):
				return fmt.Errorf("interaction.answer: %w", err)
			}
		}
		return nil
	}
	remaining := func() (int, error) {
		n := 0
		for _, tr := range turns {
			snap, err := c.QueryTurn(ctx, protocol.TurnQueryInput{SessionID: tr.session, TurnID: tr.turnID})
			if err != nil {
				return 0, fmt.Errorf("turn.query %s: %w", tr.turnID, err)
			}
			if !snap.Status.Terminal() {
				n++
			}
		}
		return n, nil
	}
	if err := deny(sub.Open.Snapshot); err != nil {
		return false, err
	}
	for {
		// The subscription is open, so a terminal transition after this
		// query shows up as a projection frame.
		if n, err := remaining(); err != nil || n == 0 {
			return true, err
		}
		for {
			frame, err := sub.Next(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return false, fmt.Errorf("turns still not terminal: %w", err)
				}
				return false, nil
			}
			if p, ok := frame.(protocol.ProjectionFrame); ok {
				if err := deny(p.Snapshot); err != nil {
					return false, err
				}
				if rt := p.Snapshot.RootTurn; rt != nil && rt.Status.Terminal() {
					break
				}
			}
		}
	}
}

// turnStats are the final states of the soak's turns.
type turnStats struct {
	completed, cancelled, failed int
	failureClasses               map[string]int
	transcripts                  map[string][]protocol.TranscriptMessage
}

// checkTurns queries every acknowledged turn (it must be terminal) and
// checks its durable transcript: the user message, and the whole expected
// answer for a completed turn or a prefix of it for a cancelled one.
func (s *soak) checkTurns(t *testing.T, c *client.Conn) turnStats {
	t.Helper()
	st := turnStats{failureClasses: map[string]int{}, transcripts: map[string][]protocol.TranscriptMessage{}}
	for _, sess := range s.sessions {
		msgs, err := transcript(opCtx(t), c, sess.id)
		if err != nil {
			t.Fatalf("transcript of %s: %v", sess.id, err)
		}
		st.transcripts[sess.id] = msgs
	}
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 20 {
			t.Errorf(format, args...)
		}
	}
	for _, tr := range s.turns {
		snap, err := c.QueryTurn(opCtx(t), protocol.TurnQueryInput{SessionID: tr.session, TurnID: tr.turnID})
		if err != nil {
			report("turn.query %s/%s: %v", tr.session, tr.turnID, err)
			continue
		}
		if snap.RunID != tr.runID {
			report("turn %s/%s: run %s, turn.start answered %s", tr.session, tr.turnID, snap.RunID, tr.runID)
		}
		s.mu.Lock()
		stops, decision := slices.Clone(tr.stopAnswers), tr.decision
		s.mu.Unlock()
		for _, stop := range stops {
			// turn.stop answers with the turn's terminal snapshot.
			if stop != snap {
				report("turn %s/%s: turn.stop answered %+v, turn.query %+v", tr.session, tr.turnID, stop, snap)
			}
		}
		msgs := st.transcripts[tr.session]
		if users := userTexts(msgs, tr.turnID); !slices.Equal(users, []string{tr.user}) {
			report("turn %s/%s: user messages %q", tr.session, tr.turnID, users)
		}
		text, want := assistantText(msgs, tr.turnID), expectedText(tr.kind, tr.user)
		switch snap.Status {
		case protocol.TurnCompleted:
			st.completed++
			if text != want {
				report("completed turn %s/%s: transcript %q, want %q", tr.session, tr.turnID, text, want)
			}
			if tr.kind == kindBash {
				// The approval decided whether the command ran.
				want := map[string]string{protocol.InteractionDecisionAllow: "completed", protocol.InteractionDecisionDeny: "errored"}[decision]
				if got := toolStatuses(msgs, tr.turnID); len(got) != 1 || got[0] != want {
					report("completed turn %s/%s: approval %q, Bash results %q", tr.session, tr.turnID, decision, got)
				}
			}
		case protocol.TurnCancelled:
			st.cancelled++
			if !strings.HasPrefix(want, text) {
				report("cancelled turn %s/%s: transcript %q is not a prefix of %q", tr.session, tr.turnID, text, want)
			}
		case protocol.TurnFailed:
			st.failed++
			st.failureClasses[snap.FailureClass]++
			report("turn %s/%s failed: %+v (%d turn.stop calls answered %+v; transcript %q)", tr.session, tr.turnID, snap, len(stops), stops, text)
		default:
			report("turn %s/%s is not terminal: %s", tr.session, tr.turnID, snap.Status)
		}
	}
	return st
}

// subStats summarise what the subscribers saw.
type subStats struct {
	total, frames, deltas int
	byKind, outcomes      map[string]int
	followed              int
	followedOK            bool
}

// checkSubscriptions checks every subscriber's record: no violation, an
// outcome, at most one subscription.closed and only with an eviction, and
// for every turn it followed from before its start to its terminal
// projection, the streamed text equals the transcript's.
func (s *soak) checkSubscriptions(t *testing.T, transcripts map[string][]protocol.TranscriptMessage) subStats {
	t.Helper()
	st := subStats{byKind: map[string]int{}, outcomes: map[string]int{}, followedOK: true}
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 20 {
			t.Errorf(format, args...)
		}
	}
	for _, rec := range s.subs {
		st.total++
		st.frames += rec.frames
		st.deltas += rec.deltas
		st.byKind[rec.kind]++
		st.outcomes[rec.outcome]++
		if rec.violation != "" {
			report("%s subscriber of %s (%s): %s", rec.kind, rec.session, rec.outcome, rec.violation)
		}
		if (rec.closed == 1) != (rec.outcome == outcomeEvicted) || rec.closed > 1 {
			report("%s subscriber of %s: %d subscription.closed frames, outcome %s", rec.kind, rec.session, rec.closed, rec.outcome)
		}
		for turnID, f := range rec.follows {
			if f.terminal == "" || turnID == rec.openTurn {
				continue
			}
			st.followed++
			if want := assistantText(transcripts[rec.session], turnID); f.text.String() != want {
				st.followedOK = false
				report("%s subscriber of %s streamed %q for turn %s (%s), transcript %q",
					rec.kind, rec.session, f.text.String(), turnID, f.terminal, want)
			}
		}
	}
	return st
}
