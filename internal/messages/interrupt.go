package messages

import (
	"context"
	"errors"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/turns"
	"github.com/maka-agent/maka/protocol"
)

// interruptPayload is the identity of an interrupt.
type interruptPayload struct {
	SessionID   string `json:"sessionId"`
	InterruptID string `json:"interruptId"`
	TurnID      string `json:"turnId"`
	RunID       string `json:"runId"`
}

// handleInterrupt serves turn.interrupt: in one lane
// step the queued messages are retracted by the stop fence, the run's
// pending interactions are closed and the stop is delivered; the answer,
// after the terminal transition, is the fence's result with the terminal
// snapshot. An interrupt of a turn that is not the active root is a
// receipted operation_conflict.
func (c *Receipts) handleInterrupt(ctx context.Context, call *host.Call) host.Outcome {
	in := call.Input.(protocol.TurnInterruptInput)
	switch {
	case in.OriginHostEpoch != c.opts.HostEpoch:
		return host.Fail(protocol.ErrOutcomeUnknown, InterruptOutcomeUnknown)
	case c.Failed():
		return authorityFailed()
	}
	payload := canonical(interruptPayload{in.SessionID, in.InterruptID, in.TurnID, in.RunID})
	key := flightKey{opInterrupt, in.SessionID, in.InterruptID}
	return c.shared(ctx, key, payload, InterruptIdentityConflict, func() host.Outcome {
		out, err := c.interrupt(ctx, in, payload)
		if err != nil {
			return c.opFailure("turn interrupt", in.SessionID, in.InterruptID, err)
		}
		return out
	})
}

func (c *Receipts) interrupt(ctx context.Context, in protocol.TurnInterruptInput, payload string) (host.Outcome, error) {
	r, found, err := c.readReceipt(ctx, opInterrupt, in.SessionID, in.InterruptID)
	switch {
	case err != nil:
		return host.Outcome{}, err
	case c.Failed():
		return authorityFailed(), nil
	case found:
		return c.replay(protocol.OpTurnInterrupt, r, payload, InterruptIdentityConflict), nil
	}
	var (
		claim *turns.Interruption
		out   *host.Outcome
	)
	err = c.opts.Gate.Run(ctx, in.SessionID, func(ctx context.Context, _ *lane.Lease) error {
		o, cl, err := c.claimInLane(ctx, in, payload)
		out, claim = o, cl
		return err
	})
	switch {
	case err != nil:
		return host.Outcome{}, err
	case out != nil:
		return *out, nil
	}
	snap, err := claim.Wait(ctx)
	if err != nil {
		if ctx.Err() == nil {
			// The fence is committed and the stop delivered, but the
			// turn's end cannot be answered.
			c.failStop("interrupted turn did not end", err)
		}
		return host.Outcome{}, err
	}
	result, err := finalize(protocol.OpTurnInterrupt, protocol.TurnInterruptResult{
		QueueRevision: claim.Fence.QueueRevision, Retracted: claim.Fence.Retracted, Turn: snap,
	})
	if err != nil {
		c.failStop("interrupt result unencodable", err)
		return host.Outcome{}, err
	}
	return c.receiptOutcome(ctx, opInterrupt, in.SessionID, in.InterruptID, payload, host.OK(result)), nil
}

// claimInLane is the lane step of an interrupt: a receipt written
// meanwhile, the session checks, then the claim of the active root's stop
// (or the receipted mismatch).
func (c *Receipts) claimInLane(ctx context.Context, in protocol.TurnInterruptInput, payload string) (*host.Outcome, *turns.Interruption, error) {
	if c.Failed() {
		return ptr(authorityFailed()), nil, nil
	}
	r, found, err := c.readReceipt(ctx, opInterrupt, in.SessionID, in.InterruptID)
	switch {
	case err != nil:
		return nil, nil, err
	case found:
		return ptr(c.replay(protocol.OpTurnInterrupt, r, payload, InterruptIdentityConflict)), nil, nil
	}
	var sum protocol.SessionSummary
	err = c.opts.Store.Read(ctx, func(q store.Querier) error {
		var err error
		sum, err = sessions.LoadSummary(q, in.SessionID)
		return err
	})
	switch {
	case errors.Is(err, sessions.ErrSessionNotFound):
		return ptr(host.Fail(protocol.ErrNotFound, MessageSessionNotFound)), nil, nil
	case err != nil:
		return nil, nil, err
	case c.Failed():
		return ptr(authorityFailed()), nil, nil
	case sum.IsArchived || sum.Status == protocol.SessionArchived:
		return ptr(host.Fail(protocol.ErrSessionArchived, MessageSessionArchived)), nil, nil
	}
	claim, err := c.opts.Sessions.ClaimInterrupt(ctx, in.SessionID, in.TurnID, in.RunID)
	switch {
	case err != nil:
		c.failStop("interrupt stop could not be claimed", err)
		return nil, nil, err
	case claim == nil:
		o := c.receiptOutcome(ctx, opInterrupt, in.SessionID, in.InterruptID, payload,
			host.Fail(protocol.ErrOperationConflict, InterruptMismatch))
		return &o, nil, nil
	}
	return nil, claim, nil
}

func ptr[T any](v T) *T { return &v }
