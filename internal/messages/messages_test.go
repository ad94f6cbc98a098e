package messages_test

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/messages"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/turns"
	"github.com/maka-agent/maka/protocol"
)

const (
	current = protocol.PlacementCurrentTurn
	next    = protocol.PlacementNextTurn
)

func TestIdleSubmitStartsOneTurnAndRetriesReturnIt(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	g := newGate()
	f.model.then(hold("answer", g))
	in := f.submitIn("s1", "m1", text("hello"), current)
	first := f.mustSubmit(in)
	if first.Disposition != protocol.DispositionTurnStarted || first.TurnID == "" {
		t.Fatalf("idle submit answered %+v", first)
	}
	g.wait(t)
	// A retry while the turn runs, and one spelled with a redundant
	// displayText and empty lists (normalized away), answer the same turn.
	if again := f.mustSubmit(in); again != first {
		t.Fatalf("retry answered %+v, want %+v", again, first)
	}
	same := "hello"
	spelled := in
	spelled.Content = protocol.MessageContent{Text: "hello", DisplayText: &same, Attachments: []protocol.AttachmentRef{}, Quotes: []protocol.QuoteRef{}}
	if again := f.mustSubmit(spelled); again != first {
		t.Fatalf("normalized retry answered %+v, want %+v", again, first)
	}
	changed := in
	changed.Content = text("hello!")
	_, err := f.submit(changed)
	expectErr(t, "changed content", err, protocol.ErrOperationConflict, messages.MessageIdentityConflict)
	moved := in
	moved.Placement = next
	_, err = f.submit(moved)
	expectErr(t, "changed placement", err, protocol.ErrOperationConflict, messages.MessageIdentityConflict)
	g.open()
	f.waitIdle("s1")
	if s := f.query("s1", first.TurnID); s.Status != protocol.TurnCompleted {
		t.Fatalf("turn ended %+v", s)
	}
	// The turn's user message id is the message id.
	if id := f.str(`SELECT user_message_id FROM turn_admissions WHERE turn_id = ?`, first.TurnID); id != "m1" {
		t.Fatalf("user message id %q", id)
	}
	if n := f.count(`SELECT COUNT(*) FROM run_events WHERE type = 'user_message' AND json_extract(payload, '$.messageId') = 'm1'`); n != 1 {
		t.Fatalf("%d user messages with id m1", n)
	}
	sources := f.str(`SELECT sources FROM turn_admissions WHERE turn_id = ?`, first.TurnID)
	if !strings.Contains(sources, `"disposition":"turn_started"`) || !strings.Contains(sources, `"messageId":"m1"`) {
		t.Fatalf("sources %s", sources)
	}
	// After a restart (a new host epoch) the retry, from either epoch,
	// answers the same turn and starts nothing.
	f.restart()
	for _, origin := range []string{"epoch-1", f.epoch} {
		retry := in
		retry.OriginHostEpoch = origin
		if again := f.mustSubmit(retry); again != first {
			t.Fatalf("retry from %s after restart answered %+v, want %+v", origin, again, first)
		}
	}
	if n := f.count(`SELECT COUNT(*) FROM turn_admissions WHERE session_id = 's1'`); n != 1 {
		t.Fatalf("%d admissions, want 1", n)
	}
	if n := len(f.model.seen()); n != 1 {
		t.Fatalf("the model was asked %d times, want 1", n)
	}
	if _, err := f.submit(f.submitIn("nope", "m1", text("x"), current)); err == nil || err.Code != protocol.ErrNotFound {
		t.Fatalf("submit to an unknown session: %v", err)
	}
	if f.drains.Load() != 0 {
		t.Fatal("the host was asked to drain")
	}
}

