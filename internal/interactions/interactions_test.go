package interactions_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/interactions"
	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/protocol"
)

func TestPermissionIsDurableAndPublishedThenAnswered(t *testing.T) {
	f := newFixture(t)
	f.session("s1", "t1", "r1")
	o := f.c.BindRun("s1", "t1", "r1")
	res := request(testCtx(t), o, bash("tu-1", "ls -la"))

	snap := f.waitPending("s1", "i-0001")
	f.wantStatuses("s1", "r1", "waiting_for_user")
	if snap.Session.Status != protocol.SessionWaitingForUser {
		t.Fatalf("published session status = %s, want waiting_for_user", snap.Session.Status)
	}
	p := snap.Interactions.Pending[0]
	prompt := p.Request.Prompt.(protocol.ToolPermissionPrompt)
	if p.Request.ToolUseID != "tu-1" || prompt.ToolName != "Bash" || prompt.Category != protocol.ToolCategoryShellUnsafe ||
		prompt.Reason != protocol.PermissionReasonShellDangerous || !prompt.RememberForTurnAllowed ||
		!reflect.DeepEqual(prompt.Review, protocol.CommandReview{Command: "ls -la"}) {
		t.Fatalf("pending request = %+v", p.Request)
	}
	pending := wantOK[protocol.InteractionSnapshot](t, f.query("s1", "i-0001"))
	if pending.Status != protocol.InteractionStatusPending || pending.Revision != 1 || pending.Outcome != nil {
		t.Fatalf("query while pending = %+v", pending)
	}

	got := wantOK[protocol.InteractionAnsweredSnapshot](t, f.answer("i-0001", allow(false)))
	if got.Status != protocol.InteractionStatusAnswered || got.Revision != 2 || got.Outcome.Reviewer != protocol.InteractionReviewerUser ||
		got.Outcome.Decision != protocol.InteractionDecisionAllow || got.Outcome.RememberForTurn {
		t.Fatalf("answer result = %+v", got)
	}
	r := recv(t, res)
	if r.err != nil || !r.ans.Allow || r.ans.RememberForTurn {
		t.Fatalf("RequestPermission = %+v, %v", r.ans, r.err)
	}
	f.wantStatuses("s1", "r1", "running")
	f.waitFrame("s1", "no pending and running", func(s protocol.SessionContinuitySnapshot) bool {
		return len(s.Interactions.Pending) == 0 && s.Session.Status == protocol.SessionRunning && s.ProjectionRevision > snap.ProjectionRevision
	})
	queried := wantOK[protocol.InteractionSnapshot](t, f.query("s1", "i-0001"))
	if !reflect.DeepEqual(queried, protocol.InteractionSnapshot(got)) {
		t.Fatalf("query after answer = %+v, want %+v", queried, got)
	}

	// A deny is reported as a refusal; statuses follow the last pending.
	res2 := request(testCtx(t), o, bash("tu-2", "make"))
	f.waitPending("s1", "i-0002")
	res3 := request(testCtx(t), o, bash("tu-3", "make test"))
	f.waitPending("s1", "i-0002", "i-0003")
	wantOK[protocol.InteractionAnsweredSnapshot](t, f.answer("i-0002", deny()))
	if r := recv(t, res2); r.err != nil || r.ans.Allow {
		t.Fatalf("denied RequestPermission = %+v, %v", r.ans, r.err)
	}
	f.wantStatuses("s1", "r1", "waiting_for_user")
	wantOK[protocol.InteractionAnsweredSnapshot](t, f.answer("i-0003", allow(false)))
	recv(t, res3)
	f.wantStatuses("s1", "r1", "running")

	if err := f.closeRun(o, "turn_terminal"); err != nil {
		t.Fatal(err)
	}
	o.Release()
	if f.poisons.Load() != 0 || f.c.Err() != nil {
		t.Fatalf("poisoned: %v", f.c.Err())
	}
}

