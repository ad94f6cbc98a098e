package messages

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// Migration is schema version 6 of the store: the receipts of message
// operations. A receipt records, per host epoch, the payload and the
// outcome of one submit, retract or interrupt, so that a retry in the same
// epoch gets the same answer; receipts of other epochs are deleted when an
// epoch begins (Receipts.BeginHostEpoch).
var Migration = store.Migration{Version: 6, Up: migrate}

func migrate(tx *sql.Tx) error {
	_, err := tx.Exec(`CREATE TABLE message_receipts (
		host_epoch   TEXT NOT NULL,
		operation    TEXT NOT NULL,
		session_id   TEXT NOT NULL,
		operation_id TEXT NOT NULL,
		payload      TEXT NOT NULL,
		result       TEXT NOT NULL,
		PRIMARY KEY (host_epoch, operation, session_id, operation_id)
	)`)
	return err
}

// Receipt operations.
const (
	opSubmit    = "submit"
	opRetract   = "retract"
	opInterrupt = "interrupt"
)

// receipt is one stored outcome: payload is the canonical request,
// result the encoded outcome.
type receipt struct {
	payload, result string
}

// storedOutcome is the encoding of a receipt's result.
type storedOutcome struct {
	OK     bool              `json:"ok"`
	Result json.RawMessage   `json:"result,omitempty"`
	Error  *protocol.OpError `json:"error,omitempty"`
}

// encodeOutcome encodes out (a finalized result or a declared error) for
// a receipt.
func encodeOutcome(out host.Outcome) (string, error) {
	s := storedOutcome{OK: out.Err == nil, Error: out.Err}
	if out.Err == nil {
		b, err := protocol.Marshal(out.Result)
		if err != nil {
			return "", err
		}
		s.Result = b
	}
	b, err := protocol.Marshal(s)
	return string(b), err
}

// decodeOutcome decodes a receipt's result through the operation's output
// codec.
func decodeOutcome(op protocol.Operation, raw string) (host.Outcome, error) {
	var s storedOutcome
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return host.Outcome{}, fmt.Errorf("messages: receipt of %s: %w", op, err)
	}
	if !s.OK {
		if s.Error == nil {
			return host.Outcome{}, fmt.Errorf("messages: receipt of %s has neither result nor error", op)
		}
		return host.Fail(s.Error.Code, s.Error.Message), nil
	}
	r, err := decodeResult(op, s.Result)
	if err != nil {
		return host.Outcome{}, err
	}
	return host.OK(r), nil
}

// decodeResult decodes an encoded result with op's output codec.
func decodeResult(op protocol.Operation, raw []byte) (any, error) {
	spec, ok := protocol.Lookup(string(op))
	if !ok {
		return nil, fmt.Errorf("messages: no operation %s", op)
	}
	v, err := protocol.Parse(raw)
	if err != nil {
		return nil, err
	}
	return spec.DecodeOutput(v)
}

// finalize passes result through op's output codec, so that a first
// answer and its replays are the same value.
func finalize(op protocol.Operation, result any) (any, error) {
	b, err := protocol.Marshal(result)
	if err != nil {
		return nil, err
	}
	return decodeResult(op, b)
}