func TestSteeringReachesTheNextStepAndIsRecorded(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	g := newGate()
	f.model.then(holdTool(g), say("done"))
	turn := f.start("s1", "t1", "go")
	g.wait(t)
	r1 := f.mustSubmit(f.submitIn("s1", "m1", text("also check the tests"), current))
	r2 := f.mustSubmit(f.submitIn("s1", "m2", text("and the docs"), current))
	if r1 != (protocol.TurnMessageSubmitResult{Disposition: protocol.DispositionSteering, QueueRevision: 1}) ||
		r2 != (protocol.TurnMessageSubmitResult{Disposition: protocol.DispositionSteering, QueueRevision: 2}) {
		t.Fatalf("steering submits answered %+v, %+v", r1, r2)
	}
	q := f.turns.QueueProjection("s1")
	if q.QueueRevision != 2 || len(q.Steering) != 2 || q.Steering[0].MessageID != "m1" || q.Steering[0].State != protocol.MessageQueued || len(q.Followup) != 0 {
		t.Fatalf("projection %+v", q)
	}
	// A retry of a queued message replays its receipt.
	if again := f.mustSubmit(f.submitIn("s1", "m1", text("also check the tests"), current)); again != r1 {
		t.Fatalf("retry answered %+v, want %+v", again, r1)
	}
	g.open()
	f.waitIdle("s1")
	if s := f.query("s1", "t1"); s.Status != protocol.TurnCompleted || s.RunID != turn.RunID {
		t.Fatalf("turn ended %+v", s)
	}
	reqs := f.model.seen()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	msgs := reqs[1].Messages
	if len(msgs) < 2 {
		t.Fatalf("second request %+v", msgs)
	}
	for i, want := range []string{"also check the tests", "and the docs"} {
		m := msgs[len(msgs)-2+i]
		if m.Role != model.RoleUser || m.Text != agent.SteeringText(want) || !strings.Contains(m.Text, agent.SteeringEnvelope) {
			t.Fatalf("steering message %d reached the model as %+v", i, m)
		}
	}
	// Recorded durably with the original content; no follow-up turn.
	if n := f.count(`SELECT COUNT(*) FROM run_events WHERE run_id = ? AND type = 'steering_message'
		AND json_extract(payload, '$.content.text') IN ('also check the tests', 'and the docs')`, turn.RunID); n != 2 {
		t.Fatalf("%d steering records, want 2", n)
	}
	if n := f.count(`SELECT COUNT(*) FROM turn_admissions WHERE session_id = 's1'`); n != 1 {
		t.Fatalf("%d admissions, want 1", n)
	}
	if q := f.turns.QueueProjection("s1"); q.QueueRevision != 0 || len(q.Steering)+len(q.Followup) != 0 {
		t.Fatalf("idle projection %+v", q)
	}
	if n := f.resid.n.Load(); n != 0 {
		t.Fatalf("%d residencies held", n)
	}
}

