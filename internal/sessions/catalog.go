package sessions

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// --- session.create ---------------------------------------------------------

// createRequest is a canonical session.create input.
type createRequest struct {
	id  string
	doc sessionDoc
	// explicitMode is false when the input omitted permissionMode.
	explicitMode bool
}

// canonicalCreate applies the defaults to in, sorts and deduplicates its
// labels and checks the result against the operation's input codec (the
// kernel already decoded it; this also guards direct Go callers, so that
// every stored session encodes as a valid SessionSummary).
func (s *Service) canonicalCreate(in protocol.SessionCreateInput) (createRequest, error) {
	labels := slices.Compact(slices.Sorted(slices.Values(in.Labels)))
	if len(labels) == 0 {
		labels = nil
	}
	target := protocol.ModelTarget{Kind: protocol.ModelTargetDefault}
	if in.ModelTarget != nil {
		target = *in.ModelTarget
	}
	mode := in.PermissionMode
	explicit := mode != ""
	if !explicit {
		mode = s.defaultPermissionMode()
	}
	norm := protocol.SessionCreateInput{
		SessionID: in.SessionID, Workspace: in.Workspace, Name: in.Name, Labels: labels,
		ModelTarget: &target, PermissionMode: mode, Thinking: in.Thinking,
	}
	if err := checkInput(protocol.OpSessionCreate, norm); err != nil {
		return createRequest{}, err
	}
	return createRequest{
		id: in.SessionID,
		doc: sessionDoc{
			Workspace: in.Workspace, Name: in.Name, Labels: labels,
			ModelTarget: toStoredTarget(target), PermissionMode: string(mode), DefaultPermission: !explicit,
			Thinking: in.Thinking,
		},
		explicitMode: explicit,
	}, nil
}

// checkInput round-trips in through the input codec of op.
func checkInput(op protocol.Operation, in any) error {
	spec, ok := protocol.Lookup(string(op))
	if !ok {
		return errors.New("sessions: unknown operation " + string(op))
	}
	b, err := protocol.Marshal(in)
	if err != nil {
		return err
	}
	v, err := protocol.Parse(b)
	if err != nil {
		return err
	}
	_, err = spec.DecodeInput(v)
	return err
}

// matches reports whether the stored settings answer a create of r: the
// same canonical input. An omitted permissionMode matches a stored one that
// was itself the default.
func (r createRequest) matches(stored sessionDoc) bool {
	modeOK := stored.PermissionMode == r.doc.PermissionMode || !r.explicitMode && stored.DefaultPermission
	return modeOK &&
		stored.Workspace == r.doc.Workspace &&
		stored.Name == r.doc.Name &&
		slices.Equal(stored.Labels, r.doc.Labels) &&
		stored.ModelTarget == r.doc.ModelTarget &&
		stored.Thinking == r.doc.Thinking
}

func (s *Service) handleCreate(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.SessionCreateInput)
	if !ok {
		return failure(errors.New("sessions: unexpected session.create input"))
	}
	req, err := s.canonicalCreate(in)
	if err != nil {
		return host.Fail(protocol.ErrInvalidRequest, MessageInvalidCreateInput)
	}
	var out protocol.SessionSummary
	created := false
	now := s.now()
	err = s.gate.Run(ctx, req.id, func(ctx context.Context, _ *lane.Lease) error {
		return s.st.Write(ctx, func(tx *store.Tx) error {
			created = false
			h, err := loadHeader(tx, req.id)
			switch {
			case err == nil:
				if !req.matches(h.Doc) {
					return errConflict
				}
				out = h.summary()
				return nil
			case !errors.Is(err, ErrSessionNotFound):
				return err
			}
			h = header{ID: req.id, CreatedAt: now, LastUsedAt: now, Status: string(protocol.SessionActive), Doc: req.doc}
			doc, err := marshalJSON(h.Doc)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(`INSERT INTO sessions (`+headerColumns+`) VALUES (?, ?, ?, ?, NULL, ?)`,
				h.ID, h.CreatedAt, h.LastUsedAt, h.Status, doc); err != nil {
				return err
			}
			if err := bumpCatalog(tx); err != nil {
				return err
			}
			out, created = h.summary(), true
			return nil
		})
	})
	if created {
		s.changed(ctx, req.id, err)
	}
	if err != nil {
		return failure(err)
	}
	return host.OK(out)
}

