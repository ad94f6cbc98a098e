package sessions

import (
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// LoadIdentity reads the continuity identity of sessionID inside a store
// read (ErrSessionNotFound when there is none): the part of a session's
// canonical projection this package owns. The session owner
// (internal/turns) reads the rest — the root turn, the pending
// interactions and the live queue — beside it.
func LoadIdentity(q store.Querier, sessionID string) (protocol.SessionContinuityIdentity, error) {
	h, err := loadHeader(q, sessionID)
	if err != nil {
		return protocol.SessionContinuityIdentity{}, err
	}
	return h.identity(), nil
}
