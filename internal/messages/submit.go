package messages

import (
	"context"
	"errors"
	"github.com/maka-agent/maka/internal/failpoint"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/turns"
	"github.com/maka-agent/maka/protocol"
)

// submitPayload is the identity of a submitted message: its session,
// id, normalized content and placement.
type submitPayload struct {
	SessionID string                    `json:"sessionId"`
	MessageID string                    `json:"messageId"`
	Content   protocol.MessageContent   `json:"content"`
	Placement protocol.MessagePlacement `json:"placement"`
}

// handleSubmit serves turn.message.submit. The first
// matching rung answers: an identical request in progress in this epoch;
// fail-stop; this epoch's receipt; the message's durable trace in any
// epoch (the admission that names it, or its steering record); an older
// epoch without trace (outcome_unknown); drain; the session's existence
// and archival; then an idle session starts a turn from the message and an
// active one queues it.
func (c *Receipts) handleSubmit(ctx context.Context, call *host.Call) host.Outcome {
	in := call.Input.(protocol.TurnMessageSubmitInput)
	payload := canonical(submitPayload{in.SessionID, in.MessageID, in.Content, in.Placement})
	if in.OriginHostEpoch != c.opts.HostEpoch {
		return c.submit(ctx, in, payload, false)
	}
	key := flightKey{opSubmit, in.SessionID, in.MessageID}
	return c.shared(ctx, key, payload, MessageIdentityConflict, func() host.Outcome {
		return c.submit(ctx, in, payload, true)
	})
}

func (c *Receipts) submit(ctx context.Context, in protocol.TurnMessageSubmitInput, payload string, sameEpoch bool) host.Outcome {
	if c.Failed() {
		return authorityFailed()
	}
	var out host.Outcome
	err := c.opts.Gate.Run(ctx, in.SessionID, func(ctx context.Context, _ *lane.Lease) error {
		var err error
		out, err = c.submitInLane(ctx, in, payload, sameEpoch)
		return err
	})
	if err != nil {
		return c.opFailure("message submit", in.SessionID, in.MessageID, err)
	}
	return out
}

func (c *Receipts) submitInLane(ctx context.Context, in protocol.TurnMessageSubmitInput, payload string, sameEpoch bool) (host.Outcome, error) {
	if c.Failed() {
		return authorityFailed(), nil
	}
	if sameEpoch {
		r, found, err := c.readReceipt(ctx, opSubmit, in.SessionID, in.MessageID)
		switch {
		case err != nil:
			return host.Outcome{}, err
		case c.Failed():
			return authorityFailed(), nil
		case found:
			return c.replay(protocol.OpTurnMessageSubmit, r, payload, MessageIdentityConflict), nil
		}
	}
	var proof turns.MessageProof
	var sum protocol.SessionSummary
	var missing bool
	err := c.opts.Store.Read(ctx, func(q store.Querier) error {
		var err error
		if proof, err = turns.FindMessageProof(q, in.SessionID, in.MessageID); err != nil {
			return err
		}
		sum, err = sessions.LoadSummary(q, in.SessionID)
		if errors.Is(err, sessions.ErrSessionNotFound) {
			missing, err = true, nil
		}
		return err
	})
	switch {
	case err != nil:
		return host.Outcome{}, err
	case c.Failed():
		return authorityFailed(), nil
	}
	if out, ok := provenOutcome(proof, in); ok {
		return out, nil
	}
	if !sameEpoch {
		return host.Fail(protocol.ErrOutcomeUnknown, MessageDispositionUnknown), nil
	}
	switch {
	case c.opts.Sessions.Draining():
		return host.Fail(protocol.ErrHostDraining, protocol.MessageHostDraining), nil
	case missing:
		return host.Fail(protocol.ErrNotFound, MessageSessionNotFound), nil
	case sum.IsArchived || sum.Status == protocol.SessionArchived:
		return host.Fail(protocol.ErrSessionArchived, MessageSessionArchived), nil
	}
	got, err := c.opts.Sessions.Submit(ctx, turns.MessageStart{
		SessionID: in.SessionID, MessageID: in.MessageID, Content: in.Content, Placement: in.Placement,
	})
	switch {
	case errors.Is(err, turns.ErrSessionBusy):
		return host.Fail(protocol.ErrSessionBusy, turns.MessageSessionBusy), nil
	case errors.Is(err, turns.ErrDraining):
		return host.Fail(protocol.ErrHostDraining, protocol.MessageHostDraining), nil
	case turns.ErrFailed(err):
		return authorityFailed(), nil
	case err != nil:
		return host.Outcome{}, err
	case got.Refusal != "":
		return host.Fail(protocol.ErrSessionBusy, got.Refusal), nil
	case got.Disposition == protocol.DispositionTurnStarted:
		// No receipt is written: the turn's admission proves it.
		return host.OK(protocol.TurnMessageSubmitResult{Disposition: protocol.DispositionTurnStarted, TurnID: got.TurnID}), nil
	}
	// The entry is visible (in the projection, to the run's next pull)
	// before its receipt is durable.
	result, err := finalize(protocol.OpTurnMessageSubmit, protocol.TurnMessageSubmitResult{Disposition: got.Disposition, QueueRevision: got.QueueRevision})
	if err != nil {
		c.failStop("submit result unencodable", err)
		return internalFailure(), nil
	}
	failpoint.Hit(failpoint.MessageAccepted)
	return c.receiptOutcome(ctx, opSubmit, in.SessionID, in.MessageID, payload, host.OK(result)), nil
}

// provenOutcome answers a message from its durable trace: the result of a
// message that started a turn, outcome_unknown for a message whose
// original queue revision cannot be proven, and operation_conflict when
// the trace holds another payload.
func provenOutcome(proof turns.MessageProof, in protocol.TurnMessageSubmitInput) (host.Outcome, bool) {
	switch {
	case proof.Source != nil:
		src := proof.Source
		if src.Placement != in.Placement || !turns.SameContent(src.Content, in.Content) {
			return host.Fail(protocol.ErrOperationConflict, MessageIdentityConflict), true
		}
		if src.Disposition == turns.SourceTurnStarted {
			return host.OK(protocol.TurnMessageSubmitResult{Disposition: protocol.DispositionTurnStarted, TurnID: proof.TurnID}), true
		}
		return host.Fail(protocol.ErrOutcomeUnknown, MessageDispositionUnknown), true
	case proof.Steering != nil:
		if in.Placement != protocol.PlacementCurrentTurn || !turns.SameContent(*proof.Steering, in.Content) {
			return host.Fail(protocol.ErrOperationConflict, MessageIdentityConflict), true
		}
		return host.Fail(protocol.ErrOutcomeUnknown, MessageDispositionUnknown), true
	}
	return host.Outcome{}, false
}
