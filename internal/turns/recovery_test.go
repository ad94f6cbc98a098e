package turns_test

import (
	"testing"

	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// crashLeftovers writes what a host killed mid-turn leaves behind: in s1 a
// running run whose tool call started and never finished; in s2 a turn
// admitted whose run never started.
func (f *fixture) crashLeftovers() {
	f.t.Helper()
	err := f.st.Write(testCtx(f.t), func(tx *store.Tx) error {
		for _, q := range []string{
			`INSERT INTO turn_admissions (session_id, turn_id, chain_seq, run_id, user_message_id, previous_turn_id, kind, content, sources, admitted_at)
				VALUES ('s1', 'crashed', 1, 'run-crashed', 'user-crashed', NULL, 'external_message', '{"text":"run a tool"}', '[]', 1000)`,
			`INSERT INTO runs (run_id, session_id, turn_id, status, created_at, updated_at) VALUES ('run-crashed', 's1', 'crashed', 'running', 1000, 1000)`,
			`UPDATE sessions SET status = 'running' WHERE session_id = 's1'`,
			`INSERT INTO turn_admissions (session_id, turn_id, chain_seq, run_id, user_message_id, previous_turn_id, kind, content, sources, admitted_at)
				VALUES ('s2', 'pending', 1, 'run-pending', 'user-pending', NULL, 'external_message', '{"text":"start me"}', '[]', 1000)`,
		} {
			if _, err := tx.Exec(q); err != nil {
				return err
			}
		}
		evs := []struct {
			typ     string
			payload any
		}{
			{sessions.EventUserMessage, sessions.MessagePayload{TurnID: "crashed", MessageID: "user-crashed", Text: "run a tool"}},
			{sessions.EventTextComplete, sessions.MessagePayload{TurnID: "crashed", MessageID: "step-1", Text: "running it"}},
			{sessions.EventToolCallStarted, sessions.ToolCallStartedPayload{TurnID: "crashed", ToolUseID: "call-1", ToolName: "Bash", Args: []byte(`{"command":"sleep 100"}`), StepID: "step-1"}},
		}
		var batch []sessions.RunEvent
		for i, e := range evs {
			ev, err := sessions.NewRunEvent(int64(i+1), 1000, e.typ, e.payload)
			if err != nil {
				return err
			}
			batch = append(batch, ev)
		}
		_, err := sessions.AppendRunEventsTx(tx, "s1", "run-crashed", batch)
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

func TestRecoveryEndsOpenRunsAndStartsAdmittedTurns(t *testing.T) {
	f := newFixture(t)
	f.createSession("s1")
	f.createSession("s2")
	f.crashLeftovers()
	f.model.next = say("started after restart")
	f.restart()

	s, err := f.query("s1", "crashed")
	if err != nil || s.Status != protocol.TurnFailed || s.FailureClass != "app_restarted" || s.TerminalEventID == "" {
		t.Fatalf("crashed turn after recovery: %+v %v", s, err)
	}
	msgs := f.transcript("s1")
	if len(msgs) != 3 || msgs[2].Role != protocol.TranscriptRoleTool || msgs[2].Status != "unknown" {
		t.Fatalf("transcript keeps the interrupted call as unknown: %+v", msgs)
	}
	var status string
	if err := f.st.Read(testCtx(t), func(q store.Querier) error {
		return q.QueryRow(`SELECT status FROM sessions WHERE session_id = 's1'`).Scan(&status)
	}); err != nil || status != string(protocol.SessionActive) {
		t.Fatalf("session status after recovery: %q %v", status, err)
	}
	// The admitted turn was started by recovery and runs to completion.
	p := f.waitTerminal("s2", "pending")
	if p.Status != protocol.TurnCompleted {
		t.Fatalf("admitted turn after recovery: %+v", p)
	}
	// The next turn of s1 works, and its history drops the dangling call.
	f.model.next = say("fine")
	f.mustStart("s1", "next", "again")
	f.waitTerminal("s1", "next")
	reqs := f.model.seen()
	for _, m := range reqs[len(reqs)-1].Messages {
		if len(m.ToolCalls) > 0 || m.Role == "tool" {
			t.Fatalf("replay kept the interrupted call: %+v", m)
		}
	}
	// Recovery happens once: a second restart changes nothing.
	before := f.count(`SELECT COUNT(*) FROM run_events WHERE type = 'turn_terminal'`)
	f.restart()
	if after := f.count(`SELECT COUNT(*) FROM run_events WHERE type = 'turn_terminal'`); after != before {
		t.Fatalf("second recovery wrote %d terminal events", after-before)
	}
	if again, _ := f.query("s1", "crashed"); again != s {
		t.Fatalf("crashed turn changed on a second restart: %+v", again)
	}
}