// --- session.lifecycle.set ---------------------------------------------------

func (s *Service) handleLifecycleSet(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.SessionLifecycleSetInput)
	if !ok || (in.Action != protocol.SessionActionArchive && in.Action != protocol.SessionActionUnarchive) {
		return failure(errors.New("sessions: unexpected session.lifecycle.set input"))
	}
	archive := in.Action == protocol.SessionActionArchive
	var out protocol.SessionSummary
	changed := false
	now := s.now()
	err := s.gate.Run(ctx, in.SessionID, func(ctx context.Context, _ *lane.Lease) error {
		busy := archive && s.opts.ActiveRoot != nil && s.opts.ActiveRoot(in.SessionID)
		return s.st.Write(ctx, func(tx *store.Tx) error {
			changed = false
			h, err := loadHeader(tx, in.SessionID)
			if err != nil {
				return err
			}
			if h.ArchivedAt.Valid == archive {
				out = h.summary()
				return nil
			}
			if busy {
				return errBusy
			}
			h.ArchivedAt = sql.NullInt64{}
			if archive {
				h.ArchivedAt = sql.NullInt64{Int64: now, Valid: true}
			}
			if _, err := tx.Exec(`UPDATE sessions SET archived_at = ? WHERE session_id = ?`, h.ArchivedAt, h.ID); err != nil {
				return err
			}
			if err := bumpCatalog(tx); err != nil {
				return err
			}
			out, changed = h.summary(), true
			return nil
		})
	})
	if changed {
		s.changed(ctx, in.SessionID, err)
	}
	if err != nil {
		return failure(err)
	}
	if changed && archive && s.opts.Archived != nil {
		s.opts.Archived(in.SessionID)
	}
	return host.OK(out)
}

// --- session.catalog.query ---------------------------------------------------

// catalogCursor is the position after the last session of a page, in the
// catalog order (lastUsedAt descending, sessionId ascending), of a listing
// issued at Revision.
type catalogCursor struct {
	Revision        int64
	IncludeArchived bool
	LastUsedAt      int64
	SessionID       string
}

const catalogCursorTag = "c1"

// encode returns the opaque wire form: base64url of
// "c1:<revision>:<0|1>:<lastUsedAt>:<sessionId>".
func (c catalogCursor) encode() string {
	flag := "0"
	if c.IncludeArchived {
		flag = "1"
	}
	raw := catalogCursorTag + ":" + strconv.FormatInt(c.Revision, 10) + ":" + flag + ":" +
		strconv.FormatInt(c.LastUsedAt, 10) + ":" + c.SessionID
	return encodeCursor(raw)
}

// encodeCursor makes a cursor's raw text opaque.
func encodeCursor(raw string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// parseCatalogCursor decodes a cursor made by encode; anything else is
// malformed.
func parseCatalogCursor(s string) (catalogCursor, bool) {
	fields, ok := cursorFields(s, catalogCursorTag, 5)
	if !ok {
		return catalogCursor{}, false
	}
	rev, ok1 := parseCount(fields[1])
	at, ok2 := parseCount(fields[3])
	if !ok1 || !ok2 || (fields[2] != "0" && fields[2] != "1") || !protocol.IsEntityID(fields[4]) {
		return catalogCursor{}, false
	}
	c := catalogCursor{Revision: rev, IncludeArchived: fields[2] == "1", LastUsedAt: at, SessionID: fields[4]}
	return c, c.encode() == s
}

// cursorFields base64url-decodes s and splits it into n colon-separated
// fields, the first of which must be tag.
func cursorFields(s, tag string, n int) ([]string, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, false
	}
	fields := strings.SplitN(string(raw), ":", n)
	if len(fields) != n || fields[0] != tag {
		return nil, false
	}
	return fields, true
}