func TestFollowupsBecomeExactlyOneSuccessorAfterThePredecessorsTerminalSnapshot(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	sub := f.subscribe("s1")
	g := newGate()
	f.model.then(hold("first answer", g), say("second answer"))
	t1 := f.start("s1", "t1", "go")
	g.wait(t)
	shown := "short"
	quote := protocol.QuoteRef{Text: "quoted", SourceTurnID: "t1"}
	subs := []struct {
		id        string
		content   protocol.MessageContent
		placement protocol.MessagePlacement
		want      string
	}{
		{"f1", text("first follow-up"), next, protocol.DispositionFollowup},
		{"s1m", text("unpulled steering"), current, protocol.DispositionSteering},
		{"f2", protocol.MessageContent{Text: "second follow-up", DisplayText: &shown, Quotes: []protocol.QuoteRef{quote}}, next, protocol.DispositionFollowup},
	}
	for i, s := range subs {
		r := f.mustSubmit(f.submitIn("s1", s.id, s.content, s.placement))
		if r.Disposition != s.want || r.QueueRevision != int64(i+1) {
			t.Fatalf("submit %s answered %+v", s.id, r)
		}
	}
	g.open()
	f.waitIdle("s1")
	if n := f.count(`SELECT COUNT(*) FROM turn_admissions WHERE session_id = 's1'`); n != 2 {
		t.Fatalf("%d admissions, want 2", n)
	}
	succ := f.str(`SELECT turn_id FROM turn_admissions WHERE session_id = 's1' AND chain_seq = 2`)
	if prev := f.str(`SELECT previous_turn_id FROM turn_admissions WHERE turn_id = ?`, succ); prev != "t1" {
		t.Fatalf("successor extends %q", prev)
	}
	// Unpulled steering first, then the follow-ups, joined by a blank line.
	wantText := "unpulled steering\n\nfirst follow-up\n\nsecond follow-up"
	var content protocol.MessageContent
	if err := jsonUnmarshal(f.str(`SELECT content FROM turn_admissions WHERE turn_id = ?`, succ), &content); err != nil {
		t.Fatal(err)
	}
	if content.Text != wantText || content.DisplayText == nil || *content.DisplayText != "unpulled steering\n\nfirst follow-up\n\nshort" ||
		len(content.Quotes) != 1 || content.Quotes[0] != quote {
		t.Fatalf("successor content %+v", content)
	}
	var sources []turns.SourceMessage
	if err := jsonUnmarshal(f.str(`SELECT sources FROM turn_admissions WHERE turn_id = ?`, succ), &sources); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range sources {
		got = append(got, s.MessageID+":"+s.Disposition+":"+string(s.Placement))
	}
	if strings.Join(got, ",") != "s1m:steering:current_turn,f1:followup:next_turn,f2:followup:next_turn" {
		t.Fatalf("successor sources %v", got)
	}
	reqs := f.model.seen()
	last := reqs[len(reqs)-1].Messages
	if len(reqs) != 2 || last[len(last)-1].Text != wantText {
		t.Fatalf("successor prompt %+v", last)
	}
	if s := f.query("s1", succ); s.Status != protocol.TurnCompleted {
		t.Fatalf("successor %+v", s)
	}
	// Subscribers saw the predecessor's terminal snapshot exactly once,
	// before anything of the successor.
	terminal, firstSucc := -1, -1
	for i, s := range sub.snapshots(t) {
		switch {
		case s.RootTurn == nil:
		case s.RootTurn.TurnID == t1.TurnID && s.RootTurn.Status.Terminal():
			if terminal >= 0 {
				t.Fatalf("predecessor terminal published twice (frames %d and %d)", terminal, i)
			}
			terminal = i
		case s.RootTurn.TurnID == succ && firstSucc < 0:
			firstSucc = i
		}
	}
	if terminal < 0 || firstSucc < 0 || terminal > firstSucc {
		t.Fatalf("predecessor terminal at frame %d, successor first at %d", terminal, firstSucc)
	}
	if n := f.resid.n.Load(); n != 0 {
		t.Fatalf("%d residencies held", n)
	}
}

func TestRetractTakesEveryQueuedEntryAndNoSuccessorIsBuilt(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	if r, err := f.retract("s1", "r0"); err != nil || r.QueueRevision != 0 || len(r.Retracted) != 0 {
		t.Fatalf("idle retract: %+v %v", r, err)
	}
	g := newGate()
	f.model.then(hold("working", g))
	f.start("s1", "t1", "go")
	g.wait(t)
	f.mustSubmit(f.submitIn("s1", "a", text("follow-up a"), next))
	f.mustSubmit(f.submitIn("s1", "s", text("steer s"), current))
	first, err := f.retract("s1", "r1")
	if err != nil {
		t.Fatalf("retract: %v", err)
	}
	if first.QueueRevision != 3 || len(first.Retracted) != 2 {
		t.Fatalf("retract answered %+v", first)
	}
	for i, want := range []string{"s", "a"} {
		e := first.Retracted[i]
		if e.MessageID != want || e.State != protocol.MessageRetracted || e.EntryID == "" {
			t.Fatalf("retracted[%d] = %+v", i, e)
		}
	}
	// An identical retry (any connection) answers the same; a retract with
	// nothing queued does not advance the revision.
	if again, err := f.retract("s1", "r1"); err != nil || !reflect.DeepEqual(again, first) {
		t.Fatalf("retry answered %+v %v, want %+v", again, err, first)
	}
	if r, err := f.retract("s1", "r2"); err != nil || r.QueueRevision != 3 || len(r.Retracted) != 0 {
		t.Fatalf("empty retract: %+v %v", r, err)
	}
	if q := f.turns.QueueProjection("s1"); q.QueueRevision != 3 || len(q.Steering)+len(q.Followup) != 0 {
		t.Fatalf("projection after retract %+v", q)
	}
	if n := f.resid.n.Load(); n != 1 {
		t.Fatalf("%d residencies held, want the turn's only", n)
	}
	g.open()
	f.waitIdle("s1")
	if n := f.count(`SELECT COUNT(*) FROM turn_admissions WHERE session_id = 's1'`); n != 1 {
		t.Fatalf("%d admissions: a successor was built from retracted messages", n)
	}
	if _, err := f.retract("nope", "r3"); err == nil || err.Code != protocol.ErrNotFound {
		t.Fatalf("retract in an unknown session: %v", err)
	}
}

