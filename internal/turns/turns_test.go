package turns_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/turns"
	"github.com/maka-agent/maka/protocol"
)

func TestTurnRunsToCompletionAndRetriesReturnTheSameRun(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	first := f.mustStart("s1", "t1", "hi there")
	if first.Status == protocol.TurnAdmitted || first.RunID == "" {
		t.Fatalf("turn.start answered %+v; want a started run", first)
	}
	done := f.waitTerminal("s1", "t1")
	if done.Status != protocol.TurnCompleted || done.RunID != first.RunID || done.TerminalEventID == "" {
		t.Fatalf("terminal snapshot %+v", done)
	}
	// A retry (same session, turn and content) returns the same finished run.
	again := f.mustStart("s1", "t1", "hi there")
	if again != done {
		t.Fatalf("retry answered %+v, want %+v", again, done)
	}
	if n := len(f.model.seen()); n != 1 {
		t.Fatalf("the model was asked %d times, want 1", n)
	}
	// The record: one admission, one run, one user message, one terminal.
	for q, want := range map[string]int{
		`SELECT COUNT(*) FROM turn_admissions WHERE session_id = 's1'`:                       1,
		`SELECT COUNT(*) FROM runs WHERE session_id = 's1'`:                                  1,
		`SELECT COUNT(*) FROM run_events WHERE session_id = 's1' AND type = 'user_message'`:  1,
		`SELECT COUNT(*) FROM run_events WHERE session_id = 's1' AND type = 'turn_terminal'`: 1,
	} {
		if got := f.count(q); got != want {
			t.Errorf("%s = %d, want %d", q, got, want)
		}
	}
	msgs := f.transcript("s1")
	if len(msgs) != 2 || msgs[0].Role != protocol.TranscriptRoleUser || msgs[0].Text != "hi there" || msgs[1].Text != "hello" {
		t.Fatalf("transcript %+v", msgs)
	}
	if f.resid.n.Load() != 0 {
		t.Fatalf("%d residencies held after the turn", f.resid.n.Load())
	}
	// The session is active again, and the idempotent retry survives a
	// restart.
	f.restart()
	if again := f.mustStart("s1", "t1", "hi there"); again != done {
		t.Fatalf("retry after restart answered %+v, want %+v", again, done)
	}
}

func TestStartRefusals(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	if _, err := f.start("nope", "t1", "x"); err == nil || err.Code != protocol.ErrNotFound {
		t.Fatalf("unknown session: %v", err)
	}
	f.mustStart("s1", "t1", "first")
	f.waitTerminal("s1", "t1")
	if _, err := f.start("s1", "t1", "different"); err == nil || err.Code != protocol.ErrOperationConflict {
		t.Fatalf("different content: %v", err)
	}
	// Archived: refused, nothing durable written.
	out := f.call(protocol.OpSessionLifecycleSet, protocol.SessionLifecycleSetInput{SessionID: "s1", Action: protocol.SessionActionArchive})
	if out.Err != nil {
		t.Fatalf("archive: %v", out.Err)
	}
	if _, err := f.start("s1", "t2", "x"); err == nil || err.Code != protocol.ErrSessionArchived {
		t.Fatalf("archived session: %v", err)
	}
	if n := f.count(`SELECT COUNT(*) FROM turn_admissions WHERE turn_id = 't2'`); n != 0 {
		t.Fatalf("archived start wrote %d admissions", n)
	}
	if _, err := f.query("s1", "t9"); err == nil || err.Code != protocol.ErrNotFound {
		t.Fatalf("query of an unknown turn: %v", err)
	}
	if f.drains.Load() != 0 {
		t.Fatal("a refusal drained the host")
	}
}