func TestConcurrentIdenticalAnswersHaveOneWinner(t *testing.T) {
	f := newFixture(t)
	f.session("s1", "t1", "r1")
	o := f.c.BindRun("s1", "t1", "r1")
	res := request(testCtx(t), o, bash("tu-1", "ls"))
	f.waitPending("s1", "i-0001")

	const n = 8
	outs := make([]protocol.InteractionAnsweredSnapshot, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = wantOK[protocol.InteractionAnsweredSnapshot](t, f.answer("i-0001", allow(true)))
		}()
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if !reflect.DeepEqual(outs[i], outs[0]) {
			t.Fatalf("answer %d = %+v, answer 0 = %+v: not one winner", i, outs[i], outs[0])
		}
	}
	if r := recv(t, res); r.err != nil || !r.ans.Allow || !r.ans.RememberForTurn {
		t.Fatalf("RequestPermission = %+v, %v", r.ans, r.err)
	}
	// A different later answer does not replace the winner.
	wantErr(t, f.answer("i-0001", allow(false)), protocol.ErrAlreadyResolved, interactions.MessageDifferentAnswer)
	wantErr(t, f.answer("i-0001", deny()), protocol.ErrAlreadyResolved, interactions.MessageDifferentAnswer)
	again := wantOK[protocol.InteractionAnsweredSnapshot](t, f.answer("i-0001", allow(true)))
	if !reflect.DeepEqual(again, outs[0]) {
		t.Fatalf("identical retry = %+v, want the stored winner %+v", again, outs[0])
	}
	if n := f.count(`SELECT COUNT(*) FROM interactions`); n != 1 {
		t.Fatalf("%d interactions stored, want 1", n)
	}
}

func TestAnswerAndQueryRefusals(t *testing.T) {
	f := newFixture(t)
	f.session("s1", "t1", "r1")
	f.session("s2", "t2", "r2")
	o := f.c.BindRun("s1", "t1", "r1")
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	notRememberable := bash("tu-1", "ls")
	notRememberable.RememberAllowed = false
	perm := request(ctx, o, notRememberable)
	f.waitPending("s1", "i-0001")
	qs := make(chan error, 1)
	go func() {
		_, err := o.AskQuestions(ctx, "tu-2", []tools.Question{
			{Question: "Which?", Options: []tools.QuestionOption{{Label: "a"}, {Label: "b"}}},
			{Question: "Why?", Options: []tools.QuestionOption{{Label: "c"}, {Label: "d", Description: "because"}}},
		})
		qs <- err
	}()
	f.waitPending("s1", "i-0001", "i-0002")

	for _, tc := range []struct {
		name string
		out  func() host.Outcome
		code protocol.ErrorCode
		msg  string
	}{
		{"question answer to a permission", func() host.Outcome { return f.answer("i-0001", answers(str("a"))) }, protocol.ErrOperationConflict, interactions.MessageAnswerMismatch},
		{"remember on a non-rememberable prompt", func() host.Outcome { return f.answer("i-0001", allow(true)) }, protocol.ErrOperationConflict, interactions.MessageAnswerMismatch},
		{"permission answer to a question", func() host.Outcome { return f.answer("i-0002", allow(false)) }, protocol.ErrOperationConflict, interactions.MessageAnswerMismatch},
		{"too few answers", func() host.Outcome { return f.answer("i-0002", answers(str("a"))) }, protocol.ErrOperationConflict, interactions.MessageAnswerMismatch},
		{"too many answers", func() host.Outcome { return f.answer("i-0002", answers(str("a"), nil, str("x"))) }, protocol.ErrOperationConflict, interactions.MessageAnswerMismatch},
		{"unknown id", func() host.Outcome { return f.answer("i-9999", allow(false)) }, protocol.ErrNotFound, interactions.MessageNotFound},
		{"query of another session", func() host.Outcome { return f.query("s2", "i-0001") }, protocol.ErrNotFound, interactions.MessageNotFound},
		{"query of an unknown id", func() host.Outcome { return f.query("s1", "i-9999") }, protocol.ErrNotFound, interactions.MessageNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, tc.out(), tc.code, tc.msg)
		})
	}
	// Refusals changed nothing.
	if n := f.count(`SELECT COUNT(*) FROM interactions WHERE status = 'pending'`); n != 2 {
		t.Fatalf("%d pending after refusals, want 2", n)
	}
	got := wantOK[protocol.InteractionAnsweredSnapshot](t, f.answer("i-0002", answers(nil, str("free text"))))
	if len(got.Outcome.Answers) != 2 || got.Outcome.Answers[0] != nil || *got.Outcome.Answers[1] != "free text" {
		t.Fatalf("question outcome = %+v", got.Outcome)
	}
	if err := recv(t, qs); err != nil {
		t.Fatalf("AskQuestions: %v", err)
	}
	cancel()
	if r := recv(t, perm); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled RequestPermission = %+v, %v", r.ans, r.err)
	}
}