func TestInterruptRetractsStopsAndRetriesAgree(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	g := newGate()
	f.model.then(hold("working", g))
	turn := f.start("s1", "t1", "go")
	g.wait(t)
	f.mustSubmit(f.submitIn("s1", "a", text("follow-up a"), next))
	f.mustSubmit(f.submitIn("s1", "s", text("steer s"), current))
	in := protocol.TurnInterruptInput{OriginHostEpoch: f.epoch, SessionID: "s1", InterruptID: "i1", TurnID: "t1", RunID: turn.RunID}
	var wg sync.WaitGroup
	results := make([]protocol.TurnInterruptResult, 2)
	errs := make([]*protocol.OpError, 2)
	for i := range results {
		wg.Go(func() { results[i], errs[i] = f.interrupt(in) })
	}
	wg.Wait()
	for i := range errs {
		if errs[i] != nil {
			t.Fatalf("interrupt %d: %v", i, errs[i])
		}
	}
	r := results[0]
	if !reflect.DeepEqual(results[1], r) {
		t.Fatalf("concurrent interrupts answered %+v and %+v", r, results[1])
	}
	if r.QueueRevision != 3 || len(r.Retracted) != 2 || r.Retracted[0].MessageID != "s" || r.Retracted[1].MessageID != "a" ||
		r.Turn.Status != protocol.TurnCancelled || r.Turn.TurnID != "t1" || r.Turn.RunID != turn.RunID {
		t.Fatalf("interrupt answered %+v", r)
	}
	if again, err := f.interrupt(in); err != nil || !reflect.DeepEqual(again, r) {
		t.Fatalf("later retry answered %+v %v, want %+v", again, err, r)
	}
	changed := in
	changed.RunID = "other-run"
	_, err := f.interrupt(changed)
	expectErr(t, "changed payload", err, protocol.ErrOperationConflict, messages.InterruptIdentityConflict)
	f.waitIdle("s1")
	if n := f.count(`SELECT COUNT(*) FROM turn_admissions WHERE session_id = 's1'`); n != 1 {
		t.Fatalf("%d admissions: a successor was built from retracted messages", n)
	}
	if n := f.resid.n.Load(); n != 0 {
		t.Fatalf("%d residencies held", n)
	}
}

func TestInterruptOfATurnThatIsNotTheActiveRootConflictsDurably(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	done := f.start("s1", "t1", "go")
	f.waitIdle("s1")
	in := protocol.TurnInterruptInput{OriginHostEpoch: f.epoch, SessionID: "s1", InterruptID: "i1", TurnID: "t1", RunID: done.RunID}
	_, err := f.interrupt(in)
	expectErr(t, "finished turn", err, protocol.ErrOperationConflict, messages.InterruptMismatch)
	if q := f.turns.QueueProjection("s1"); q.QueueRevision != 0 {
		t.Fatalf("queue state kept: %+v", q)
	}
	// The conflict is receipted: retries answer the stored conflict, also
	// while another turn runs.
	g := newGate()
	f.model.then(hold("working", g))
	t2 := f.start("s1", "t2", "again")
	g.wait(t)
	wrong := protocol.TurnInterruptInput{OriginHostEpoch: f.epoch, SessionID: "s1", InterruptID: "i2", TurnID: "t2", RunID: "not-the-run"}
	_, err = f.interrupt(wrong)
	expectErr(t, "wrong run", err, protocol.ErrOperationConflict, messages.InterruptMismatch)
	for _, retry := range []protocol.TurnInterruptInput{in, wrong} {
		_, err = f.interrupt(retry)
		expectErr(t, "retry "+retry.InterruptID, err, protocol.ErrOperationConflict, messages.InterruptMismatch)
	}
	if n := f.count(`SELECT COUNT(*) FROM message_receipts WHERE operation = 'interrupt'`); n != 2 {
		t.Fatalf("%d interrupt receipts, want 2", n)
	}
	if s := f.query("s1", "t2"); s.Status != protocol.TurnRunning || s.RunID != t2.RunID {
		t.Fatalf("a mismatched interrupt touched the running turn: %+v", s)
	}
	_, err = f.interrupt(protocol.TurnInterruptInput{OriginHostEpoch: f.epoch, SessionID: "nope", InterruptID: "i3", TurnID: "t1", RunID: "r"})
	expectErr(t, "unknown session", err, protocol.ErrNotFound, "")
	g.open()
	f.waitIdle("s1")
}

