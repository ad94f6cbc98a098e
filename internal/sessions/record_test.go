package sessions

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

func mustEvent(tb testing.TB, seq, ts int64, typ string, payload any) RunEvent {
	tb.Helper()
	ev, err := NewRunEvent(seq, ts, typ, payload)
	if err != nil {
		tb.Fatal(err)
	}
	return ev
}

func (f *fixture) append(sessionID, runID string, events ...RunEvent) {
	f.t.Helper()
	if err := f.svc.AppendRunEvents(testCtx(f.t), sessionID, runID, events); err != nil {
		f.t.Fatalf("AppendRunEvents: %v", err)
	}
}

func (f *fixture) replay(runID string) []RunEvent {
	f.t.Helper()
	evs, err := f.svc.ReadRunEvents(testCtx(f.t), runID, 0, 0)
	if err != nil {
		f.t.Fatalf("ReadRunEvents: %v", err)
	}
	return evs
}

func (f *fixture) transcriptPage(sessionID, cursor string, limit int64) host.Outcome {
	f.t.Helper()
	return f.call(protocol.OpSessionTranscriptPage, protocol.SessionTranscriptPageInput{SessionID: sessionID, Cursor: cursor, Limit: limit})
}

// transcript reads the whole transcript of sessionID with pages of limit
// entries and checks every page's bounds.
func (f *fixture) transcript(sessionID string, limit int64) []protocol.TranscriptMessage {
	f.t.Helper()
	var all []protocol.TranscriptMessage
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10_000 {
			f.t.Fatal("transcript walk does not end")
		}
		page := expectOK[protocol.SessionTranscriptPage](f.t, f.transcriptPage(sessionID, cursor, limit))
		if page.SessionID != sessionID {
			f.t.Fatalf("page of session %q", page.SessionID)
		}
		if len(page.Messages) > int(limit) || len(page.Messages) == 0 && (page.NextCursor != nil || pages > 0) {
			f.t.Fatalf("page %d has %d entries (limit %d), next %v", pages, len(page.Messages), limit, page.NextCursor)
		}
		all = append(all, page.Messages...)
		if page.NextCursor == nil {
			return all
		}
		cursor = *page.NextCursor
	}
}

