package messages

import (
	"context"
	"errors"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// retractPayload is the identity of a retract.
type retractPayload struct {
	SessionID string `json:"sessionId"`
	RetractID string `json:"retractId"`
}

// handleRetract serves queue.retract: every queued
// message of the session (steering and follow-ups, not the ones in flight)
// is retracted. It is allowed while draining; a retract id never takes a
// place in the queue.
func (c *Receipts) handleRetract(ctx context.Context, call *host.Call) host.Outcome {
	in := call.Input.(protocol.QueueRetractInput)
	payload := canonical(retractPayload{in.SessionID, in.RetractID})
	sameEpoch := in.OriginHostEpoch == c.opts.HostEpoch
	do := func() host.Outcome {
		switch {
		case c.Failed():
			return authorityFailed()
		case !sameEpoch:
			return host.Fail(protocol.ErrOutcomeUnknown, RetractOutcomeUnknown)
		}
		var out host.Outcome
		err := c.opts.Gate.Run(ctx, in.SessionID, func(ctx context.Context, _ *lane.Lease) error {
			var err error
			out, err = c.retractInLane(ctx, in, payload)
			return err
		})
		if err != nil {
			return c.opFailure("queue retract", in.SessionID, in.RetractID, err)
		}
		return out
	}
	if !sameEpoch {
		return do()
	}
	return c.shared(ctx, flightKey{opRetract, in.SessionID, in.RetractID}, payload, RetractIdentityConflict, do)
}

func (c *Receipts) retractInLane(ctx context.Context, in protocol.QueueRetractInput, payload string) (host.Outcome, error) {
	if c.Failed() {
		return authorityFailed(), nil
	}
	r, found, err := c.readReceipt(ctx, opRetract, in.SessionID, in.RetractID)
	switch {
	case err != nil:
		return host.Outcome{}, err
	case c.Failed():
		return authorityFailed(), nil
	case found:
		return c.replay(protocol.OpQueueRetract, r, payload, RetractIdentityConflict), nil
	}
	var sum protocol.SessionSummary
	err = c.opts.Store.Read(ctx, func(q store.Querier) error {
		var err error
		sum, err = sessions.LoadSummary(q, in.SessionID)
		return err
	})
	switch {
	case errors.Is(err, sessions.ErrSessionNotFound):
		return host.Fail(protocol.ErrNotFound, MessageSessionNotFound), nil
	case err != nil:
		return host.Outcome{}, err
	case c.Failed():
		return authorityFailed(), nil
	case sum.IsArchived || sum.Status == protocol.SessionArchived:
		return host.Fail(protocol.ErrSessionArchived, MessageSessionArchived), nil
	}
	retracted, refused, err := c.opts.Sessions.Retract(in.SessionID)
	var result any
	if err == nil && !refused {
		result, err = finalize(protocol.OpQueueRetract, retracted)
	}
	switch {
	case err != nil:
		c.failStop("retract result unencodable", err)
		return internalFailure(), nil
	case refused:
		return host.Fail(protocol.ErrSessionBusy, RetractTooLarge), nil
	}
	return c.receiptOutcome(ctx, opRetract, in.SessionID, in.RetractID, payload, host.OK(result)), nil
}