func TestStopFenceClosesAdmissionUntilTheTransition(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	g := newGate()
	stopped := make(chan struct{}, 1)
	f.model.then(stubborn(g, stopped))
	turn := f.start("s1", "t1", "go")
	g.wait(t)
	f.mustSubmit(f.submitIn("s1", "a", text("follow-up a"), next))
	type stopResult struct {
		snap protocol.TurnSnapshot
		err  *protocol.OpError
	}
	res := make(chan stopResult, 1)
	go func() {
		s, err := f.stop("s1", "t1", turn.RunID)
		res <- stopResult{s, err}
	}()
	<-stopped // the fence is committed before the stop is delivered
	_, err := f.submit(f.submitIn("s1", "b", text("too late"), next))
	expectErr(t, "submit after the fence", err, protocol.ErrSessionBusy, messages.MessageAdmissionClosed)
	_, err = f.submit(f.submitIn("s1", "c", text("too late"), current))
	expectErr(t, "steering after the fence", err, protocol.ErrSessionBusy, messages.MessageAdmissionClosed)
	if q := f.turns.QueueProjection("s1"); q.QueueRevision != 2 || len(q.Followup)+len(q.Steering) != 0 {
		t.Fatalf("projection after the fence %+v", q)
	}
	g.open()
	r := <-res
	if r.err != nil || r.snap.Status != protocol.TurnCancelled {
		t.Fatalf("stop answered %+v %v", r.snap, r.err)
	}
	f.waitIdle("s1")
	if n := f.count(`SELECT COUNT(*) FROM turn_admissions WHERE session_id = 's1'`); n != 1 {
		t.Fatalf("%d admissions: a successor was built from a fenced message", n)
	}
	// After the transition the session admits messages again.
	if r := f.mustSubmit(f.submitIn("s1", "d", text("fresh"), next)); r.Disposition != protocol.DispositionTurnStarted {
		t.Fatalf("submit after the transition answered %+v", r)
	}
	f.waitIdle("s1")
}

func TestQueueCapacityAndRetractsThatNeverCount(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	g := newGate()
	f.model.then(hold("working", g))
	turn := f.start("s1", "t1", "go")
	g.wait(t)
	for i := range protocol.MessageQueueMaxEntries {
		r := f.mustSubmit(f.submitIn("s1", "m"+itoa(i), text("follow-up "+itoa(i)), next))
		if r.QueueRevision != int64(i+1) {
			t.Fatalf("submit %d answered %+v", i, r)
		}
	}
	_, err := f.submit(f.submitIn("s1", "m64", text("one too many"), next))
	expectErr(t, "65th entry", err, protocol.ErrSessionBusy, messages.MessageQueueFull)
	if q := f.turns.QueueProjection("s1"); q.QueueRevision != 64 || len(q.Followup) != 64 {
		t.Fatalf("a refusal changed the queue: revision %d, %d entries", q.QueueRevision, len(q.Followup))
	}
	if n := f.count(`SELECT COUNT(*) FROM message_receipts WHERE operation = 'submit'`); n != 64 {
		t.Fatalf("%d submit receipts, want 64", n)
	}
	if n := f.resid.n.Load(); n != 65 {
		t.Fatalf("%d residencies, want 65", n)
	}
	// 65 retracts in a row succeed; the first takes everything.
	for i := range protocol.MessageQueueMaxEntries + 1 {
		r, err := f.retract("s1", "r"+itoa(i))
		if err != nil {
			t.Fatalf("retract %d: %v", i, err)
		}
		if want := map[bool]int{true: 64, false: 0}[i == 0]; len(r.Retracted) != want || r.QueueRevision != 65 {
			t.Fatalf("retract %d answered revision %d with %d entries", i, r.QueueRevision, len(r.Retracted))
		}
	}
	if r := f.mustSubmit(f.submitIn("s1", "after", text("still room"), next)); r.QueueRevision != 66 {
		t.Fatalf("submit after the retracts answered %+v", r)
	}
	if _, err := f.stop("s1", "t1", turn.RunID); err != nil {
		t.Fatalf("stop: %v", err)
	}
	f.waitIdle("s1")
	if n := f.resid.n.Load(); n != 0 {
		t.Fatalf("%d residencies held", n)
	}
}

