// Package sessions owns the durable session catalog of the Runtime Host:
// the session extension operations of docs/protocol.md (session.create,
// session.catalog.query, session.lifecycle.set, session.transcript.page),
// the canonical session projection read by session continuity, and the run
// record the execution layer appends to (record.go).
//
// Everything lives in the host's store (internal/store): session headers in
// the built-in sessions table (indexed columns plus a JSON document with the
// settings), the catalog revision in the documents table, the transcript in
// the messages table of Migration and run events in the built-in run_events
// table.
//
// Every mutation runs inside the session's lane and one store.Write; a
// mutation's reply is built only after that write returned, so a successful
// reply always describes durable state. After a change that may be durable
// (success or an unknown commit outcome) Options.OnChange is called, outside
// the lane. Queries read committed snapshots without entering the lane.
package sessions

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// Operation error messages.
const (
	MessageSessionConflict         = "Session already exists with different settings"
	MessageSessionNotFound         = "Session was not found"
	MessageSessionBusy             = "Session has an active root turn"
	MessageInvalidCreateInput      = "Session create input is invalid"
	MessageInvalidCatalogCursor    = "Invalid session catalog cursor"
	MessageInvalidTranscriptCursor = "Invalid session transcript cursor"
	MessageInvalidTranscriptLimit  = "Invalid session transcript limit"
	MessagePersistenceFailed       = "Session store persistence failed"
	MessageCommitOutcomeUnknown    = "Session store commit outcome is unknown"
)

// Domain errors returned by the write functions (never storage faults).
var (
	// ErrSessionNotFound reports that a session does not exist.
	ErrSessionNotFound = errors.New("sessions: session not found")
	errConflict        = errors.New("sessions: session exists with different settings")
	errBusy            = errors.New("sessions: session has an active root turn")
	errCorrupt         = errors.New("sessions: stored session document is invalid")
)

// Options configures a Service. Every field is optional.
type Options struct {
	// Now is the clock of createdAt, lastUsedAt and archivedAt (time.Now
	// when nil).
	Now func() time.Time
	// DefaultPermissionMode returns the runtime policy's chat default
	// permission mode, applied when session.create omits permissionMode
	// ("ask" when nil or when it returns a value that is not a chat default
	// mode).
	DefaultPermissionMode func() string
	// OnChange is called after a change of sessionID that is durable (or
	// whose commit outcome is unknown), outside the session's lane, before
	// the reply is returned. The composition passes the continuity refresh
	// (continuity.Publisher.Refresh), which enters the lane itself.
	OnChange func(ctx context.Context, sessionID string)
	// ActiveRoot reports whether a root turn of sessionID is running; such a
	// session cannot be archived. It is called inside the session's lane.
	// Nil means no session ever has an active root turn.
	ActiveRoot func(sessionID string) bool
	// Archived is called after sessionID was durably archived, outside its
	// lane: what is kept in memory for its turns can go, since an archived
	// session runs none. Nil: nothing is told.
	Archived func(sessionID string)
	// SandboxStatus reports whether this machine can enforce a sandbox and,
	// when it cannot, why (nil: it cannot, for no stated reason).
	SandboxStatus func() (available bool, reason string)
}

// Service serves the session extension operations on one store.
type Service struct {
	st   *store.Store
	gate *lane.Gate
	opts Options
}

// New returns a Service on st (opened with Migration) that runs its
// mutations in the lanes of gate.
func New(st *store.Store, gate *lane.Gate, opts Options) *Service {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Service{st: st, gate: gate, opts: opts}
}

// Handlers returns the handlers of the session and permission extension
// operations.
func (s *Service) Handlers() host.Handlers {
	return host.Handlers{
		protocol.OpSessionCreate:         s.handleCreate,
		protocol.OpSessionCatalogQuery:   s.handleCatalogQuery,
		protocol.OpSessionLifecycleSet:   s.handleLifecycleSet,
		protocol.OpSessionTranscriptPage: s.handleTranscriptPage,

		protocol.OpSessionPermissionsQuery: s.handlePermissionsQuery,
		protocol.OpSessionPermissionsSet:   s.handlePermissionsSet,
		protocol.OpRootPermissionsQuery:    s.handleRootPermissionsQuery,
		protocol.OpRootPermissionsSet:      s.handleRootPermissionsSet,
	}
}

// now returns the current time in Unix milliseconds, never negative.
func (s *Service) now() int64 {
	return max(s.opts.Now().UnixMilli(), 0)
}

func (s *Service) defaultPermissionMode() protocol.PermissionMode {
	if s.opts.DefaultPermissionMode != nil {
		switch m := s.opts.DefaultPermissionMode(); m {
		case protocol.PermissionModeAsk, protocol.PermissionModeExecute, protocol.PermissionModeBypass:
			return protocol.PermissionMode(m)
		}
	}
	return protocol.PermissionModeAsk
}

// changed calls OnChange for a mutation that ended with err.
func (s *Service) changed(ctx context.Context, sessionID string, err error) {
	if s.opts.OnChange == nil || (err != nil && !errors.Is(err, store.ErrCommitOutcomeUnknown)) {
		return
	}
	s.opts.OnChange(context.WithoutCancel(ctx), sessionID)
}