func TestConcurrentStartsOfOneSessionAdmitExactlyOne(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	release := make(chan struct{})
	f.model.next = hold("working", nil, release)
	var wg sync.WaitGroup
	errs := make([]*protocol.OpError, 2)
	snaps := make([]protocol.TurnSnapshot, 2)
	for i, id := range []string{"ta", "tb"} {
		wg.Go(func() { snaps[i], errs[i] = f.start("s1", id, "go "+id) })
	}
	wg.Wait()
	var ok, busy int
	for i := range errs {
		switch {
		case errs[i] == nil:
			ok++
		case errs[i].Code == protocol.ErrSessionBusy:
			busy++
		default:
			t.Fatalf("start: %v", errs[i])
		}
	}
	if ok != 1 || busy != 1 {
		t.Fatalf("%d started, %d busy; want 1 and 1", ok, busy)
	}
	if n := f.count(`SELECT COUNT(*) FROM turn_admissions WHERE session_id = 's1' AND previous_turn_id IS NULL`); n != 1 {
		t.Fatalf("chain holds %d first admissions", n)
	}
	if n := f.count(`SELECT COUNT(*) FROM turn_admissions WHERE session_id = 's1'`); n != 1 {
		t.Fatalf("chain holds %d admissions", n)
	}
	close(release)
	for i := range snaps {
		if errs[i] == nil {
			f.waitTerminal("s1", snaps[i].TurnID)
		}
	}
	// The next turn extends the chain.
	f.model.next = say("again")
	next := f.mustStart("s1", "tc", "next")
	f.waitTerminal("s1", next.TurnID)
	if n := f.count(`SELECT COUNT(*) FROM turn_admissions WHERE session_id = 's1' AND turn_id = 'tc' AND chain_seq = 2 AND previous_turn_id IS NOT NULL`); n != 1 {
		t.Fatal("second turn does not extend the chain")
	}
}

func TestStopMidStreamCancelsAndKeepsTheStreamedText(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	streamed := make(chan struct{}, 1)
	f.model.next = hold("partial answer", streamed, make(chan struct{}))
	s := f.mustStart("s1", "t1", "go")
	<-streamed
	if q, _ := f.query("s1", "t1"); q.Status != protocol.TurnRunning {
		t.Fatalf("running turn reads %s", q.Status)
	}
	if _, err := f.stop("s1", "t1", "wrong-run"); err == nil || err.Code != protocol.ErrOperationConflict {
		t.Fatalf("stop with a wrong run: %v", err)
	}
	stopped, err := f.stop("s1", "t1", s.RunID)
	if err != nil {
		t.Fatalf("stop: %v", err)
	}
	if stopped.Status != protocol.TurnCancelled || stopped.AbortSource != "turn.stop" {
		t.Fatalf("stopped snapshot %+v", stopped)
	}
	// Stopping a finished turn is ok and answers the same snapshot.
	if again, err := f.stop("s1", "t1", s.RunID); err != nil || again != stopped {
		t.Fatalf("second stop: %+v %v", again, err)
	}
	if _, err := f.stop("s1", "nope", s.RunID); err == nil || err.Code != protocol.ErrNotFound {
		t.Fatalf("stop of an unknown turn: %v", err)
	}
	msgs := f.transcript("s1")
	if len(msgs) != 2 || msgs[1].Text != "partial answer" {
		t.Fatalf("transcript after stop: %+v", msgs)
	}
	var status string
	if err := f.st.Read(testCtx(t), func(q store.Querier) error {
		return q.QueryRow(`SELECT status FROM sessions WHERE session_id = 's1'`).Scan(&status)
	}); err != nil {
		t.Fatal(err)
	}
	if status != string(protocol.SessionAborted) {
		t.Fatalf("session status after stop: %s", status)
	}
}

func TestHistoryIsReplayedIntoTheNextTurn(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	f.model.next = say("first answer")
	f.mustStart("s1", "t1", "first question")
	f.waitTerminal("s1", "t1")
	f.restart() // history comes from the durable record
	f.model.next = say("second answer")
	f.mustStart("s1", "t2", "second question")
	f.waitTerminal("s1", "t2")
	reqs := f.model.seen()
	last := reqs[len(reqs)-1]
	var got []string
	for _, m := range last.Messages {
		got = append(got, string(m.Role)+":"+m.Text)
	}
	want := "user:first question|assistant:first answer|user:second question"
	if strings.Join(got, "|") != want {
		t.Fatalf("second turn sent %q, want %q", strings.Join(got, "|"), want)
	}
}