func TestSizeChecksRefuseWithoutChangingTheQueue(t *testing.T) {
	big := strings.Repeat("x", 24000)
	short := "short"
	cases := []struct {
		name    string
		entries []protocol.MessageContent
		refusal string
	}{
		// Three 20 KB entries exceed the 52 KiB queue projection.
		{"projection", []protocol.MessageContent{text(strings.Repeat("a", 20000)), text(strings.Repeat("b", 20000)), text(strings.Repeat("c", 20000))},
			messages.MessageProjectionFull},
		// A display text makes the aggregate repeat every other text: the
		// follow-up turn would exceed 64 KiB.
		{"follow-up turn", []protocol.MessageContent{{Text: big, DisplayText: &short}, text(big)}, messages.MessageNoFollowupTurn},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.createSession("s1")
			g := newGate()
			f.model.then(hold("working", g))
			turn := f.start("s1", "t1", "go")
			g.wait(t)
			last := len(tc.entries) - 1
			for i, c := range tc.entries[:last] {
				f.mustSubmit(f.submitIn("s1", "m"+itoa(i), c, next))
			}
			before := f.turns.QueueProjection("s1")
			resid := f.resid.n.Load()
			_, err := f.submit(f.submitIn("s1", "last", tc.entries[last], next))
			expectErr(t, "last entry", err, protocol.ErrSessionBusy, tc.refusal)
			if after := f.turns.QueueProjection("s1"); !reflect.DeepEqual(after, before) {
				t.Fatalf("a refusal changed the queue: %d → %d", before.QueueRevision, after.QueueRevision)
			}
			if f.resid.n.Load() != resid || f.count(`SELECT COUNT(*) FROM message_receipts`) != last {
				t.Fatal("a refusal took a residency or wrote a receipt")
			}
			if _, err := f.stop("s1", "t1", turn.RunID); err != nil {
				t.Fatalf("stop: %v", err)
			}
			f.waitIdle("s1")
		})
	}
}

func TestEveryReachableQueueHasAnEncodableInterruptResult(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	g := newGate()
	f.model.then(hold("working", g))
	turn := f.start("s1", "t1", "go")
	g.wait(t)
	body := strings.Repeat("\x01", 120) + strings.Repeat("y", 600) // escapes inflate the encoding
	accepted := 0
	for i := range protocol.MessageQueueMaxEntries + 1 {
		_, err := f.submit(f.submitIn("s1", "m"+itoa(i), text(body), next))
		if err != nil {
			expectErr(t, "full queue", err, protocol.ErrSessionBusy, "")
			break
		}
		accepted++
	}
	if accepted == 0 {
		t.Fatal("nothing was accepted")
	}
	// f.call checks the result against its codec (≤ 56 KiB).
	r, err := f.interrupt(protocol.TurnInterruptInput{OriginHostEpoch: f.epoch, SessionID: "s1", InterruptID: "i1", TurnID: "t1", RunID: turn.RunID})
	if err != nil || len(r.Retracted) != accepted || r.Turn.Status != protocol.TurnCancelled {
		t.Fatalf("interrupt of %d entries: %d retracted, %+v %v", accepted, len(r.Retracted), r.Turn, err)
	}
	f.waitIdle("s1")
}