func TestRememberedAllowResolvesSiblingsAndSettlesLaterRequests(t *testing.T) {
	f := newFixture(t)
	f.session("s1", "t1", "r1")
	o := f.c.BindRun("s1", "t1", "r1")
	ctx := testCtx(t)
	first := request(ctx, o, bash("tu-1", "go test ./..."))
	f.waitPending("s1", "i-0001")
	other := request(ctx, o, bash("tu-2", "go vet ./..."))
	f.waitPending("s1", "i-0001", "i-0002")
	sibling := request(ctx, o, bash("tu-3", "go test ./..."))
	f.waitPending("s1", "i-0001", "i-0002", "i-0003")
	unscoped := bash("tu-4", "go test ./...")
	unscoped.RememberAllowed = false
	notRememberable := request(ctx, o, unscoped)
	f.waitPending("s1", "i-0001", "i-0002", "i-0003", "i-0004")
	sibling2 := request(ctx, o, bash("tu-5", "go test ./..."))
	before := f.waitPending("s1", "i-0001", "i-0002", "i-0003", "i-0004", "i-0005")

	got := wantOK[protocol.InteractionAnsweredSnapshot](t, f.answer("i-0003", allow(true)))
	if got.InteractionID != "i-0003" || !got.Outcome.RememberForTurn {
		t.Fatalf("answer = %+v", got)
	}
	for name, ch := range map[string]<-chan permResult{"first": first, "sibling": sibling, "sibling2": sibling2} {
		if r := recv(t, ch); r.err != nil || !r.ans.Allow || !r.ans.RememberForTurn {
			t.Fatalf("%s RequestPermission = %+v, %v", name, r.ans, r.err)
		}
	}
	for _, id := range []string{"i-0001", "i-0005"} {
		s := wantOK[protocol.InteractionSnapshot](t, f.query("s1", id))
		if s.Status != protocol.InteractionStatusAnswered || !protocol.EquivalentOutcome(*s.Outcome, *got.Outcome) ||
			s.Outcome.CommittedAt != got.Outcome.CommittedAt {
			t.Fatalf("sibling %s = %+v, want the remembered allow committed with the answer", id, s)
		}
	}
	// All siblings were resolved before one publication: the next frame
	// goes straight from five pending to the two others.
	var next []string
	for _, s := range f.snapshots("s1") {
		if s.ProjectionRevision == before.ProjectionRevision+1 {
			next = pendingIDs(s)
		}
	}
	if !reflect.DeepEqual(next, []string{"i-0002", "i-0004"}) {
		t.Fatalf("frame after the answer shows pending %v, want [i-0002 i-0004]", next)
	}

	// A later request with the same scope settles at once, never pending.
	later := request(ctx, o, bash("tu-6", "go test ./..."))
	if r := recv(t, later); r.err != nil || !r.ans.Allow {
		t.Fatalf("later RequestPermission = %+v, %v", r.ans, r.err)
	}
	s := wantOK[protocol.InteractionSnapshot](t, f.query("s1", "i-0006"))
	if s.Status != protocol.InteractionStatusAnswered || s.Outcome.Decision != protocol.InteractionDecisionAllow {
		t.Fatalf("later request = %+v", s)
	}
	for _, snap := range f.snapshots("s1") {
		for _, id := range pendingIDs(snap) {
			if id == "i-0006" {
				t.Fatalf("the remembered request was published pending (revision %d)", snap.ProjectionRevision)
			}
		}
	}
	f.wantStatuses("s1", "r1", "waiting_for_user")

	// The run's closure settles what is left.
	if err := f.closeRun(o, "turn_stopped"); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan permResult{"other": other, "not rememberable": notRememberable} {
		var ce *interactions.ClosureError
		if r := recv(t, ch); !errors.As(r.err, &ce) || ce.Reason != protocol.InteractionClosureTurnStopped {
			t.Fatalf("%s RequestPermission = %+v, %v", name, r.ans, r.err)
		}
	}
	o.Release()
	if f.c.Err() != nil {
		t.Fatal(f.c.Err())
	}
}