// readReceipt reads this epoch's receipt of (op, sessionID, id).
func (c *Receipts) readReceipt(ctx context.Context, op, sessionID, id string) (receipt, bool, error) {
	var r receipt
	err := c.opts.Store.Read(ctx, func(q store.Querier) error {
		return q.QueryRow(`SELECT payload, result FROM message_receipts
			WHERE host_epoch = ? AND operation = ? AND session_id = ? AND operation_id = ?`,
			c.opts.HostEpoch, op, sessionID, id).Scan(&r.payload, &r.result)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// errReceiptMismatch reports a receipt store that did not echo what was
// committed.
var errReceiptMismatch = errors.New("messages: stored receipt differs from the committed one")

// writeReceipt durably stores this epoch's receipt of (op, sessionID, id)
// and checks that the store holds exactly it.
func (c *Receipts) writeReceipt(ctx context.Context, op, sessionID, id string, r receipt) error {
	return c.opts.Store.Write(context.WithoutCancel(ctx), func(tx *store.Tx) error {
		if _, err := tx.Exec(`INSERT INTO message_receipts (host_epoch, operation, session_id, operation_id, payload, result)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			c.opts.HostEpoch, op, sessionID, id, r.payload, r.result); err != nil {
			return err
		}
		var got receipt
		if err := tx.QueryRow(`SELECT payload, result FROM message_receipts
			WHERE host_epoch = ? AND operation = ? AND session_id = ? AND operation_id = ?`,
			c.opts.HostEpoch, op, sessionID, id).Scan(&got.payload, &got.result); err != nil {
			return err
		}
		if got != r {
			return fmt.Errorf("%w: %s %s of session %s", errReceiptMismatch, op, id, sessionID)
		}
		return nil
	})
}

// receiptOutcome writes the receipt of out; a failure fails the authority
// stop (the effect is applied, its proof is not) and the call errors.
func (c *Receipts) receiptOutcome(ctx context.Context, op, sessionID, id, payload string, out host.Outcome) host.Outcome {
	result, err := encodeOutcome(out)
	if err == nil {
		err = c.writeReceipt(ctx, op, sessionID, id, receipt{payload: payload, result: result})
	}
	if err != nil {
		c.failStop("receipt write failed", err)
		return internalFailure()
	}
	return out
}

// replay answers a stored receipt when payload matches it, else the
// operation's identity conflict.
func (c *Receipts) replay(op protocol.Operation, r receipt, payload, conflict string) host.Outcome {
	if r.payload != payload {
		return host.Fail(protocol.ErrOperationConflict, conflict)
	}
	out, err := decodeOutcome(op, r.result)
	if err != nil {
		c.log.Error("receipt unreadable", "op", op, "err", err)
		return internalFailure()
	}
	return out
}

func internalFailure() host.Outcome {
	return host.Fail(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
}

func authorityFailed() host.Outcome {
	return host.Fail(protocol.ErrHostDraining, MessageAuthorityFailed)
}

// canonical encodes a request payload for identity comparisons.
func canonical(v any) string {
	b, err := protocol.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// flightKey names one same-epoch request in progress.
type flightKey struct{ op, sessionID, id string }

// flight is a request in progress whose outcome identical concurrent
// requests share.
type flight struct {
	payload string
	done    chan struct{}
	out     host.Outcome
}

// joinFlight registers a request: the first one leads (and must land the
// flight); an identical one follows; a different payload conflicts.
func (c *Receipts) joinFlight(key flightKey, payload string) (f *flight, leader, conflict bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.flights[key]; f != nil {
		return f, false, f.payload != payload
	}
	f = &flight{payload: payload, done: make(chan struct{})}
	c.flights[key] = f
	return f, true, false
}

// land publishes the leader's outcome to its followers.
func (c *Receipts) land(key flightKey, f *flight, out host.Outcome) {
	c.mu.Lock()
	delete(c.flights, key)
	c.mu.Unlock()
	f.out = out
	close(f.done)
}

// follow waits for a flight's outcome.
func follow(ctx context.Context, f *flight) host.Outcome {
	select {
	case <-f.done:
		return f.out
	case <-ctx.Done():
		return internalFailure()
	}
}

// shared runs do for (op, sessionID, id) unless an identical request of
// this epoch is in progress, whose outcome is then shared; a different
// payload in progress is the operation's identity conflict.
func (c *Receipts) shared(ctx context.Context, key flightKey, payload, conflict string, do func() host.Outcome) host.Outcome {
	f, leader, clash := c.joinFlight(key, payload)
	switch {
	case clash:
		return host.Fail(protocol.ErrOperationConflict, conflict)
	case !leader:
		return follow(ctx, f)
	}
	out := internalFailure()
	defer func() { c.land(key, f, out) }()
	out = do()
	return out
}