func TestOldEpochSubmitsAnswerFromDurableProofs(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	started := f.mustSubmit(f.submitIn("s1", "m1", text("start"), next))
	f.waitIdle("s1")
	g := newGate()
	f.model.then(holdTool(g), say("done"), say("follow-up done"))
	turn := f.start("s1", "t2", "go")
	g.wait(t)
	quoted := protocol.MessageContent{Text: "follow", Quotes: []protocol.QuoteRef{{Text: "q", SourceTurnID: "t2"}}}
	f.mustSubmit(f.submitIn("s1", "m2", text("steer"), current))
	f.mustSubmit(f.submitIn("s1", "m3", quoted, next))
	g.open()
	f.waitIdle("s1")
	if s := f.query("s1", "t2"); s.Status != protocol.TurnCompleted || s.RunID != turn.RunID {
		t.Fatalf("t2 %+v", s)
	}
	old := f.epoch
	f.restart()
	if n := f.count(`SELECT COUNT(*) FROM message_receipts WHERE host_epoch = ?`, old); n != 0 {
		t.Fatalf("%d receipts of the old epoch survived", n)
	}
	oldIn := func(id string, c protocol.MessageContent, p protocol.MessagePlacement) protocol.TurnMessageSubmitInput {
		in := f.submitIn("s1", id, c, p)
		in.OriginHostEpoch = old
		return in
	}
	otherQuote := quoted
	otherQuote.Quotes = []protocol.QuoteRef{{Text: "q", SourceTurnID: "t1"}}
	cases := []struct {
		name string
		in   protocol.TurnMessageSubmitInput
		code protocol.ErrorCode
		msg  string
	}{
		{"steering recorded", oldIn("m2", text("steer"), current), protocol.ErrOutcomeUnknown, messages.MessageDispositionUnknown},
		{"steering with another placement", oldIn("m2", text("steer"), next), protocol.ErrOperationConflict, messages.MessageIdentityConflict},
		{"folded follow-up", oldIn("m3", quoted, next), protocol.ErrOutcomeUnknown, messages.MessageDispositionUnknown},
		{"follow-up with another quote provenance", oldIn("m3", otherQuote, next), protocol.ErrOperationConflict, messages.MessageIdentityConflict},
		{"turn start with another content", oldIn("m1", text("other"), next), protocol.ErrOperationConflict, messages.MessageIdentityConflict},
		{"unknown message", oldIn("m9", text("?"), next), protocol.ErrOutcomeUnknown, messages.MessageDispositionUnknown},
	}
	for _, tc := range cases {
		_, err := f.submit(tc.in)
		expectErr(t, tc.name, err, tc.code, tc.msg)
	}
	if again := f.mustSubmit(oldIn("m1", text("start"), next)); again != started {
		t.Fatalf("old-epoch turn start answered %+v, want %+v", again, started)
	}
	_, err := f.retract("s1", "r1")
	if err != nil {
		t.Fatalf("current-epoch retract: %v", err)
	}
	out := f.call(protocol.OpQueueRetract, protocol.QueueRetractInput{OriginHostEpoch: old, SessionID: "s1", RetractID: "r1"})
	expectErr(t, "old-epoch retract", out.Err, protocol.ErrOutcomeUnknown, messages.RetractOutcomeUnknown)
	out = f.call(protocol.OpTurnInterrupt, protocol.TurnInterruptInput{OriginHostEpoch: old, SessionID: "s1", InterruptID: "i1", TurnID: "t2", RunID: turn.RunID})
	expectErr(t, "old-epoch interrupt", out.Err, protocol.ErrOutcomeUnknown, messages.InterruptOutcomeUnknown)
	if n := f.count(`SELECT COUNT(*) FROM turn_admissions WHERE session_id = 's1'`); n != 3 {
		t.Fatalf("%d admissions, want 3 (m1's turn, t2, its follow-up)", n)
	}
}

func TestReceiptWriteFailureFailsStop(t *testing.T) {
	f := newFixture(t)
	f.drainExpected = true
	f.createSession("s1")
	g := newGate()
	f.model.then(hold("working", g))
	turn := f.start("s1", "t1", "go")
	g.wait(t)
	f.failInserts("message_receipts")
	_, err := f.submit(f.submitIn("s1", "a", text("accepted, unproven"), next))
	expectErr(t, "submit whose receipt failed", err, protocol.ErrInternalFailure, "")
	if f.drains.Load() == 0 {
		t.Fatal("the host was not asked to drain")
	}
	// The accepted entry stays.
	if q := f.turns.QueueProjection("s1"); len(q.Followup) != 1 || q.Followup[0].MessageID != "a" {
		t.Fatalf("projection %+v", q)
	}
	_, err = f.submit(f.submitIn("s1", "b", text("later"), next))
	expectErr(t, "later submit", err, protocol.ErrHostDraining, messages.MessageAuthorityFailed)
	_, err = f.submit(f.submitIn("s1", "a", text("accepted, unproven"), next))
	expectErr(t, "retry", err, protocol.ErrHostDraining, messages.MessageAuthorityFailed)
	_, err = f.retract("s1", "r1")
	expectErr(t, "retract", err, protocol.ErrHostDraining, messages.MessageAuthorityFailed)
	_, err = f.interrupt(protocol.TurnInterruptInput{OriginHostEpoch: f.epoch, SessionID: "s1", InterruptID: "i1", TurnID: "t1", RunID: turn.RunID})
	expectErr(t, "interrupt", err, protocol.ErrHostDraining, messages.MessageAuthorityFailed)
	// turn.stop still works: its fence retracts the entry.
	if s, err := f.stop("s1", "t1", turn.RunID); err != nil || s.Status != protocol.TurnCancelled {
		t.Fatalf("stop: %+v %v", s, err)
	}
	f.waitIdle("s1")
	if n := f.count(`SELECT COUNT(*) FROM turn_admissions`); n != 1 {
		t.Fatalf("%d admissions", n)
	}
}