// parseCount parses a canonical decimal safe integer ≥ 0.
func parseCount(s string) (int64, bool) {
	if s == "" || len(s) > 16 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil && v <= protocol.MaxSafeInteger
}

func (s *Service) handleCatalogQuery(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.SessionCatalogQueryInput)
	if !ok {
		return failure(errors.New("sessions: unexpected session.catalog.query input"))
	}
	var res protocol.SessionCatalogQueryResult
	var err error
	switch in.Kind {
	case protocol.SessionCatalogGet:
		res, err = s.getSession(ctx, in.SessionID)
	case protocol.SessionCatalogListStart:
		res, err = s.listPage(ctx, in.IncludeArchived, nil, 0)
	case protocol.SessionCatalogListContinue:
		c, ok := parseCatalogCursor(in.Cursor)
		if !ok || c.Revision != in.Revision {
			return host.Fail(protocol.ErrInvalidRequest, MessageInvalidCatalogCursor)
		}
		res, err = s.listPage(ctx, c.IncludeArchived, &c, in.Revision)
	default:
		return failure(errors.New("sessions: unknown session catalog query kind"))
	}
	if err != nil {
		return failure(err)
	}
	return host.OK(res)
}

func (s *Service) getSession(ctx context.Context, sessionID string) (protocol.SessionCatalogQueryResult, error) {
	res := protocol.SessionCatalogQueryResult{Kind: protocol.SessionCatalogKindSession}
	err := s.st.Read(ctx, func(q store.Querier) error {
		h, err := loadHeader(q, sessionID)
		switch {
		case errors.Is(err, ErrSessionNotFound):
			return nil
		case err != nil:
			return err
		}
		sum := h.summary()
		res.Session = &sum
		return nil
	})
	return res, err
}

// Catalog page queries: the first page and the pages after a position, with
// or without archived sessions. They walk sessions_catalog or
// sessions_catalog_active in index order.
const (
	pageAll    = `SELECT ` + headerColumns + ` FROM sessions ORDER BY last_used_at DESC, session_id LIMIT ?`
	pageActive = `SELECT ` + headerColumns + ` FROM sessions WHERE archived_at IS NULL
		ORDER BY last_used_at DESC, session_id LIMIT ?`
	pageAllAfter = `SELECT ` + headerColumns + ` FROM sessions
		WHERE last_used_at <= ?1 AND (last_used_at < ?1 OR session_id > ?2)
		ORDER BY last_used_at DESC, session_id LIMIT ?3`
	pageActiveAfter = `SELECT ` + headerColumns + ` FROM sessions
		WHERE archived_at IS NULL AND last_used_at <= ?1 AND (last_used_at < ?1 OR session_id > ?2)
		ORDER BY last_used_at DESC, session_id LIMIT ?3`
)

