package sessions

import (
	"context"
	"errors"

	"github.com/maka-agent/maka/internal/continuity"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// ReadProjection reads the canonical projection of sessionID (domain.md
// §7.1) for session continuity; it is a continuity.ProjectionReader. found
// is false when the session does not exist. The session identity comes from
// the stored header, the root turn from Options.RootTurn (none when nil),
// the queue is the empty queue of Options.HostEpoch and no interaction is
// pending.
func (s *Service) ReadProjection(ctx context.Context, sessionID string) (continuity.Projection, bool, error) {
	var h header
	err := s.st.Read(ctx, func(q store.Querier) error {
		var err error
		h, err = loadHeader(q, sessionID)
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
		Queue:        protocol.SessionMessageQueueProjection{HostEpoch: s.opts.HostEpoch},
		Interactions: protocol.InteractionProjection{},
	}
	if s.opts.RootTurn != nil {
		if p.RootTurn, err = s.opts.RootTurn(ctx, sessionID); err != nil {
			return continuity.Projection{}, false, err
		}
	}
	return p, true, nil
}

var _ continuity.ProjectionReader = (*Service)(nil).ReadProjection