func TestDrainKeepsAcceptedEntriesAndStartsNoSuccessor(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	f.createSession("s2")
	g := newGate()
	f.model.then(hold("working", g))
	f.start("s1", "t1", "go")
	g.wait(t)
	f.mustSubmit(f.submitIn("s1", "a", text("follow-up a"), next))
	f.turns.BeginDrain()
	_, err := f.submit(f.submitIn("s1", "b", text("b"), next))
	expectErr(t, "submit while draining", err, protocol.ErrHostDraining, protocol.MessageHostDraining)
	_, err = f.submit(f.submitIn("s2", "c", text("c"), next))
	expectErr(t, "idle submit while draining", err, protocol.ErrHostDraining, protocol.MessageHostDraining)
	if q := f.turns.QueueProjection("s1"); len(q.Followup) != 1 {
		t.Fatalf("accepted entry gone while draining: %+v", q)
	}
	g.open()
	f.waitIdle("s1")
	if n := f.count(`SELECT COUNT(*) FROM turn_admissions`); n != 1 {
		t.Fatalf("%d admissions: a successor started while draining", n)
	}
	if q := f.turns.QueueProjection("s1"); q.QueueRevision != 0 || len(q.Followup) != 0 {
		t.Fatalf("projection after the terminal fence %+v", q)
	}
	if n := f.resid.n.Load(); n != 0 {
		t.Fatalf("%d residencies held", n)
	}
}

// Guarantee 12: a turn that cannot start while a follow-up waits for it
// (here the successor's admission-and-start write fails) keeps the
// session's ownership and the follow-up, the host drains, later submits
// get host_draining, and close fails instead of dropping the message.
func TestSuccessorThatCannotStartKeepsOwnershipAndTheFollowup(t *testing.T) {
	f := newFixture(t)
	f.drainExpected = true
	f.createSession("s1")
	g := newGate()
	f.model.then(hold("working", g))
	f.start("s1", "t1", "go")
	g.wait(t)
	f.mustSubmit(f.submitIn("s1", "a", text("follow-up a"), next))
	f.failInserts("runs")
	g.open()
	if err := f.turns.WaitIdle(testCtx(t), "s1"); err == nil {
		t.Fatal("the session went idle: the follow-up's turn was dropped")
	}
	if f.drains.Load() == 0 {
		t.Fatal("the host was not asked to drain")
	}
	if !f.turns.ActiveRoot("s1") {
		t.Fatal("the session lost its active root")
	}
	if q := f.turns.QueueProjection("s1"); len(q.Followup) != 1 || q.Followup[0].MessageID != "a" {
		t.Fatalf("the follow-up is not kept: %+v", q)
	}
	if n := f.count(`SELECT COUNT(*) FROM turn_admissions`); n != 1 {
		t.Fatalf("%d admissions: the failed successor left a trace", n)
	}
	// The composition answers the drain request by draining.
	f.turns.BeginDrain()
	_, err := f.submit(f.submitIn("s1", "b", text("later"), next))
	expectErr(t, "submit after the failed start", err, protocol.ErrHostDraining, "")

	f.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	if err := f.dom.Composition.Close(ctx); err == nil {
		t.Fatal("close succeeded with an accepted follow-up left")
	}
	if n := f.resid.n.Load(); n != 2 {
		t.Fatalf("%d residencies held, want the stuck root's and its queue's", n)
	}
}