// listPage reads one catalog page after the position of after (the first
// page when nil). For a continuation it first checks that the catalog is
// still at revision expected.
func (s *Service) listPage(ctx context.Context, includeArchived bool, after *catalogCursor, expected int64) (protocol.SessionCatalogQueryResult, error) {
	var res protocol.SessionCatalogQueryResult
	err := s.st.Read(ctx, func(q store.Querier) error {
		rev, err := catalogRevision(q)
		if err != nil {
			return err
		}
		if after != nil && rev != expected {
			res = protocol.SessionCatalogQueryResult{Kind: protocol.SessionCatalogKindRevisionChanged, Expected: expected, Actual: rev}
			return nil
		}
		limit := protocol.SessionCatalogPageMaxSessions + 1
		var rows *sql.Rows
		switch {
		case after == nil && includeArchived:
			rows, err = q.Query(pageAll, limit)
		case after == nil:
			rows, err = q.Query(pageActive, limit)
		case includeArchived:
			rows, err = q.Query(pageAllAfter, after.LastUsedAt, after.SessionID, limit)
		default:
			rows, err = q.Query(pageActiveAfter, after.LastUsedAt, after.SessionID, limit)
		}
		if err != nil {
			return err
		}
		defer rows.Close()
		headers := make([]header, 0, limit)
		for rows.Next() {
			h, err := scanHeader(rows.Scan)
			if err != nil {
				return err
			}
			headers = append(headers, h)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		res, err = buildCatalogPage(rev, includeArchived, headers)
		return err
	})
	return res, err
}

// buildCatalogPage puts the leading headers into a page of at most
// SessionCatalogPageMaxSessions sessions and SessionCatalogPageMaxBytes
// encoded bytes, counting exactly: the page without sessions, each session
// and its separating comma, and the next cursor that replaces null when a
// session is followed by one that does not fit.
func buildCatalogPage(rev int64, includeArchived bool, headers []header) (protocol.SessionCatalogQueryResult, error) {
	res := protocol.SessionCatalogQueryResult{Kind: protocol.SessionCatalogKindPage, Revision: rev}
	size, err := protocol.EncodedSize(res)
	if err != nil {
		return res, err
	}
	const nullLen = len("null")
	var next string
	for i, h := range headers {
		if len(res.Sessions) == protocol.SessionCatalogPageMaxSessions {
			break
		}
		sum := h.summary()
		n := summarySize(sum)
		if len(res.Sessions) > 0 {
			n++ // comma
		}
		cursor, cursorGrowth := "", 0
		if i+1 < len(headers) {
			cursor = catalogCursor{Revision: rev, IncludeArchived: includeArchived, LastUsedAt: h.LastUsedAt, SessionID: h.ID}.encode()
			cursorGrowth = len(cursor) + 2 - nullLen // base64url needs no escaping
		}
		if size+n+cursorGrowth > protocol.SessionCatalogPageMaxBytes {
			if len(res.Sessions) == 0 {
				return res, errors.New("sessions: a session summary does not fit a catalog page")
			}
			break
		}
		size += n
		res.Sessions = append(res.Sessions, sum)
		next = cursor
	}
	if len(res.Sessions) < len(headers) {
		res.NextCursor = &next
	}
	return res, nil
}

// marshalJSON encodes a stored document with the protocol encoder.
func marshalJSON(v any) (string, error) {
	b, err := protocol.Marshal(v)
	return string(b), err
}

// summarySize returns the length of protocol.Marshal(s) without encoding
// it (a catalog page measures up to 33 summaries). TestSummarySize keeps it
// equal to the encoder's.
func summarySize(s protocol.SessionSummary) int {
	n := len(`{"sessionId":`) + stringSize(s.SessionID)
	if s.Name != "" {
		n += len(`,"name":`) + stringSize(s.Name)
	}
	n += len(`,"workspace":{"kind":`) + stringSize(s.Workspace.Kind) + len(`,"path":`) + stringSize(s.Workspace.Path) + len(`}`)
	n += len(`,"labels":[]`)
	for i, l := range s.Labels {
		if i > 0 {
			n++
		}
		n += stringSize(l)
	}
	n += len(`,"modelTarget":`)
	if s.ModelTarget.Kind == protocol.ModelTargetExplicit {
		n += len(`{"kind":"explicit","connectionSlug":`) + stringSize(s.ModelTarget.ConnectionSlug) +
			len(`,"model":`) + stringSize(s.ModelTarget.Model) + len(`}`)
	} else {
		n += len(`{"kind":"default"}`)
	}
	n += len(`,"permissionMode":`) + stringSize(string(s.PermissionMode))
	n += len(`,"status":`) + stringSize(string(s.Status))
	n += len(`,"createdAt":`) + intSize(s.CreatedAt)
	n += len(`,"lastUsedAt":`) + intSize(s.LastUsedAt)
	n += len(`,"isArchived":false`)
	if s.IsArchived {
		n-- // true
	}
	if s.ArchivedAt != nil {
		n += len(`,"archivedAt":`) + intSize(*s.ArchivedAt)
	}
	return n + len(`}`)
}

// intSize returns the length of the decimal form of v.
func intSize(v int64) int {
	n := 1
	if v < 0 {
		n++
		v = -v
	}
	for ; v >= 10; v /= 10 {
		n++
	}
	return n
}
