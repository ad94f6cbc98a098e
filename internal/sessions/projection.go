package sessions

import (
	"context"
	"errors"

	"github.com/maka-agent/maka/internal/continuity"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// ReadProjection reads the canonical projection of sessionID (what a
// subscription's snapshot and projection frames show: identity, root turn,
// queue, pending interactions) for session continuity; it is a continuity.ProjectionReader. found
// is false when the session does not exist. The session identity comes from
// the stored header, the root turn from Options.RootTurn (none when nil),
// the queue is the empty queue of Options.HostEpoch and no interaction is
// pending.
func (s *Service) ReadProjection(ctx context.Context, sessionID string) (continuity.Projection, bool, error) {
	var h header
	var root *protocol.TurnSnapshot
	var pending protocol.InteractionProjection
	err := s.st.Read(ctx, func(q store.Querier) error {
		var err error
		if h, err = loadHeader(q, sessionID); err != nil {
			return err
		}
		if s.opts.RootTurn != nil {
			if root, err = s.opts.RootTurn(q, sessionID); err != nil {
				return err
			}
		}
		if s.opts.Interactions != nil {
			pending, err = s.opts.Interactions(q, sessionID)
		}
		return err
	})
	switch {
	case errors.Is(err, ErrSessionNotFound):
		return continuity.Projection{}, false, nil
	case err != nil:
		return continuity.Projection{}, false, err
	}
	p := continuity.Projection{
		Session:      h.identity(),
		RootTurn:     root,
		Queue:        protocol.SessionMessageQueueProjection{HostEpoch: s.opts.HostEpoch},
		Interactions: pending,
	}
	// The queue is read last: it is the in-memory authority, newer than
	// any durable state read above.
	if s.opts.Queue != nil {
		p.Queue = s.opts.Queue(sessionID)
	}
	return p, true, nil
}

var _ continuity.ProjectionReader = (*Service)(nil).ReadProjection