// A history too large for the model's context window, whose summary the
// model refuses, loses its oldest exchanges, and the model is told that
// earlier messages were left out.
func TestHistoryIsCutToTheContextWindow(t *testing.T) {
	f := newFixture(t)
	f.contextWindow = 3000 // about 4,500 bytes of history
	f.createSession("s1")
	summaries := 0
	for i, q := range []string{"first", "second", "third"} {
		answer := say(q + " answer")
		f.model.next = func(ctx context.Context, req model.Request, emit func(model.Event) error) (model.Finish, error) {
			if strings.Contains(req.Messages[len(req.Messages)-1].Text, turns.SummaryInstruction) {
				summaries++
				return model.Finish{}, &model.Failure{Kind: model.FailureAuth, Status: 403, Message: "no summaries"}
			}
			return answer(ctx, req, emit)
		}
		turnID := fmt.Sprintf("t%d", i+1)
		f.mustStart("s1", turnID, q+" "+strings.Repeat("q", 3000))
		f.waitTerminal("s1", turnID)
	}
	var reqs []model.Request // of the turns, summary requests aside
	for _, req := range f.model.seen() {
		if !strings.Contains(req.Messages[len(req.Messages)-1].Text, turns.SummaryInstruction) {
			reqs = append(reqs, req)
		}
	}
	var got []string
	for _, m := range reqs[len(reqs)-1].Messages {
		got = append(got, string(m.Role)+":"+strings.TrimRight(m.Text, "q "))
	}
	want := "user:" + strings.TrimRight(turns.OmittedNote, "\n") + "\n\nsecond|assistant:second answer|user:third"
	if strings.Join(got, "|") != want {
		t.Fatalf("third turn sent\n%q, want\n%q", strings.Join(got, "|"), want)
	}
	second := reqs[1].Messages
	if len(second) != 3 || !strings.HasPrefix(second[0].Text, "first ") {
		t.Fatalf("the second turn, which fits, was cut: %d messages", len(second))
	}
	if summaries == 0 {
		t.Fatal("no summary was asked for")
	}
}

// A step's reasoning that came as a signature alone (no readable text) is
// recorded and given back with the next turn's history; the transcript
// shows no empty thinking.
func TestSignedReasoningWithoutTextReachesTheNextTurn(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	var step atomic.Int32
	f.model.next = func(_ context.Context, req model.Request, emit func(model.Event) error) (model.Finish, error) {
		if step.Add(1) == 1 {
			for _, e := range []model.Event{
				{Kind: model.EventThinkingSignature, Text: "enc-1"},
				{Kind: model.EventToolCall, ToolCall: model.ToolCall{ID: "c1", Name: "Glob", Input: []byte(`{"pattern":"*"}`)}},
			} {
				if err := emit(e); err != nil {
					return model.Finish{}, err
				}
			}
			return model.Finish{Reason: model.FinishToolCalls}, nil
		}
		return say("done")(context.Background(), req, emit)
	}
	f.mustStart("s1", "t1", "look")
	f.waitTerminal("s1", "t1")
	f.model.next = say("again")
	f.mustStart("s1", "t2", "more")
	f.waitTerminal("s1", "t2")
	reqs := f.model.seen()
	var signed []model.Message
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.ThinkingSignature != "" {
			signed = append(signed, m)
		}
	}
	if len(signed) != 1 || signed[0].ThinkingSignature != "enc-1" || len(signed[0].ToolCalls) != 1 || signed[0].Thinking != "" {
		t.Fatalf("signed messages of the next turn's history: %+v", signed)
	}
	for _, m := range f.transcript("s1") {
		if m.Role == protocol.TranscriptRoleThinking {
			t.Fatalf("transcript has a thinking message: %+v", m)
		}
	}
}

func TestModelFailureEndsTheTurnFailedWithItsClass(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	f.model.next = func(context.Context, model.Request, func(model.Event) error) (model.Finish, error) {
		return model.Finish{}, &model.Failure{Kind: model.FailureAuth, Status: 401, Message: "invalid api key"}
	}
	f.mustStart("s1", "t1", "go")
	s := f.waitTerminal("s1", "t1")
	if s.Status != protocol.TurnFailed || s.FailureClass != "auth" {
		t.Fatalf("snapshot %+v", s)
	}
}

func TestShutdownCancelsRunningTurns(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	streamed := make(chan struct{}, 1)
	f.model.next = hold("x", streamed, make(chan struct{}))
	f.mustStart("s1", "t1", "go")
	<-streamed
	f.restart()
	s, err := f.query("s1", "t1")
	if err != nil || s.Status != protocol.TurnCancelled || s.AbortSource != "host_shutdown" {
		t.Fatalf("after shutdown: %+v %v", s, err)
	}
}