func TestSeventeenthPendingIsRefused(t *testing.T) {
	f := newFixture(t)
	f.session("s1", "t1", "r1")
	o := f.c.BindRun("s1", "t1", "r1")
	ctx := testCtx(t)
	var chans []<-chan permResult
	for i := range protocol.InteractionMaxPendingPerSession {
		chans = append(chans, request(ctx, o, bash("tu", "echo "+string(rune('a'+i)))))
	}
	f.waitFrame("s1", "16 pending", func(s protocol.SessionContinuitySnapshot) bool {
		return len(s.Interactions.Pending) == protocol.InteractionMaxPendingPerSession
	})
	_, err := o.RequestPermission(ctx, bash("tu", "echo z"))
	if !errors.Is(err, interactions.ErrCapacityExceeded) {
		t.Fatalf("17th RequestPermission error = %v, want capacity exceeded", err)
	}
	if n := f.count(`SELECT COUNT(*) FROM interactions`); n != 16 {
		t.Fatalf("%d interactions stored, want 16", n)
	}
	if err := f.closeRun(o, "turn_stopped"); err != nil {
		t.Fatal(err)
	}
	for _, ch := range chans {
		if r := recv(t, ch); !errors.Is(r.err, interactions.ErrClosed) {
			t.Fatalf("RequestPermission = %+v, %v", r.ans, r.err)
		}
	}
	o.Release()
}

func TestPermissionTimeout(t *testing.T) {
	f := newFixtureTimeout(t, time.Millisecond)
	f.session("s1", "t1", "r1")
	o := f.c.BindRun("s1", "t1", "r1")
	_, err := o.RequestPermission(testCtx(t), bash("tu-1", "ls"))
	var ce *interactions.ClosureError
	if !errors.As(err, &ce) || ce.Reason != protocol.InteractionClosureTimedOut {
		t.Fatalf("RequestPermission error = %v, want timed_out", err)
	}
	s := wantOK[protocol.InteractionSnapshot](t, f.query("s1", "i-0001"))
	if s.Status != protocol.InteractionStatusClosed || s.Outcome.Reason != protocol.InteractionClosureTimedOut {
		t.Fatalf("snapshot = %+v", s)
	}
	f.wantStatuses("s1", "r1", "running")
	wantErr(t, f.answer("i-0001", allow(false)), protocol.ErrAlreadyResolved, interactions.MessageAlreadyClosed)
}

func TestTimeoutThatLosesToAnAnswerReturnsTheAnswer(t *testing.T) {
	f := newFixtureTimeout(t, time.Millisecond)
	f.session("s1", "t1", "r1")
	o := f.c.BindRun("s1", "t1", "r1")
	var answered protocol.InteractionAnsweredSnapshot
	interactions.SetBeforeTimeout(f.c, func() {
		answered = wantOK[protocol.InteractionAnsweredSnapshot](t, f.answer("i-0001", allow(true)))
	})
	ans, err := o.RequestPermission(testCtx(t), bash("tu-1", "ls"))
	if err != nil || !ans.Allow || !ans.RememberForTurn {
		t.Fatalf("RequestPermission = %+v, %v; want the wire answer", ans, err)
	}
	s := wantOK[protocol.InteractionSnapshot](t, f.query("s1", "i-0001"))
	if !reflect.DeepEqual(s, protocol.InteractionSnapshot(answered)) {
		t.Fatalf("stored = %+v, want the answer %+v", s, answered)
	}
}

