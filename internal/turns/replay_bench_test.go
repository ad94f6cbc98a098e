package turns

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/tasks"
)

// longSession writes a session of turns turns, each as the recorder
// writes it: the user message, 40 text deltas, the step's text, a tool
// call with a 2 KiB result, 40 more deltas and the final text. It returns
// the admission of the next turn.
func longSession(tb testing.TB, st *store.Store, turns int) admission {
	tb.Helper()
	payload := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			tb.Fatal(err)
		}
		return string(b)
	}
	output := strings.Repeat("line of tool output\n", 100)
	err := st.Write(context.Background(), func(tx *store.Tx) error {
		for i := range turns {
			turnID, runID := fmt.Sprintf("t%d", i), fmt.Sprintf("r%d", i)
			if _, err := tx.Exec(`INSERT INTO turn_admissions (session_id, turn_id, chain_seq, run_id, kind, content, sources, admitted_at)
				VALUES ('s', ?, ?, ?, 'external_message', '{}', '[]', 0)`, turnID, i+1, runID); err != nil {
				return err
			}
			seq := 0
			add := func(typ string, p any) error {
				seq++
				_, err := tx.Exec(`INSERT INTO run_events (session_id, run_id, seq, ts, type, payload) VALUES ('s', ?, ?, 0, ?, ?)`,
					runID, seq, typ, payload(p))
				return err
			}
			msg := func(typ, id, text string) error {
				return add(typ, sessions.MessagePayload{TurnID: turnID, MessageID: id, Text: text})
			}
			if err := msg(sessions.EventUserMessage, "u"+turnID, "please look at file number "+turnID); err != nil {
				return err
			}
			for step, id := range []string{"a" + turnID, "b" + turnID} {
				for range 40 {
					if err := msg(sessions.EventTextDelta, id, "some words "); err != nil {
						return err
					}
				}
				if err := msg(sessions.EventTextComplete, id, strings.Repeat("some words ", 40)); err != nil {
					return err
				}
				if step == 1 {
					break
				}
				call := "c" + turnID
				if err := add(sessions.EventToolCallStarted, sessions.ToolCallStartedPayload{TurnID: turnID, ToolUseID: call, ToolName: "Read", StepID: id,
					Args: json.RawMessage(`{"path":"f.go"}`)}); err != nil {
					return err
				}
				if err := add(sessions.EventToolCallFinished, sessions.ToolCallFinishedPayload{TurnID: turnID, ToolUseID: call, ToolName: "Read", Output: output}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return admission{SessionID: "s", TurnID: "next", ChainSeq: int64(turns + 1)}
}

// BenchmarkReplay measures the history replay at the start of a turn in a
// session with a long record: cold (the first turn this host runs in the
// session: the whole record is read) and warm (the session's history is
// kept: only what came since is read).
func BenchmarkReplay(b *testing.B) {
	for _, turns := range []int{50, 500} {
		st, err := store.Open(context.Background(), filepath.Join(b.TempDir(), "maka.db"),
			store.Options{Migrations: []store.Migration{sessions.Migration, tasks.Migration, Migration,
				{Version: Migration.Version + 1, Up: CompactionMigration.Up}}})
		if err != nil {
			b.Fatal(err)
		}
		next := longSession(b, st, turns)
		for _, warm := range []bool{false, true} {
			name := fmt.Sprintf("turns=%d/cold", turns)
			if warm {
				name = fmt.Sprintf("turns=%d/warm", turns)
			}
			b.Run(name, func(b *testing.B) {
				c := &Owner{opts: Options{Store: st}}
				c.histories.max = DefaultHistoryCacheBytes
				replay := func() {
					msgs, err := c.replay(context.Background(), next)
					if err != nil || len(msgs) != 4*turns {
						b.Fatalf("replay: %d messages, %v", len(msgs), err)
					}
				}
				if warm {
					replay()
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if !warm {
						c.histories.take(next.SessionID)
					}
					replay()
				}
			})
		}
		if err := st.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