// failure maps an error of the store, the lane or a domain check to an
// operation outcome.
func failure(err error) host.Outcome {
	switch {
	case errors.Is(err, store.ErrCommitOutcomeUnknown):
		return host.Fail(protocol.ErrCommitOutcomeUnknown, MessageCommitOutcomeUnknown)
	case errors.Is(err, store.ErrPersistenceFailed), errors.Is(err, store.ErrClosed), errors.Is(err, errCorrupt):
		return host.Fail(protocol.ErrPersistenceFailed, MessagePersistenceFailed)
	case errors.Is(err, lane.ErrClosed):
		return host.Fail(protocol.ErrHostDraining, protocol.MessageHostDraining)
	case errors.Is(err, ErrSessionNotFound):
		return host.Fail(protocol.ErrNotFound, MessageSessionNotFound)
	case errors.Is(err, errConflict):
		return host.Fail(protocol.ErrOperationConflict, MessageSessionConflict)
	case errors.Is(err, errBusy):
		return host.Fail(protocol.ErrSessionBusy, MessageSessionBusy)
	}
	return host.Fail(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
}

// --- stored session header ------------------------------------------------

// sessionDoc is the JSON document column of a sessions row: the settings of
// the session. The indexed columns hold the rest of the summary.
type sessionDoc struct {
	Workspace      protocol.Workspace `json:"workspace"`
	Name           string             `json:"name,omitempty"`
	Labels         []string           `json:"labels,omitempty"`
	ModelTarget    storedModelTarget  `json:"modelTarget"`
	PermissionMode string             `json:"permissionMode"`
	// DefaultPermission records that permissionMode was the runtime
	// policy's default when the session was created, so that a retry of
	// the same create stays idempotent after the default changed.
	DefaultPermission bool `json:"defaultPermission,omitempty"`
	// Sandbox is the session's own sandbox mode ("": the root's).
	Sandbox string `json:"sandbox,omitempty"`
	// Rules are the session's own permission rules (permissions.go).
	Rules []protocol.PermissionRule `json:"rules,omitempty"`
	// Thinking is the session's reasoning effort ("": the provider's
	// default), read by every turn.
	Thinking string `json:"thinking,omitempty"`
}

type storedModelTarget struct {
	Kind           string `json:"kind"`
	ConnectionSlug string `json:"connectionSlug,omitempty"`
	Model          string `json:"model,omitempty"`
}

func toStoredTarget(t protocol.ModelTarget) storedModelTarget {
	return storedModelTarget{Kind: string(t.Kind), ConnectionSlug: t.ConnectionSlug, Model: t.Model}
}

func (t storedModelTarget) target() protocol.ModelTarget {
	return protocol.ModelTarget{Kind: protocol.ModelTargetKind(t.Kind), ConnectionSlug: t.ConnectionSlug, Model: t.Model}
}

// header is one sessions row.
type header struct {
	ID         string
	CreatedAt  int64
	LastUsedAt int64
	Status     string
	ArchivedAt sql.NullInt64
	Doc        sessionDoc
}

const headerColumns = `session_id, created_at, last_used_at, status, archived_at, document`

// scanHeader scans one row of headerColumns.
func scanHeader(scan func(dest ...any) error) (header, error) {
	var h header
	var doc string
	if err := scan(&h.ID, &h.CreatedAt, &h.LastUsedAt, &h.Status, &h.ArchivedAt, &doc); err != nil {
		return h, err
	}
	if err := json.Unmarshal([]byte(doc), &h.Doc); err != nil {
		return h, fmt.Errorf("%w: session %s: %w", errCorrupt, h.ID, err)
	}
	return h, nil
}

// loadHeader reads the header of sessionID; ErrSessionNotFound when absent.
func loadHeader(q store.Querier, sessionID string) (header, error) {
	h, err := scanHeader(q.QueryRow(`SELECT `+headerColumns+` FROM sessions WHERE session_id = ?`, sessionID).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return h, ErrSessionNotFound
	}
	return h, err
}

func (h header) summary() protocol.SessionSummary {
	s := protocol.SessionSummary{
		SessionID:      h.ID,
		Name:           h.Doc.Name,
		Workspace:      h.Doc.Workspace,
		Labels:         slices.Clone(h.Doc.Labels),
		ModelTarget:    h.Doc.ModelTarget.target(),
		PermissionMode: protocol.PermissionMode(h.Doc.PermissionMode),
		Status:         protocol.SessionStatus(h.Status),
		CreatedAt:      h.CreatedAt,
		LastUsedAt:     h.LastUsedAt,
		IsArchived:     h.ArchivedAt.Valid,
	}
	if h.ArchivedAt.Valid {
		at := h.ArchivedAt.Int64
		s.ArchivedAt = &at
	}
	return s
}

func (h header) identity() protocol.SessionContinuityIdentity {
	id := protocol.SessionContinuityIdentity{
		SessionID:  h.ID,
		Status:     protocol.SessionStatus(h.Status),
		CreatedAt:  h.CreatedAt,
		LastUsedAt: h.LastUsedAt,
		IsArchived: h.ArchivedAt.Valid,
	}
	if h.ArchivedAt.Valid {
		at := h.ArchivedAt.Int64
		id.ArchivedAt = &at
	}
	return id
}

// bumpCatalog advances the catalog revision.
func bumpCatalog(tx *store.Tx) error {
	return store.AdvanceDocument(tx, catalogDocument)
}

// catalogRevision reads the catalog revision (0 before the first change).
func catalogRevision(q store.Querier) (int64, error) {
	rev, _, _, err := store.ReadDocument(q, catalogDocument)
	return rev, err
}

// LoadSummary reads the summary of sessionID inside a store read or write;
// ErrSessionNotFound when it does not exist.
func LoadSummary(q store.Querier, sessionID string) (protocol.SessionSummary, error) {
	h, err := loadHeader(q, sessionID)
	if err != nil {
		return protocol.SessionSummary{}, err
	}
	return h.summary(), nil
}