func TestCloseRunClosesPendingAndRefusesLaterRequests(t *testing.T) {
	f := newFixture(t)
	f.session("s1", "t1", "r1")
	o := f.c.BindRun("s1", "t1", "r1")
	ctx := testCtx(t)
	perm := request(ctx, o, bash("tu-1", "rm -rf build"))
	f.waitPending("s1", "i-0001")
	qs := make(chan error, 1)
	go func() {
		_, err := o.AskQuestions(ctx, "tu-2", []tools.Question{{Question: "Go on?", Options: []tools.QuestionOption{{Label: "yes"}, {Label: "no"}}}})
		qs <- err
	}()
	f.waitPending("s1", "i-0001", "i-0002")

	if err := f.closeRun(o, "turn_stopped"); err != nil {
		t.Fatal(err)
	}
	var ce *interactions.ClosureError
	if r := recv(t, perm); !errors.As(r.err, &ce) || ce.Reason != protocol.InteractionClosureTurnStopped {
		t.Fatalf("RequestPermission = %+v, %v", r.ans, r.err)
	}
	if err := recv(t, qs); !errors.As(err, &ce) || ce.Reason != protocol.InteractionClosureTurnStopped {
		t.Fatalf("AskQuestions error = %v", err)
	}
	f.wantStatuses("s1", "r1", "running")
	f.waitPending("s1")
	for _, id := range []string{"i-0001", "i-0002"} {
		s := wantOK[protocol.InteractionSnapshot](t, f.query("s1", id))
		if s.Status != protocol.InteractionStatusClosed || s.Outcome.Reason != protocol.InteractionClosureTurnStopped {
			t.Fatalf("%s = %+v", id, s)
		}
	}
	wantErr(t, f.answer("i-0001", allow(false)), protocol.ErrAlreadyResolved, interactions.MessageAlreadyClosed)
	wantErr(t, f.answer("i-0002", answers(str("yes"))), protocol.ErrAlreadyResolved, interactions.MessageAlreadyClosed)

	// Later requests fail at once without a durable trace.
	if _, err := o.RequestPermission(ctx, bash("tu-3", "ls")); !errors.As(err, &ce) || ce.Reason != protocol.InteractionClosureTurnStopped {
		t.Fatalf("later RequestPermission error = %v", err)
	}
	if n := f.count(`SELECT COUNT(*) FROM interactions`); n != 2 {
		t.Fatalf("%d interactions stored, want 2", n)
	}
	// The terminal closure is a no-op: the first reason wins.
	f.terminate("r1")
	if err := f.closeRun(o, "turn_terminal"); err != nil {
		t.Fatal(err)
	}
	if s := wantOK[protocol.InteractionSnapshot](t, f.query("s1", "i-0001")); s.Outcome.Reason != protocol.InteractionClosureTurnStopped {
		t.Fatalf("reason after terminal closure = %s", s.Outcome.Reason)
	}
	o.Release()
	if f.c.Err() != nil || f.poisons.Load() != 0 {
		t.Fatalf("poisoned: %v", f.c.Err())
	}
}

func TestTerminalClosureLeavesTheTerminalStatus(t *testing.T) {
	f := newFixture(t)
	f.session("s1", "t1", "r1")
	o := f.c.BindRun("s1", "t1", "r1")
	ctx, cancel := context.WithCancel(testCtx(t))
	perm := request(ctx, o, bash("tu-1", "ls"))
	f.waitPending("s1", "i-0001")
	cancel() // the loop ended without an answer
	if r := recv(t, perm); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("RequestPermission = %v", r.err)
	}
	f.terminate("r1")
	if err := f.closeRun(o, "turn_terminal"); err != nil {
		t.Fatal(err)
	}
	o.Release()
	if run, _ := f.statuses("s1", "r1"); run != "completed" {
		t.Fatalf("run status = %s, want completed", run)
	}
	s := wantOK[protocol.InteractionSnapshot](t, f.query("s1", "i-0001"))
	if s.Status != protocol.InteractionStatusClosed || s.Outcome.Reason != protocol.InteractionClosureTurnTerminal {
		t.Fatalf("snapshot = %+v", s)
	}
	if f.c.Err() != nil {
		t.Fatal(f.c.Err())
	}
}

