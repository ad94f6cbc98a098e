package tui

import (
	"context"
	"fmt"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/protocol"
)

// Backend is what the terminal UI uses of a Runtime Host connection.
// *client.Conn provides it through ConnBackend; tests use a fake.
type Backend interface {
	// HostEpoch is the epoch of the host the backend talks to.
	HostEpoch() string
	// Done is closed when the connection has ended.
	Done() <-chan struct{}
	// Err says why the connection ended, once Done is closed.
	Err() error

	QuerySessions(ctx context.Context, in protocol.SessionCatalogQueryInput) (protocol.SessionCatalogQueryResult, error)
	CreateSession(ctx context.Context, in protocol.SessionCreateInput) (protocol.SessionSummary, error)
	TranscriptPage(ctx context.Context, in protocol.SessionTranscriptPageInput) (protocol.SessionTranscriptPage, error)
	// QueryPermissions reads a session's permission mode, sandbox and rules.
	QueryPermissions(ctx context.Context, sessionID string) (protocol.SessionPermissions, error)

	StartTurn(ctx context.Context, in protocol.TurnStartInput) (protocol.TurnSnapshot, error)
	StopTurn(ctx context.Context, in protocol.TurnStopInput) (protocol.TurnSnapshot, error)
	SubmitMessage(ctx context.Context, in protocol.TurnMessageSubmitInput) (protocol.TurnMessageSubmitResult, error)
	AnswerInteraction(ctx context.Context, in protocol.InteractionAnswerInput) (protocol.InteractionAnsweredSnapshot, error)

	// QueryTaskLedger reads one page of a session's task ledger.
	QueryTaskLedger(ctx context.Context, in protocol.TaskLedgerQueryInput) (protocol.TaskLedgerQueryResult, error)

	// SetPermissions changes a session's permission mode or reasoning
	// effort (session.permissions.set).
	SetPermissions(ctx context.Context, in protocol.SessionPermissionsSetInput) (protocol.SessionPermissions, error)
	// Compact summarises the older part of an idle session's conversation
	// (session.compact).
	Compact(ctx context.Context, sessionID string) (protocol.SessionCompactResult, error)
	// Models reads the connection catalog: the connections, their enabled
	// models and the default target.
	Models(ctx context.Context) (Models, error)

	// Subscribe opens the live subscription of a session, with its notices
	// (protocol.NoticeFrame) when the host offers them.
	Subscribe(ctx context.Context, sessionID string) (Stream, error)
}

// Models is the connection catalog as the interface uses it.
type Models struct {
	// Default is the default target (empty Slug: none).
	Default     ModelChoice
	Connections []ModelConnection
}

// ModelConnection is one connection and its enabled models.
type ModelConnection struct {
	Slug    string
	Enabled bool
	Models  []string
}

// ModelChoice is a connection and one of its models.
type ModelChoice struct{ Slug, Model string }

func (c ModelChoice) String() string { return c.Slug + "/" + c.Model }

// choices lists every enabled connection's models.
func (m Models) choices() []ModelChoice {
	var out []ModelChoice
	for _, c := range m.Connections {
		if !c.Enabled {
			continue
		}
		for _, id := range c.Models {
			out = append(out, ModelChoice{c.Slug, id})
		}
	}
	return out
}

// Stream is an open session subscription.
type Stream interface {
	// Snapshot is the session projection at the time of opening.
	Snapshot() protocol.SessionContinuitySnapshot
	// Next returns the next frame: protocol.ProjectionFrame, DeltaFrame,
	// EventFrame or ClosedFrame; io.EOF once the subscription has ended.
	Next(ctx context.Context) (any, error)
	// Close ends the subscription.
	Close(ctx context.Context) error
}

// ConnBackend adapts an accepted host connection to a Backend.
func ConnBackend(c *client.Conn) Backend { return connBackend{c} }

type connBackend struct{ c *client.Conn }

func (b connBackend) HostEpoch() string     { return b.c.HostEpoch() }
func (b connBackend) Done() <-chan struct{} { return b.c.Done() }
func (b connBackend) Err() error            { return b.c.Err() }

func (b connBackend) QuerySessions(ctx context.Context, in protocol.SessionCatalogQueryInput) (protocol.SessionCatalogQueryResult, error) {
	return call[protocol.SessionCatalogQueryResult](ctx, b.c, protocol.OpSessionCatalogQuery, in)
}

func (b connBackend) CreateSession(ctx context.Context, in protocol.SessionCreateInput) (protocol.SessionSummary, error) {
	return call[protocol.SessionSummary](ctx, b.c, protocol.OpSessionCreate, in)
}

func (b connBackend) TranscriptPage(ctx context.Context, in protocol.SessionTranscriptPageInput) (protocol.SessionTranscriptPage, error) {
	return call[protocol.SessionTranscriptPage](ctx, b.c, protocol.OpSessionTranscriptPage, in)
}

