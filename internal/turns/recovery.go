package turns

import (
	"context"
	"fmt"
	"strings"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// Recovery of the runs a crash left open (docs/architecture.md, "The path
// of a turn"); it runs once, before the host is ready.
const (
	FailureAppRestarted = "app_restarted"
	// Recovery reasons recorded in the synthesized terminal event.
	reasonToolInterrupted = "tool_interrupted"
	reasonRunInterrupted  = "run_interrupted"
)

// Recover ends every run that has no terminal fact as failed /
// app_restarted with a synthesized terminal event (a tool call that was
// running keeps its unknown outcome and is never retried; replay drops
// it), sets its session active, and then starts the admitted turns that
// never started. A recovered turn's residency keeps the host up while it
// runs. The interactions a previous host left pending are closed first.
func (c *Owner) Recover(ctx context.Context) error {
	// Interactions a previous host left pending close first
	// (host_restarted), before any run binds.
	if err := c.inter.Recover(ctx); err != nil {
		return err
	}
	open, pending, err := c.recoveryListing(ctx)
	if err != nil {
		return fmt.Errorf("turns: recovery listing: %w", err)
	}
	for _, o := range open {
		if err := c.recoverRun(ctx, o); err != nil {
			return fmt.Errorf("turns: recover run %s: %w", o.a.RunID, err)
		}
	}
	seen := map[string]bool{}
	for _, a := range pending {
		if seen[a.SessionID] {
			return fmt.Errorf("turns: session %s has more than one admitted turn without a run", a.SessionID)
		}
		seen[a.SessionID] = true
	}
	for _, a := range pending {
		var ar *activeRoot
		err := c.opts.Gate.Run(ctx, a.SessionID, func(ctx context.Context, _ *lane.Lease) error {
			var err error
			ar, err = c.launch(ctx, a, nil, nil)
			return err
		})
		if err != nil {
			return fmt.Errorf("turns: start admitted turn %s: %w", a.TurnID, err)
		}
		select {
		case <-ar.started:
		case <-ctx.Done():
			return ctx.Err()
		}
		if ar.startErr != nil {
			return ar.startErr
		}
	}
	return nil
}

type openRun struct {
	a         admission
	lastEvent string
	seq       int64
}

func (c *Owner) recoveryListing(ctx context.Context) (open []openRun, pending []admission, err error) {
	err = c.opts.Store.Read(ctx, func(q store.Querier) error {
		rows, err := q.Query(`SELECT ` + prefixed("a.", admissionColumns) + `,
				COALESCE((SELECT type FROM run_events e WHERE e.run_id = r.run_id ORDER BY seq DESC LIMIT 1), ''),
				COALESCE((SELECT MAX(seq) FROM run_events e WHERE e.run_id = r.run_id), 0)
			FROM runs r JOIN turn_admissions a ON a.run_id = r.run_id
			WHERE r.terminal_event_id IS NULL ORDER BY a.session_id, a.chain_seq`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var o openRun
			if o.a, err = scanAdmission(func(dest ...any) error {
				return rows.Scan(append(dest, &o.lastEvent, &o.seq)...)
			}); err != nil {
				return err
			}
			open = append(open, o)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		rows, err = q.Query(`SELECT ` + prefixed("a.", admissionColumns) + ` FROM turn_admissions a
			LEFT JOIN runs r ON r.run_id = a.run_id WHERE r.run_id IS NULL ORDER BY a.session_id, a.chain_seq`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			a, err := scanAdmission(rows.Scan)
			if err != nil {
				return err
			}
			pending = append(pending, a)
		}
		return rows.Err()
	})
	return open, pending, err
}

// recoverRun commits the synthesized terminal fact of one open run.
func (c *Owner) recoverRun(ctx context.Context, o openRun) error {
	reason := reasonRunInterrupted
	var interrupted int
	err := c.opts.Store.Read(ctx, func(q store.Querier) error {
		// A call started and never finished was running at the crash.
		return q.QueryRow(`SELECT COUNT(*) FROM run_events s WHERE s.run_id = ? AND s.type = ?
			AND NOT EXISTS (SELECT 1 FROM run_events f WHERE f.run_id = s.run_id AND f.type = ?
				AND json_extract(f.payload, '$.toolUseId') = json_extract(s.payload, '$.toolUseId'))`,
			o.a.RunID, sessions.EventToolCallStarted, sessions.EventToolCallFinished).Scan(&interrupted)
	})
	if err != nil {
		return err
	}
	if interrupted > 0 {
		reason = reasonToolInterrupted
	}
	eventID := c.opts.NewID()
	now := c.now()
	out := agent.Outcome{Status: agent.StatusFailed, StopReason: agent.StopError, FailureClass: FailureAppRestarted,
		Message: "The host stopped while the turn was running (" + reason + ")"}
	ev, err := sessions.NewRunEvent(o.seq+1, now, EventTurnTerminal, terminalPayload{
		TurnID: o.a.TurnID, EventID: eventID, Status: out.Status, StopReason: out.StopReason,
		FailureClass: out.FailureClass, Message: out.Message, Recovered: true,
	})
	if err != nil {
		return err
	}
	err = c.opts.Store.Write(ctx, func(tx *store.Tx) error {
		return terminate(tx, o.a, []sessions.RunEvent{ev}, eventID, out, "", "", protocol.SessionActive)
	})
	if err == nil {
		c.log.Warn("run ended by recovery", "session", o.a.SessionID, "turn", o.a.TurnID, "run", o.a.RunID, "reason", reason)
	}
	return err
}

// prefixed qualifies every column of a comma-separated list.
func prefixed(p, cols string) string {
	return p + strings.ReplaceAll(cols, ", ", ", "+p)
}