func TestCloseBeforeAnyRequestRefusesTheRun(t *testing.T) {
	f := newFixture(t)
	f.session("s1", "t1", "r1")
	o := f.c.BindRun("s1", "t1", "r1")
	if err := f.closeRun(o, "turn_stopped"); err != nil {
		t.Fatal(err)
	}
	var ce *interactions.ClosureError
	if _, err := o.RequestPermission(testCtx(t), bash("tu-1", "ls")); !errors.As(err, &ce) || ce.Reason != protocol.InteractionClosureTurnStopped {
		t.Fatalf("RequestPermission error = %v", err)
	}
	o.Release()
	if f.c.Err() != nil {
		t.Fatal(f.c.Err())
	}
}

func TestRestartClosesPendingAndKeepsAnswers(t *testing.T) {
	f := newFixture(t)
	f.session("s1", "t1", "r1")
	o := f.c.BindRun("s1", "t1", "r1")
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	first := request(ctx, o, bash("tu-1", "ls"))
	f.waitPending("s1", "i-0001")
	answered := wantOK[protocol.InteractionAnsweredSnapshot](t, f.answer("i-0001", deny()))
	recv(t, first)
	left := request(ctx, o, bash("tu-2", "make"))
	f.waitPending("s1", "i-0002")
	// The host dies: nothing closes the run.
	cancel()
	recv(t, left)
	f.ids.Store(100)
	f.restart()

	s := wantOK[protocol.InteractionSnapshot](t, f.query("s1", "i-0002"))
	if s.Status != protocol.InteractionStatusClosed || s.Outcome.Reason != protocol.InteractionClosureHostRestarted {
		t.Fatalf("left-over interaction after restart = %+v", s)
	}
	wantErr(t, f.answer("i-0002", allow(false)), protocol.ErrAlreadyResolved, interactions.MessageAlreadyClosed)
	q := wantOK[protocol.InteractionSnapshot](t, f.query("s1", "i-0001"))
	if !reflect.DeepEqual(q, protocol.InteractionSnapshot(answered)) {
		t.Fatalf("answered interaction after restart = %+v, want %+v", q, answered)
	}
	again := wantOK[protocol.InteractionAnsweredSnapshot](t, f.answer("i-0001", deny()))
	if !reflect.DeepEqual(again, answered) {
		t.Fatalf("identical re-answer after restart = %+v, want %+v", again, answered)
	}
	wantErr(t, f.answer("i-0001", allow(false)), protocol.ErrAlreadyResolved, interactions.MessageDifferentAnswer)
	f.wantStatuses("s1", "r1", "running")
	if n := f.count(`SELECT COUNT(*) FROM interactions WHERE status = 'pending'`); n != 0 {
		t.Fatalf("%d pending after recovery", n)
	}

	// Recovery happens once: a second host sees the same data.
	f.restart()
	if s2 := wantOK[protocol.InteractionSnapshot](t, f.query("s1", "i-0002")); !reflect.DeepEqual(s2, s) {
		t.Fatalf("second restart changed %+v to %+v", s, s2)
	}
	// A run bound before recovery poisons it.
	f.c.BindRun("s1", "t9", "r9")
	if err := f.c.Recover(testCtx(t)); !errors.Is(err, interactions.ErrPoisoned) || f.poisons.Load() != 1 {
		t.Fatalf("Recover after a bind = %v (poisons %d)", err, f.poisons.Load())
	}
}

func TestQuestionsAreAnsweredAndNeverTimeOut(t *testing.T) {
	f := newFixtureTimeout(t, time.Nanosecond)
	f.session("s1", "t1", "r1")
	var o tools.QuestionAsker = f.c.BindRun("s1", "t1", "r1")
	type result struct {
		answers []*string
		err     error
	}
	ch := make(chan result, 1)
	go func() {
		a, err := o.AskQuestions(testCtx(t), "tu-1", []tools.Question{
			{Question: "Color?", Options: []tools.QuestionOption{{Label: "red"}, {Label: "blue", Description: "calm"}}},
		})
		ch <- result{a, err}
	}()
	snap := f.waitPending("s1", "i-0001")
	q := snap.Interactions.Pending[0].Request
	if q.Kind != protocol.InteractionKindQuestion || q.ToolUseID != "tu-1" || q.Questions[0].Options[1].Description != "calm" {
		t.Fatalf("question request = %+v", q)
	}
	f.wantStatuses("s1", "r1", "waiting_for_user")
	wantOK[protocol.InteractionAnsweredSnapshot](t, f.answer("i-0001", answers(str("blue"))))
	r := recv(t, ch)
	if r.err != nil || len(r.answers) != 1 || *r.answers[0] != "blue" {
		t.Fatalf("AskQuestions = %v, %v", r.answers, r.err)
	}
	f.wantStatuses("s1", "r1", "running")
}