func (b connBackend) QueryPermissions(ctx context.Context, sessionID string) (protocol.SessionPermissions, error) {
	return call[protocol.SessionPermissions](ctx, b.c, protocol.OpSessionPermissionsQuery, protocol.SessionPermissionsQueryInput{SessionID: sessionID})
}

func (b connBackend) StartTurn(ctx context.Context, in protocol.TurnStartInput) (protocol.TurnSnapshot, error) {
	return b.c.StartTurn(ctx, in)
}

func (b connBackend) StopTurn(ctx context.Context, in protocol.TurnStopInput) (protocol.TurnSnapshot, error) {
	return b.c.StopTurn(ctx, in)
}

func (b connBackend) SubmitMessage(ctx context.Context, in protocol.TurnMessageSubmitInput) (protocol.TurnMessageSubmitResult, error) {
	return b.c.SubmitMessage(ctx, in)
}

func (b connBackend) AnswerInteraction(ctx context.Context, in protocol.InteractionAnswerInput) (protocol.InteractionAnsweredSnapshot, error) {
	return b.c.AnswerInteraction(ctx, in)
}

func (b connBackend) QueryTaskLedger(ctx context.Context, in protocol.TaskLedgerQueryInput) (protocol.TaskLedgerQueryResult, error) {
	return b.c.QueryTaskLedger(ctx, in)
}

func (b connBackend) SetPermissions(ctx context.Context, in protocol.SessionPermissionsSetInput) (protocol.SessionPermissions, error) {
	return call[protocol.SessionPermissions](ctx, b.c, protocol.OpSessionPermissionsSet, in)
}

func (b connBackend) Compact(ctx context.Context, sessionID string) (protocol.SessionCompactResult, error) {
	return call[protocol.SessionCompactResult](ctx, b.c, protocol.OpSessionCompact, protocol.SessionCompactInput{SessionID: sessionID})
}

// maxCatalogPages bounds the pages one catalog read takes.
const maxCatalogPages = protocol.ConnectionCatalogMaxConnections * 8

func (b connBackend) Models(ctx context.Context) (Models, error) {
	for range 3 {
		var out Models
		var defaultID string
		byIndex := map[int64]int{}
		idSlug := map[string]string{}
		in := protocol.CatalogQueryInput{}
		changed := false
		for pages := 0; !changed; pages++ {
			if pages > maxCatalogPages {
				return Models{}, fmt.Errorf("the connection catalog does not end")
			}
			res, err := b.c.QueryConnectionCatalog(ctx, in)
			if err != nil {
				return Models{}, err
			}
			page, ok := res.(protocol.CatalogPage)
			if !ok {
				changed = true // revision_changed: read it again
				break
			}
			if pages == 0 && page.DefaultTarget != nil {
				defaultID, out.Default.Model = page.DefaultTarget.ConnectionID, page.DefaultTarget.ModelID
			}
			for _, item := range page.Items {
				switch it := item.(type) {
				case protocol.CatalogConnectionHeader:
					byIndex[it.ConnectionIndex] = len(out.Connections)
					idSlug[it.ConnectionID] = it.Slug
					out.Connections = append(out.Connections, ModelConnection{Slug: it.Slug, Enabled: it.Enabled})
				case protocol.CatalogEnabledModelIDItem:
					if i, ok := byIndex[it.ConnectionIndex]; ok {
						out.Connections[i].Models = append(out.Connections[i].Models, it.ModelID)
					}
				}
			}
			if page.NextCursor == nil {
				out.Default.Slug = idSlug[defaultID]
				if out.Default.Slug == "" {
					out.Default.Model = ""
				}
				return out, nil
			}
			in = protocol.CatalogQueryInput{Revision: page.Revision, Cursor: page.NextCursor}
		}
	}
	return Models{}, fmt.Errorf("the connection catalog keeps changing")
}

func (b connBackend) Subscribe(ctx context.Context, sessionID string) (Stream, error) {
	s, err := b.c.OpenSubscription(ctx, sessionID, client.WithNotices())
	if err != nil {
		return nil, err
	}
	return subscription{s}, nil
}

type subscription struct{ s *client.Subscription }

func (s subscription) Snapshot() protocol.SessionContinuitySnapshot { return s.s.Open.Snapshot }
func (s subscription) Next(ctx context.Context) (any, error)        { return s.s.Next(ctx) }
func (s subscription) Close(ctx context.Context) error              { return s.s.Close(ctx) }

// call invokes an operation without a typed client method and checks the
// result type.
func call[T any](ctx context.Context, c *client.Conn, op protocol.Operation, in any) (T, error) {
	var zero T
	res, err := c.Call(ctx, op, in)
	if err != nil {
		return zero, err
	}
	out, ok := res.(T)
	if !ok {
		return zero, fmt.Errorf("%s: unexpected result type %T", op, res)
	}
	return out, nil
}