func (f *fixture) eventRows(where string) int {
	f.t.Helper()
	var n int
	if err := f.st.Read(testCtx(f.t), func(q store.Querier) error {
		return q.QueryRow(`SELECT COUNT(*) FROM run_events WHERE ` + where).Scan(&n)
	}); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func userMsg(tb testing.TB, seq, ts int64, turn, id, text string) RunEvent {
	return mustEvent(tb, seq, ts, EventUserMessage, MessagePayload{TurnID: turn, MessageID: id, Text: text})
}

func textEvent(tb testing.TB, typ string, seq, ts int64, turn, id, text string) RunEvent {
	return mustEvent(tb, seq, ts, typ, MessagePayload{TurnID: turn, MessageID: id, Text: text})
}

func toolStart(tb testing.TB, seq, ts int64, turn, useID, name string) RunEvent {
	return mustEvent(tb, seq, ts, EventToolCallStarted, ToolCallStartedPayload{TurnID: turn, ToolUseID: useID, ToolName: name, Args: json.RawMessage(`{"cmd":"ls"}`)})
}

func toolEnd(tb testing.TB, seq, ts int64, turn, useID string, isErr bool, output string) RunEvent {
	return mustEvent(tb, seq, ts, EventToolCallFinished, ToolCallFinishedPayload{TurnID: turn, ToolUseID: useID, IsError: isErr, Output: output})
}

// --- transcript -----------------------------------------------------------------

func TestTranscriptPagingSplitsAndOrders(t *testing.T) {
	f := newFixture(t)
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
	long := strings.Repeat("héllo wörld ✓ ", 3000) // ~48 KB: several parts
	ctrl := strings.Repeat("\x01", protocol.TranscriptTextMaxBytes)
	bigOutput := strings.Repeat("\x01", 20000)
	f.append("s1", "r1",
		userMsg(t, 1, 100, "t1", "m1", "hello"),
		textEvent(t, EventThinkingComplete, 2, 101, "t1", "m2", "pondering"),
		textEvent(t, EventTextComplete, 3, 102, "t1", "m3", long),
		toolStart(t, 4, 103, "t1", "call_1", "Bash"),
	)
	f.append("s1", "r1",
		toolEnd(t, 5, 104, "t1", "call_1", false, bigOutput),
		toolStart(t, 6, 105, "t1", "call:2/x", "Read"),
		toolStart(t, 7, 106, "t1", "call_3", "Grep"),
		toolEnd(t, 8, 107, "t1", "call_3", true, "exit 1\n"),
		textEvent(t, EventTextComplete, 9, 108, "t1", "m4", ctrl),
	)
	f.append("s1", "r2", userMsg(t, 1, 200, "t2", "m5", "bye"))

	full := f.transcript("s1", protocol.SessionTranscriptMaxLimit)

	// Expected, oldest first.
	var want []protocol.TranscriptMessage
	addText := func(id, turn string, role protocol.TranscriptRole, at int64, text string) {
		for i, chunk := range protocol.SplitTranscriptText(text) {
			want = append(want, protocol.TranscriptMessage{MessageID: id, TurnID: turn, Role: role, CreatedAt: at, Part: int64(i + 1), Text: chunk})
		}
	}
	addText("m1", "t1", protocol.TranscriptRoleUser, 100, "hello")
	addText("m2", "t1", protocol.TranscriptRoleThinking, 101, "pondering")
	addText("m3", "t1", protocol.TranscriptRoleAssistant, 102, long)
	tool := func(useID, name, status string, at int64, output string, truncated bool) protocol.TranscriptMessage {
		return protocol.TranscriptMessage{MessageID: toolMessageID("r1", useID), TurnID: "t1", Role: protocol.TranscriptRoleTool,
			CreatedAt: at, Part: 1, ToolUseID: useID, ToolName: name, Status: status, Output: output, Truncated: truncated}
	}
	// Six escaped bytes per control character: the preview keeps what fits
	// 40 KiB of JSON.
	want = append(want,
		tool("call_1", "Bash", protocol.TranscriptToolCompleted, 103, bigOutput[:40*1024/6], true),
		tool("call:2/x", "Read", protocol.TranscriptToolUnknown, 105, "", false),
		tool("call_3", "Grep", protocol.TranscriptToolErrored, 106, "exit 1\n", false),
	)
	addText("m4", "t1", protocol.TranscriptRoleAssistant, 108, ctrl)
	addText("m5", "t2", protocol.TranscriptRoleUser, 200, "bye")

	if !reflect.DeepEqual(full, want) {
		for i := range max(len(full), len(want)) {
			var g, w protocol.TranscriptMessage
			if i < len(full) {
				g = full[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("entry %d of %d/%d:\n got %s %s part %d (%d bytes)\nwant %s %s part %d (%d bytes)",
					i, len(full), len(want), g.MessageID, g.Role, g.Part, len(g.Text)+len(g.Output), w.MessageID, w.Role, w.Part, len(w.Text)+len(w.Output))
			}
		}
	}
	// The split texts really are split and reassemble.
	var m3, m4 strings.Builder
	parts := map[string]int{}
	for _, m := range full {
		parts[m.MessageID]++
		switch m.MessageID {
		case "m3":
			m3.WriteString(m.Text)
		case "m4":
			m4.WriteString(m.Text)
		}
	}
	if parts["m3"] < 3 || parts["m4"] < 2 || m3.String() != long || m4.String() != ctrl {
		t.Fatalf("split texts: m3 %d parts, m4 %d parts", parts["m3"], parts["m4"])
	}
	// Any page size yields the same transcript.
	for _, limit := range []int64{1, 2, 3, 5, 17} {
		if got := f.transcript("s1", limit); !reflect.DeepEqual(got, full) {
			t.Fatalf("limit %d: transcript differs (%d vs %d entries)", limit, len(got), len(full))
		}
	}
	// The 16 KiB control-character parts are ~44 KiB of JSON each: one per
	// page whatever the limit.
	page := expectOK[protocol.SessionTranscriptPage](t, f.transcriptPage("s1", "", 64))
	if len(page.Messages) >= len(full) || page.NextCursor == nil {
		t.Fatalf("first page holds %d of %d entries", len(page.Messages), len(full))
	}
}

func TestTranscriptErrorsAndEdges(t *testing.T) {
	f := newFixture(t)
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
	f.create(protocol.SessionCreateInput{SessionID: "s2", Workspace: ws("/w")})

	empty := expectOK[protocol.SessionTranscriptPage](t, f.transcriptPage("s1", "", 0))
	if len(empty.Messages) != 0 || empty.NextCursor != nil {
		t.Fatalf("empty transcript = %+v", empty)
	}
	expectErr(t, f.transcriptPage("missing", "", 0), protocol.ErrNotFound, MessageSessionNotFound)

	for i := range 3 {
		f.append("s1", "r1", userMsg(t, int64(i+1), int64(i), "t1", fmt.Sprintf("m%d", i), "text"))
	}
	page := expectOK[protocol.SessionTranscriptPage](t, f.transcriptPage("s1", "", 2))
	if len(page.Messages) != 2 || page.NextCursor == nil {
		t.Fatalf("page = %+v", page)
	}
	// A cursor belongs to its session.
	expectErr(t, f.transcriptPage("s2", *page.NextCursor, 0), protocol.ErrInvalidRequest, MessageInvalidTranscriptCursor)
	for _, bad := range []string{"x", encodeCursor("t1:0:1:s1"), encodeCursor("t1:1:0:s1"), encodeCursor("c1:1:1:s1"),
		encodeCursor("t1:01:1:s1"), *page.NextCursor + "A"} {
		expectErr(t, f.transcriptPage("s1", bad, 0), protocol.ErrInvalidRequest, MessageInvalidTranscriptCursor)
	}
	rest := expectOK[protocol.SessionTranscriptPage](t, f.transcriptPage("s1", *page.NextCursor, 2))
	if len(rest.Messages) != 1 || rest.Messages[0].MessageID != "m2" || rest.NextCursor != nil {
		t.Fatalf("second page = %+v", rest)
	}
	// A cursor past the end (or past the parts of its message) is an empty
	// tail, not an error.
	past := expectOK[protocol.SessionTranscriptPage](t, f.transcriptPage("s1", transcriptCursor{SessionID: "s1", Seq: 99, Part: 1}.encode(), 0))
	if len(past.Messages) != 0 || past.NextCursor != nil {
		t.Fatalf("page past the end = %+v", past)
	}
	skip := expectOK[protocol.SessionTranscriptPage](t, f.transcriptPage("s1", transcriptCursor{SessionID: "s1", Seq: 1, Part: 5}.encode(), 0))
	if len(skip.Messages) != 2 || skip.Messages[0].MessageID != "m1" {
		t.Fatalf("page after the parts of message 1 = %+v", skip)
	}
}

// --- run record -------------------------------------------------------------------

func TestRecordAppendReplayAndRetry(t *testing.T) {
	f := newFixture(t)
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
	batch := []RunEvent{
		userMsg(t, 1, 10, "t1", "m1", "hi"),
		mustEvent(t, 2, 11, "run_started", map[string]any{"model": "m"}),
		toolStart(t, 3, 12, "t1", "u1", "Bash"),
		toolEnd(t, 4, 13, "t1", "u1", false, "done"),
		textEvent(t, EventTextComplete, 5, 14, "t1", "m2", "answer"),
		mustEvent(t, 6, 15, "run_completed", json.RawMessage(`{}`)),
	}
	f.append("s1", "r1", batch...)
	if got := f.replay("r1"); !reflect.DeepEqual(got, batch) {
		t.Fatalf("replay = %+v\nwant %+v", got, batch)
	}
	page, err := f.svc.ReadRunEvents(testCtx(t), "r1", 2, 3)
	if err != nil || len(page) != 3 || page[0].Seq != 3 || page[2].Seq != 5 {
		t.Fatalf("ReadRunEvents(after 2, limit 3) = %+v, %v", page, err)
	}
	if evs, err := f.svc.ReadRunEvents(testCtx(t), "other", 0, 10); err != nil || len(evs) != 0 {
		t.Fatalf("replay of an unknown run = %+v, %v", evs, err)
	}
	before := f.transcript("s1", 64)
	if len(before) != 3 {
		t.Fatalf("transcript = %+v", before)
	}

	// A retried batch (after commit_outcome_unknown) is a no-op.
	f.append("s1", "r1", batch...)
	if got := f.replay("r1"); !reflect.DeepEqual(got, batch) {
		t.Fatalf("replay after retry = %+v", got)
	}
	if after := f.transcript("s1", 64); !reflect.DeepEqual(after, before) {
		t.Fatalf("retry changed the transcript: %+v", after)
	}

	// A different event under a used seq fails the whole batch.
	conflict := []RunEvent{
		userMsg(t, 7, 20, "t2", "m3", "new"),
		userMsg(t, 2, 20, "t2", "m4", "clash"),
	}
	if err := f.svc.AppendRunEvents(testCtx(t), "s1", "r1", conflict); !errors.Is(err, ErrSeqConflict) {
		t.Fatalf("conflicting append = %v, want ErrSeqConflict", err)
	}
	if got := f.replay("r1"); len(got) != len(batch) {
		t.Fatalf("a failed batch left %d events", len(got)-len(batch))
	}
	if after := f.transcript("s1", 64); !reflect.DeepEqual(after, before) {
		t.Fatal("a failed batch changed the transcript")
	}
}

func TestRecordCollapsesDeltas(t *testing.T) {
	f := newFixture(t)
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
	d := func(typ string, seq int64, id, text string) RunEvent {
		return textEvent(t, typ, seq, 50+seq, "t1", id, text)
	}
	f.append("s1", "r1",
		userMsg(t, 1, 50, "t1", "u", "question"),
		d(EventThinkingDelta, 2, "k", "Let me "),
		d(EventThinkingDelta, 3, "k", "think"),
		d(EventTextDelta, 4, "a", "Hel"),
		d(EventTextDelta, 5, "a", "lo"),
	)
	second := []RunEvent{d(EventTextDelta, 6, "a", ","), d(EventTextDelta, 7, "a", " world")}
	f.append("s1", "r1", second...)
	f.append("s1", "r1", second...) // a retry applies nothing twice

	texts := func() map[string]string {
		out := map[string]string{}
		for _, m := range f.transcript("s1", 64) {
			out[m.MessageID+"/"+string(m.Role)] += m.Text
		}
		return out
	}
	want := map[string]string{"u/user": "question", "k/thinking": "Let me think", "a/assistant": "Hello, world"}
	if got := texts(); !reflect.DeepEqual(got, want) {
		t.Fatalf("streaming transcript = %v, want %v", got, want)
	}
	if n := f.eventRows(`type LIKE '%delta'`); n != 0 {
		t.Fatalf("%d delta rows stored", n)
	}

	// The completions record the final texts (which win over the deltas);
	// later deltas are ignored.
	f.append("s1", "r1",
		d(EventThinkingComplete, 8, "k", "Let me think."),
		d(EventTextComplete, 9, "a", "Hello, world!"),
		d(EventTextDelta, 10, "a", " (late)"),
	)
	want = map[string]string{"u/user": "question", "k/thinking": "Let me think.", "a/assistant": "Hello, world!"}
	if got := texts(); !reflect.DeepEqual(got, want) {
		t.Fatalf("final transcript = %v, want %v", got, want)
	}
	var types []string
	for _, ev := range f.replay("r1") {
		types = append(types, ev.Type)
	}
	if !slices.Equal(types, []string{EventUserMessage, EventThinkingComplete, EventTextComplete}) {
		t.Fatalf("record = %v: one row per message, no deltas", types)
	}
	// Order of first appearance is kept: user, thinking, assistant.
	var order []string
	for _, m := range f.transcript("s1", 64) {
		order = append(order, m.MessageID)
	}
	if !slices.Equal(order, []string{"u", "k", "a"}) {
		t.Fatalf("transcript order = %v", order)
	}
	// An empty final text removes the message from the transcript.
	f.append("s1", "r1", d(EventTextDelta, 11, "b", "partial"), d(EventTextComplete, 12, "b", ""))
	if _, ok := texts()["b/assistant"]; ok {
		t.Fatal("an empty final text left a transcript entry")
	}
}

func TestRecordUserMessageTouchesSession(t *testing.T) {
	f := newFixture(t)
	f.createN(2, func(i int) string { return fmt.Sprintf("s%d", i) }, func(int) int64 { return 10 })
	f.takeChanges()
	if got := ids(f.walk(true)); !slices.Equal(got, []string{"s1", "s0"}) {
		t.Fatalf("catalog = %v", got)
	}
	rev := f.listStart(true).Revision
	at := f.clock.Load() + 500
	f.append("s0", "r1", userMsg(t, 1, at, "t1", "m1", "hi"))
	if got := ids(f.walk(true)); !slices.Equal(got, []string{"s0", "s1"}) {
		t.Fatalf("catalog after a message in s0 = %v, want s0 first", got)
	}
	if r := f.listStart(true).Revision; r != rev+1 {
		t.Fatalf("revision = %d, want %d", r, rev+1)
	}
	if ch := f.takeChanges(); len(ch) != 1 || ch[0].sessionID != "s0" || ch[0].lastUsedAt != at {
		t.Fatalf("OnChange = %+v", ch)
	}
	// An older message, or one that is not the user's, changes nothing.
	f.append("s0", "r1", userMsg(t, 2, at-100, "t1", "m2", "late"), textEvent(t, EventTextComplete, 3, at+100, "t1", "m3", "x"))
	if r := f.listStart(true).Revision; r != rev+1 {
		t.Fatalf("revision = %d after messages that do not move lastUsedAt", r)
	}
	if ch := f.takeChanges(); len(ch) != 0 {
		t.Fatalf("OnChange = %+v", ch)
	}
}

func TestRecordRejectsInvalidEvents(t *testing.T) {
	f := newFixture(t)
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
	good := userMsg(t, 1, 1, "t1", "m1", "hi")
	cases := map[string]struct {
		session, run string
		ev           RunEvent
		want         error
	}{
		"unknown session": {"nope", "r1", good, ErrSessionNotFound},
		"bad session id":  {"s 1", "r1", good, ErrInvalidRunEvent},
		"bad run id":      {"s1", "", good, ErrInvalidRunEvent},
		"seq 0":           {"s1", "r1", RunEvent{Seq: 0, Type: "x", Payload: json.RawMessage(`{}`)}, ErrInvalidRunEvent},
		"negative ts":     {"s1", "r1", RunEvent{Seq: 1, TS: -1, Type: "x", Payload: json.RawMessage(`{}`)}, ErrInvalidRunEvent},
		"no type":         {"s1", "r1", RunEvent{Seq: 1, Payload: json.RawMessage(`{}`)}, ErrInvalidRunEvent},
		"bad json":        {"s1", "r1", RunEvent{Seq: 1, Type: "x", Payload: json.RawMessage(`{`)}, ErrInvalidRunEvent},
		"no message id":   {"s1", "r1", mustEvent(t, 1, 1, EventTextComplete, MessagePayload{TurnID: "t1", Text: "x"}), ErrInvalidRunEvent},
		"payload type":    {"s1", "r1", RunEvent{Seq: 1, Type: EventUserMessage, Payload: json.RawMessage(`[1]`)}, ErrInvalidRunEvent},
		"no tool use id":  {"s1", "r1", toolStart(t, 1, 1, "t1", "", "Bash"), ErrInvalidRunEvent},
		"long tool id":    {"s1", "r1", toolEnd(t, 1, 1, "t1", strings.Repeat("u", 129), false, ""), ErrInvalidRunEvent},
	}
	for name, c := range cases {
		err := f.svc.AppendRunEvents(testCtx(t), c.session, c.run, []RunEvent{good, c.ev})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: AppendRunEvents = %v, want %v", name, err, c.want)
		}
	}
	if n := f.eventRows("1"); n != 0 {
		t.Fatalf("rejected batches stored %d events", n)
	}
}

func TestRecordToolNameAndOutputShortened(t *testing.T) {
	f := newFixture(t)
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
	name := strings.Repeat("é", 200) // 400 bytes
	output := strings.Repeat("ü", 5000) + "\xff"
	f.append("s1", "r1", toolStart(t, 1, 1, "t1", "u1", name), toolEnd(t, 2, 2, "t1", "u1", false, output))
	// A finish without a recorded start still yields an entry.
	f.append("s1", "r1", toolEnd(t, 3, 3, "t1", "u2", false, "ok"))
	got := f.transcript("s1", 64)
	if len(got) != 2 {
		t.Fatalf("transcript = %+v", got)
	}
	m := got[0]
	if len(m.ToolName) != 256 || !strings.HasPrefix(name, m.ToolName) {
		t.Fatalf("tool name of %d bytes", len(m.ToolName))
	}
	if len(m.Output) != protocol.TranscriptToolOutputMaxBytes || !strings.HasPrefix(output, m.Output) || !m.Truncated {
		t.Fatalf("output preview of %d bytes, truncated %v", len(m.Output), m.Truncated)
	}
	if got[1].ToolUseID != "u2" || got[1].Status != protocol.TranscriptToolCompleted || got[1].Output != "ok" || got[1].ToolName == "" {
		t.Fatalf("finish without start = %+v", got[1])
	}
}

func TestRecordConcurrentRuns(t *testing.T) {
	f := newFixture(t)
	const sessions, runs, perRun = 2, 8, 12
	for i := range sessions {
		f.create(protocol.SessionCreateInput{SessionID: fmt.Sprintf("s%d", i), Workspace: ws("/w")})
	}
	var wg sync.WaitGroup
	errs := make(chan error, sessions*runs*perRun)
	for r := range runs {
		wg.Go(func() {
			sid, rid := fmt.Sprintf("s%d", r%sessions), fmt.Sprintf("r%d", r)
			for i := range perRun {
				ev, err := NewRunEvent(int64(i+1), int64(i), EventTextComplete, MessagePayload{TurnID: "t", MessageID: fmt.Sprintf("%s-m%d", rid, i), Text: "x"})
				if err == nil {
					err = f.svc.AppendRunEvents(testCtx(t), sid, rid, []RunEvent{ev})
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range sessions {
		sid := fmt.Sprintf("s%d", i)
		got := f.transcript(sid, 64)
		if len(got) != runs/sessions*perRun {
			t.Fatalf("%s has %d entries", sid, len(got))
		}
		// Each run's messages keep their order within the session.
		last := map[string]int{}
		for _, m := range got {
			var run string
			var n int
			if _, err := fmt.Sscanf(strings.Replace(m.MessageID, "-m", " ", 1), "%s %d", &run, &n); err != nil {
				t.Fatal(err)
			}
			if prev, ok := last[run]; ok && n != prev+1 {
				t.Fatalf("%s: message %d of %s after %d", sid, n, run, prev)
			}
			last[run] = n
		}
	}
	var seqs []int64
	if err := f.st.Read(testCtx(t), func(q store.Querier) error {
		rows, err := q.Query(`SELECT seq FROM messages WHERE session_id = 's0' ORDER BY seq`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s int64
			if err := rows.Scan(&s); err != nil {
				return err
			}
			seqs = append(seqs, s)
		}
		return rows.Err()
	}); err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("transcript seqs = %v, want 1..n", seqs)
		}
	}
}

func TestRecordCommitFault(t *testing.T) {
	f := newFixture(t)
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
	installCommitFault(t, f.st, "messages")
	err := f.svc.AppendRunEvents(testCtx(t), "s1", "r1", []RunEvent{userMsg(t, 1, 1, "t1", "m1", "hi")})
	if !errors.Is(err, store.ErrCommitOutcomeUnknown) {
		t.Fatalf("AppendRunEvents with a failing commit = %v", err)
	}
}

func TestSetSessionStatus(t *testing.T) {
	f := newFixture(t)
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
	rev := f.listStart(true).Revision
	set := func(id string, st protocol.SessionStatus) (bool, error) {
		var changed bool
		err := f.st.Write(testCtx(t), func(tx *store.Tx) error {
			var err error
			changed, err = SetSessionStatus(tx, id, st)
			return err
		})
		return changed, err
	}
	if changed, err := set("s1", protocol.SessionRunning); !changed || err != nil {
		t.Fatalf("set running = %v, %v", changed, err)
	}
	if changed, err := set("s1", protocol.SessionRunning); changed || err != nil {
		t.Fatalf("set running again = %v, %v", changed, err)
	}
	if _, err := set("nope", protocol.SessionRunning); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("set on a missing session = %v", err)
	}
	if _, err := set("s1", "sleeping"); err == nil {
		t.Fatal("unknown status accepted")
	}
	p, _, err := f.readProjection(testCtx(t), "s1")
	if err != nil || p.Session.Status != protocol.SessionRunning {
		t.Fatalf("projection status = %q, %v", p.Session.Status, err)
	}
	if r := f.listStart(true).Revision; r != rev+1 {
		t.Fatalf("revision = %d, want %d", r, rev+1)
	}
}

// TestTranscriptPageExactByteBound walks the size of a text across the
// point where it stops fitting a page, byte by byte (see sweepStep).
func TestTranscriptPageExactByteBound(t *testing.T) {
	f := newFixture(t)
	sessionID := func(n int, tail bool) string {
		return fmt.Sprintf("s%05d-%v", n, map[bool]int{false: 0, true: 1}[tail])
	}
	// Calibrate: the room two full parts leave for the third entry's text.
	entry := func(id, text string) protocol.TranscriptMessage {
		return protocol.TranscriptMessage{MessageID: id, TurnID: "t1", Role: protocol.TranscriptRoleAssistant, CreatedAt: 1, Part: 1, Text: text}
	}
	used, _ := protocol.EncodedSize(protocol.SessionTranscriptPage{SessionID: sessionID(0, false), Messages: []protocol.TranscriptMessage{
		entry("a", strings.Repeat("a", 16384)), entry("b", strings.Repeat("b", 16384)), entry("c", ""),
	}})
	room := protocol.SessionTranscriptPageMaxBytes - used
	lo, hi := room-40, min(room+5, protocol.TranscriptTextMaxBytes)
	err := f.st.Write(testCtx(t), func(tx *store.Tx) error {
		for n := lo; n <= hi; n += sweepStep() {
			for _, tail := range []bool{false, true} {
				sid := sessionID(n, tail)
				if _, err := tx.Exec(`INSERT INTO sessions (session_id, created_at, last_used_at, status, document) VALUES (?, 1, 1, 'active', '{"workspace":{"kind":"host_path","path":"/w"},"modelTarget":{"kind":"default"},"permissionMode":"ask"}')`, sid); err != nil {
					return err
				}
				evs := []RunEvent{
					textEvent(t, EventTextComplete, 1, 1, "t1", "a", strings.Repeat("a", 16384)),
					textEvent(t, EventTextComplete, 2, 1, "t1", "b", strings.Repeat("b", 16384)),
					textEvent(t, EventTextComplete, 3, 1, "t1", "c", strings.Repeat("c", n)),
				}
				if tail {
					evs = append(evs, textEvent(t, EventTextComplete, 4, 1, "t1", "d", "d"))
				}
				if _, err := AppendRunEventsTx(tx, sid, "r"+sid, evs); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sawBoth := map[int]bool{}
	for n := lo; n <= hi; n += sweepStep() {
		for _, tail := range []bool{false, true} {
			sid := sessionID(n, tail)
			page := expectOK[protocol.SessionTranscriptPage](t, f.transcriptPage(sid, "", 64))
			k := len(page.Messages)
			sawBoth[k] = true
			total := 3
			if tail {
				total = 4
			}
			if k == total {
				continue
			}
			if page.NextCursor == nil {
				t.Fatalf("%s: %d of %d entries and no cursor", sid, k, total)
			}
			// The next entry would not have fit.
			next := expectOK[protocol.SessionTranscriptPage](t, f.transcriptPage(sid, *page.NextCursor, 1))
			bigger := page
			bigger.Messages = append(slices.Clone(page.Messages), next.Messages[0])
			bigger.NextCursor = next.NextCursor
			if size, _ := protocol.EncodedSize(bigger); size <= protocol.SessionTranscriptPageMaxBytes {
				t.Fatalf("%s: %d entries returned but %d fit (%d bytes)", sid, k, k+1, size)
			}
		}
	}
	if !sawBoth[2] || !sawBoth[3] {
		t.Fatalf("the sizes did not cross the bound: page sizes seen %v", sawBoth)
	}
}