func TestInvalidRequestsWriteNothing(t *testing.T) {
	f := newFixture(t)
	f.session("s1", "t1", "r1")
	o := f.c.BindRun("s1", "t1", "r1")
	ctx := testCtx(t)
	for name, req := range map[string]agent.PermissionRequest{
		"no command":        {ToolUseID: "tu", ToolName: "Bash", Category: "shell_unsafe", Args: []byte(`{}`)},
		"unknown category":  {ToolUseID: "tu", ToolName: "X", Category: "bogus", Args: []byte(`{}`)},
		"no tool use id":    {ToolName: "X", Category: "custom_tool", Args: []byte(`{}`)},
		"remembered stdin":  {ToolUseID: "tu", ToolName: "WriteStdin", Category: "shell_unsafe", Args: []byte(`{"input":"y"}`), RememberAllowed: true, ScopeKey: "k"},
		"category mismatch": {ToolUseID: "tu", ToolName: "Read", Category: "file_write", Args: []byte(`{"path":"a"}`)},
	} {
		if _, err := o.RequestPermission(ctx, req); !errors.Is(err, interactions.ErrInvalidRequest) {
			t.Errorf("%s: error = %v, want invalid request", name, err)
		}
	}
	if _, err := o.AskQuestions(ctx, "tu", []tools.Question{{Question: "one option?", Options: []tools.QuestionOption{{Label: "a"}}}}); !errors.Is(err, interactions.ErrInvalidRequest) {
		t.Errorf("question with one option: error = %v", err)
	}
	if n := f.count(`SELECT COUNT(*) FROM interactions`); n != 0 {
		t.Fatalf("%d interactions stored for invalid requests", n)
	}
	f.wantStatuses("s1", "r1", "running")
}

func TestPoisonFailsEverythingAfterwards(t *testing.T) {
	f := newFixture(t)
	f.session("s1", "t1", "r1")
	o := f.c.BindRun("s1", "t1", "r1")
	ctx := testCtx(t)
	perm := request(ctx, o, bash("tu-1", "ls"))
	f.waitPending("s1", "i-0001")
	f.c.BindRun("s1", "t2", "r2").Release() // a run released without a closure breaks an invariant
	if r := recv(t, perm); !errors.Is(r.err, interactions.ErrPoisoned) {
		t.Fatalf("waiting RequestPermission = %v, want poisoned", r.err)
	}
	if _, err := o.RequestPermission(ctx, bash("tu-2", "ls")); !errors.Is(err, interactions.ErrPoisoned) {
		t.Fatalf("later RequestPermission = %v", err)
	}
	wantErr(t, f.answer("i-0001", allow(false)), protocol.ErrInternalFailure, protocol.MessageOperationFailed)
	wantErr(t, f.query("s1", "i-0001"), protocol.ErrInternalFailure, protocol.MessageOperationFailed)
	if err := f.closeRun(o, "turn_stopped"); !errors.Is(err, interactions.ErrPoisoned) {
		t.Fatalf("CloseRun = %v", err)
	}
	if f.poisons.Load() != 1 {
		t.Fatalf("OnPoison called %d times, want 1", f.poisons.Load())
	}
	// The durable pending interaction stays for the next host to close.
	if n := f.count(`SELECT COUNT(*) FROM interactions WHERE status = 'pending'`); n != 1 {
		t.Fatalf("%d pending", n)
	}
}

func TestReleaseWithoutClosurePoisons(t *testing.T) {
	f := newFixture(t)
	f.session("s1", "t1", "r1")
	f.c.BindRun("s1", "t1", "r1").Release()
	if !errors.Is(f.c.Err(), interactions.ErrPoisoned) || f.poisons.Load() != 1 {
		t.Fatalf("Err = %v, poisons %d", f.c.Err(), f.poisons.Load())
	}
}
