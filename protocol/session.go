package protocol

import (
	"fmt"
	"strings"
)

// This file owns the session extension operations of docs/protocol.md
// ("Extension operations"): session.create, session.catalog.query,
// session.lifecycle.set and session.transcript.page, with their shared shapes
// Workspace, ModelTarget, PermissionMode and SessionSummary.

// The session extension operations.
const (
	OpSessionCreate         Operation = "session.create"
	OpSessionCatalogQuery   Operation = "session.catalog.query"
	OpSessionLifecycleSet   Operation = "session.lifecycle.set"
	OpSessionTranscriptPage Operation = "session.transcript.page"
)

// Session extension bounds. Lengths named Len are UTF-16 units, Bytes are
// UTF-8 bytes.
const (
	WorkspacePathMaxBytes           = 4096
	SessionNameMaxLen               = 256
	SessionLabelMaxLen              = 64
	SessionLabelsMax                = 16
	ModelTargetModelMaxLen          = 512
	SessionCursorMaxLen             = 512
	SessionCatalogPageMaxSessions   = 32
	SessionCatalogPageMaxBytes      = 48 * 1024
	SessionTranscriptDefaultLimit   = 64
	SessionTranscriptMaxLimit       = 64
	SessionTranscriptPageMaxBytes   = 48 * 1024
	TranscriptTextMaxBytes          = 16384
	TranscriptToolNameMaxBytes      = 256
	TranscriptToolOutputMaxBytes    = 8192
	SessionTranscriptPageMaxEntries = SessionTranscriptMaxLimit // messages in one page

	// transcriptChunkMaxEscapedBytes bounds the JSON-escaped size of one
	// chunk of SplitTranscriptText, so that a transcript page carrying it
	// with every other field at its largest still fits
	// SessionTranscriptPageMaxBytes.
	transcriptChunkMaxEscapedBytes = 44 * 1024
)

// WorkspaceHostPath is the only Workspace kind: a directory of the host.
const WorkspaceHostPath = "host_path"

// Workspace is where a session works: {"kind":"host_path","path":AbsPath}
// with a POSIX absolute path of at most WorkspacePathMaxBytes and no NUL.
type Workspace struct {
	Kind string `json:"kind"`
	Path string `json:"path"`
}

// HostPathWorkspace returns the host_path workspace of path.
func HostPathWorkspace(path string) Workspace {
	return Workspace{Kind: WorkspaceHostPath, Path: path}
}

// ModelTargetKind discriminates a ModelTarget.
type ModelTargetKind string

// Model target kinds.
const (
	ModelTargetDefault  ModelTargetKind = "default"  // the connection catalog's default target
	ModelTargetExplicit ModelTargetKind = "explicit" // a connection (by slug) and a model
)

// ModelTarget is {"kind":"default"} or {"kind":"explicit","connectionSlug",
// "model"}; ConnectionSlug and Model are empty for the default kind.
type ModelTarget struct {
	Kind           ModelTargetKind
	ConnectionSlug string
	Model          string
}

// MarshalJSON encodes the variant named by Kind.
func (t ModelTarget) MarshalJSON() ([]byte, error) {
	switch t.Kind {
	case ModelTargetDefault:
		return []byte(`{"kind":"default"}`), nil
	case ModelTargetExplicit:
		return Marshal(struct {
			Kind           ModelTargetKind `json:"kind"`
			ConnectionSlug string          `json:"connectionSlug"`
			Model          string          `json:"model"`
		}{t.Kind, t.ConnectionSlug, t.Model})
	}
	return nil, fmt.Errorf("protocol: unknown model target kind %q", t.Kind)
}

// PermissionMode is the permission mode of a session. Besides
// PermissionModeExplore it takes the chat default modes PermissionModeAsk,
// PermissionModeExecute and PermissionModeBypass (untyped constants shared
// with the runtime policy, whose chatDefaults cannot select explore).
type PermissionMode string

// PermissionModeExplore is the read-only session permission mode.
const PermissionModeExplore PermissionMode = "explore"

var sessionPermissionModes = []string{string(PermissionModeExplore), PermissionModeAsk, PermissionModeExecute, PermissionModeBypass}

// SessionSummary is the catalog view of one session. Labels are unique and
// sorted in ascending byte order (Unicode code point order, as slices.Sort
// orders Go strings); nil encodes as []. Name is empty when absent;
// ArchivedAt is set iff IsArchived.
type SessionSummary struct {
	SessionID      string         `json:"sessionId"`
	Name           string         `json:"name,omitempty"`
	Workspace      Workspace      `json:"workspace"`
	Labels         []string       `json:"labels"`
	ModelTarget    ModelTarget    `json:"modelTarget"`
	PermissionMode PermissionMode `json:"permissionMode"`
	Status         SessionStatus  `json:"status"`
	CreatedAt      int64          `json:"createdAt"`
	LastUsedAt     int64          `json:"lastUsedAt"`
	IsArchived     bool           `json:"isArchived"`
	ArchivedAt     *int64         `json:"archivedAt,omitempty"`
}

// MarshalJSON encodes nil labels as an empty array.
func (s SessionSummary) MarshalJSON() ([]byte, error) {
	type fields SessionSummary
	f := fields(s)
	if f.Labels == nil {
		f.Labels = []string{}
	}
	return Marshal(f)
}

// SessionCreateInput is the input of session.create. Optional fields are
// zero when absent: the host then applies the defaults (modelTarget
// {"kind":"default"}, permissionMode from the runtime policy's chatDefaults).
// An empty labels array decodes as absent.
type SessionCreateInput struct {
	SessionID      string         `json:"sessionId"`
	Workspace      Workspace      `json:"workspace"`
	Name           string         `json:"name,omitempty"`
	Labels         []string       `json:"labels,omitempty"`
	ModelTarget    *ModelTarget   `json:"modelTarget,omitempty"`
	PermissionMode PermissionMode `json:"permissionMode,omitempty"`
	// Thinking is the session's reasoning effort (an extension field:
	// off, low, medium or high; "" leaves the provider's default).
	Thinking string `json:"thinking,omitempty"`
}

// SessionThinkingLevels are the reasoning efforts a session may ask for.
var SessionThinkingLevels = []string{"off", "low", "medium", "high"}

// SessionCatalogQueryKind discriminates a SessionCatalogQueryInput.
type SessionCatalogQueryKind string

// Session catalog query kinds.
const (
	SessionCatalogListStart    SessionCatalogQueryKind = "list_start"
	SessionCatalogListContinue SessionCatalogQueryKind = "list_continue"
	SessionCatalogGet          SessionCatalogQueryKind = "get"
)

// SessionCatalogQueryInput is the input of session.catalog.query (union on
// Kind). IncludeArchived belongs to list_start, Revision and Cursor to
// list_continue, SessionID to get; the other fields stay zero.
type SessionCatalogQueryInput struct {
	Kind            SessionCatalogQueryKind
	IncludeArchived bool
	Revision        int64
	Cursor          string
	SessionID       string
}

// MarshalJSON encodes the variant named by Kind.
func (in SessionCatalogQueryInput) MarshalJSON() ([]byte, error) {
	switch in.Kind {
	case SessionCatalogListStart:
		return Marshal(struct {
			Kind            SessionCatalogQueryKind `json:"kind"`
			IncludeArchived bool                    `json:"includeArchived"`
		}{in.Kind, in.IncludeArchived})
	case SessionCatalogListContinue:
		return Marshal(struct {
			Kind     SessionCatalogQueryKind `json:"kind"`
			Revision int64                   `json:"revision"`
			Cursor   string                  `json:"cursor"`
		}{in.Kind, in.Revision, in.Cursor})
	case SessionCatalogGet:
		return Marshal(struct {
			Kind      SessionCatalogQueryKind `json:"kind"`
			SessionID string                  `json:"sessionId"`
		}{in.Kind, in.SessionID})
	}
	return nil, fmt.Errorf("protocol: unknown session catalog query kind %q", in.Kind)
}

// SessionCatalogResultKind discriminates a SessionCatalogQueryResult.
type SessionCatalogResultKind string

// Session catalog query result kinds.
const (
	SessionCatalogKindPage            SessionCatalogResultKind = "page"
	SessionCatalogKindRevisionChanged SessionCatalogResultKind = "revision_changed"
	SessionCatalogKindSession         SessionCatalogResultKind = "session"
)

// SessionCatalogQueryResult is the result of session.catalog.query (union
// on Kind):
//   - page: Revision, Sessions (at most SessionCatalogPageMaxSessions, newest
//     LastUsedAt first, ties by ascending SessionID; nil encodes as []) and
//     NextCursor (nil encodes as null), at most SessionCatalogPageMaxBytes
//     encoded;
//   - revision_changed: Expected and Actual catalog revisions;
//   - session: Session, nil (null) when the session does not exist.
type SessionCatalogQueryResult struct {
	Kind SessionCatalogResultKind

	Revision   int64
	Sessions   []SessionSummary
	NextCursor *string

	Expected int64
	Actual   int64

	Session *SessionSummary
}

// MarshalJSON encodes the variant named by Kind.
func (r SessionCatalogQueryResult) MarshalJSON() ([]byte, error) {
	switch r.Kind {
	case SessionCatalogKindPage:
		sessions := r.Sessions
		if sessions == nil {
			sessions = []SessionSummary{}
		}
		return Marshal(struct {
			Kind       SessionCatalogResultKind `json:"kind"`
			Revision   int64                    `json:"revision"`
			Sessions   []SessionSummary         `json:"sessions"`
			NextCursor *string                  `json:"nextCursor"`
		}{r.Kind, r.Revision, sessions, r.NextCursor})
	case SessionCatalogKindRevisionChanged:
		return Marshal(struct {
			Kind     SessionCatalogResultKind `json:"kind"`
			Expected int64                    `json:"expected"`
			Actual   int64                    `json:"actual"`
		}{r.Kind, r.Expected, r.Actual})
	case SessionCatalogKindSession:
		return Marshal(struct {
			Kind    SessionCatalogResultKind `json:"kind"`
			Session *SessionSummary          `json:"session"`
		}{r.Kind, r.Session})
	}
	return nil, fmt.Errorf("protocol: unknown session catalog result kind %q", r.Kind)
}

// SessionLifecycleAction is the action of session.lifecycle.set.
type SessionLifecycleAction string

// Session lifecycle actions.
const (
	SessionActionArchive   SessionLifecycleAction = "archive"
	SessionActionUnarchive SessionLifecycleAction = "unarchive"
)

// SessionLifecycleSetInput is the input of session.lifecycle.set.
type SessionLifecycleSetInput struct {
	SessionID string                 `json:"sessionId"`
	Action    SessionLifecycleAction `json:"action"`
}

// SessionTranscriptPageInput is the input of session.transcript.page.
// Cursor is empty and Limit zero when absent (see PageLimit).
type SessionTranscriptPageInput struct {
	SessionID string `json:"sessionId"`
	Cursor    string `json:"cursor,omitempty"`
	Limit     int64  `json:"limit,omitempty"`
}

// PageLimit returns the requested number of messages, applying the default.
func (in SessionTranscriptPageInput) PageLimit() int64 {
	if in.Limit == 0 {
		return SessionTranscriptDefaultLimit
	}
	return in.Limit
}

// TranscriptRole is the role of a TranscriptMessage.
type TranscriptRole string

// Transcript message roles.
const (
	TranscriptRoleUser      TranscriptRole = "user"
	TranscriptRoleAssistant TranscriptRole = "assistant"
	TranscriptRoleThinking  TranscriptRole = "thinking"
	TranscriptRoleTool      TranscriptRole = "tool"
)

var transcriptRoles = []string{string(TranscriptRoleUser), string(TranscriptRoleAssistant), string(TranscriptRoleThinking), string(TranscriptRoleTool)}

// Transcript tool statuses.
const (
	TranscriptToolCompleted = "completed"
	TranscriptToolErrored   = "errored"
	TranscriptToolUnknown   = "unknown"
)

// TranscriptMessage is one entry of a transcript page. Text belongs to the
// user, assistant and thinking roles; ToolUseID, ToolName, Status, Output
// and Truncated to the tool role (Output empty when absent, Truncated then
// not encoded). A text longer than TranscriptTextMaxBytes is carried by
// consecutive entries with the same MessageID and Part 1, 2, … (see
// SplitTranscriptText); an entry that is not split has Part 1.
type TranscriptMessage struct {
	MessageID string
	TurnID    string
	Role      TranscriptRole
	CreatedAt int64
	Part      int64

	Text string

	ToolUseID string
	ToolName  string
	Status    string
	Output    string
	Truncated bool
}

type transcriptMessageHead struct {
	MessageID string         `json:"messageId"`
	TurnID    string         `json:"turnId"`
	Role      TranscriptRole `json:"role"`
	CreatedAt int64          `json:"createdAt"`
	Part      int64          `json:"part"`
}

// MarshalJSON encodes the variant named by Role.
func (m TranscriptMessage) MarshalJSON() ([]byte, error) {
	head := transcriptMessageHead{m.MessageID, m.TurnID, m.Role, m.CreatedAt, m.Part}
	switch m.Role {
	case TranscriptRoleUser, TranscriptRoleAssistant, TranscriptRoleThinking:
		return Marshal(struct {
			transcriptMessageHead
			Text string `json:"text"`
		}{head, m.Text})
	case TranscriptRoleTool:
		if m.Output == "" {
			return Marshal(struct {
				transcriptMessageHead
				ToolUseID string `json:"toolUseId"`
				ToolName  string `json:"toolName"`
				Status    string `json:"status"`
			}{head, m.ToolUseID, m.ToolName, m.Status})
		}
		return Marshal(struct {
			transcriptMessageHead
			ToolUseID string `json:"toolUseId"`
			ToolName  string `json:"toolName"`
			Status    string `json:"status"`
			Output    string `json:"output"`
			Truncated bool   `json:"truncated"`
		}{head, m.ToolUseID, m.ToolName, m.Status, m.Output, m.Truncated})
	}
	return nil, fmt.Errorf("protocol: unknown transcript role %q", m.Role)
}

// SessionTranscriptPage is the result of session.transcript.page: at most
// SessionTranscriptPageMaxEntries messages, oldest first, at most
// SessionTranscriptPageMaxBytes encoded. Nil Messages encodes as [] and nil
// NextCursor as null.
type SessionTranscriptPage struct {
	SessionID  string              `json:"sessionId"`
	Messages   []TranscriptMessage `json:"messages"`
	NextCursor *string             `json:"nextCursor"`
}

// MarshalJSON encodes nil messages as an empty array.
func (p SessionTranscriptPage) MarshalJSON() ([]byte, error) {
	type fields SessionTranscriptPage
	f := fields(p)
	if f.Messages == nil {
		f.Messages = []TranscriptMessage{}
	}
	return Marshal(f)
}

// SplitTranscriptText cuts a text into the Text of consecutive transcript
// entries (Part 1, 2, …): each chunk is non-empty, at most
// TranscriptTextMaxBytes of UTF-8 and ends on a code-point boundary. A chunk
// is also cut early when its JSON escaping (six bytes per control
// character) would grow past what a page can carry next to the largest other
// fields, so every chunk fits a transcript page on its own. An invalid UTF-8
// byte counts as the U+FFFD it is encoded as. Empty text yields no chunks.
func SplitTranscriptText(text string) []string {
	return splitText(text, TranscriptTextMaxBytes, transcriptChunkMaxEscapedBytes)
}

// DecodeSessionSummary strictly decodes a SessionSummary.
func DecodeSessionSummary(v Value) (SessionSummary, error) {
	d := &D{}
	s := decodeSessionSummary(d, v, "session")
	return s, d.Err()
}

// DecodeModelTarget strictly decodes a ModelTarget.
func DecodeModelTarget(v Value) (ModelTarget, error) {
	d := &D{}
	t := decodeModelTarget(d, v, "modelTarget")
	return t, d.Err()
}

// sessionErrors lists the codes every extension operation declares around
// its own ones.
func sessionErrors(codes ...ErrorCode) []ErrorCode {
	errs := append([]ErrorCode{ErrHostNotReady, ErrHostDraining, ErrOperationUnavailable}, codes...)
	return append(errs, ErrInternalFailure)
}

func init() {
	DefineExtension(OpSessionCreate, ModeCommand, AvailabilityReady,
		sessionErrors(ErrOperationConflict, ErrInvalidRequest, ErrPersistenceFailed, ErrCommitOutcomeUnknown),
		decodeSessionCreateInput, decodeSummaryResult)
	DefineExtension(OpSessionCatalogQuery, ModeQuery, AvailabilityReady,
		sessionErrors(ErrInvalidRequest, ErrPersistenceFailed),
		decodeSessionCatalogQueryInput, decodeSessionCatalogQueryResult)
	DefineExtension(OpSessionLifecycleSet, ModeCommand, AvailabilityReady,
		sessionErrors(ErrNotFound, ErrSessionBusy, ErrPersistenceFailed, ErrCommitOutcomeUnknown),
		decodeSessionLifecycleSetInput, decodeSummaryResult)
	DefineExtension(OpSessionTranscriptPage, ModeQuery, AvailabilityReady,
		sessionErrors(ErrNotFound, ErrInvalidRequest, ErrPersistenceFailed),
		decodeSessionTranscriptPageInput, decodeSessionTranscriptPage)
}

func decodeSummaryResult(d *D, v Value) any { return decodeSessionSummary(d, v, "result") }

func decodeWorkspace(d *D, v Value, path string) Workspace {
	o := d.Exact(v, path, "kind", "path")
	o.Literal("kind", WorkspaceHostPath)
	p := o.StringBytes("path", 1, WorkspacePathMaxBytes)
	if !d.Failed() && (!strings.HasPrefix(p, "/") || strings.Contains(p, "\x00")) {
		d.Fail(path+".path", "not a POSIX absolute path")
		return Workspace{}
	}
	return Workspace{Kind: WorkspaceHostPath, Path: p}
}

func decodeModelTarget(d *D, v Value, path string) ModelTarget {
	switch ModelTargetKind(discriminator(d, v, path, "kind", string(ModelTargetDefault), string(ModelTargetExplicit))) {
	case ModelTargetDefault:
		d.Exact(v, path, "kind")
		return ModelTarget{Kind: ModelTargetDefault}
	case ModelTargetExplicit:
		o := d.Exact(v, path, "kind", "connectionSlug", "model")
		sv, sp := o.Get("connectionSlug")
		t := ModelTarget{Kind: ModelTargetExplicit, ConnectionSlug: decodeConnectionSlug(d, sv, sp)}
		t.Model = o.String("model", 1, ModelTargetModelMaxLen)
		return t
	}
	return ModelTarget{}
}

// decodeSessionLabels decodes a label list: at most SessionLabelsMax labels
// of 1..SessionLabelMaxLen units, strictly ascending (so unique). An empty
// list decodes to nil.
func decodeSessionLabels(d *D, v Value, path string) []string {
	items := d.Array(v, path, 0, SessionLabelsMax)
	var labels []string
	for i, item := range items {
		p := Index(path, i)
		l := d.String(item, p, 1, SessionLabelMaxLen)
		if d.Failed() {
			return nil
		}
		if i > 0 && labels[i-1] >= l {
			d.Fail(p, "labels must be unique and sorted")
			return nil
		}
		labels = append(labels, l)
	}
	return labels
}

func decodeSessionSummary(d *D, v Value, path string) SessionSummary {
	o := d.Closed(v, path,
		[]string{"sessionId", "workspace", "labels", "modelTarget", "permissionMode", "status", "createdAt", "lastUsedAt", "isArchived"},
		[]string{"name", "archivedAt"})
	s := SessionSummary{SessionID: o.EntityID("sessionId")}
	if o.Has("name") {
		s.Name = o.String("name", 1, SessionNameMaxLen)
	}
	wv, wp := o.Get("workspace")
	s.Workspace = decodeWorkspace(d, wv, wp)
	lv, lp := o.Get("labels")
	s.Labels = decodeSessionLabels(d, lv, lp)
	mv, mp := o.Get("modelTarget")
	s.ModelTarget = decodeModelTarget(d, mv, mp)
	s.PermissionMode = PermissionMode(o.Enum("permissionMode", sessionPermissionModes...))
	s.Status = SessionStatus(o.Enum("status", sessionStatuses...))
	s.CreatedAt = o.Count("createdAt")
	s.LastUsedAt = o.Count("lastUsedAt")
	s.IsArchived = o.Bool("isArchived")
	if o.Has("archivedAt") {
		at := o.Count("archivedAt")
		s.ArchivedAt = &at
	}
	if !d.Failed() && s.IsArchived != (s.ArchivedAt != nil) {
		d.Fail(path+".archivedAt", "must be present exactly when isArchived is true")
	}
	return s
}

func decodeSessionCreateInput(d *D, v Value) any {
	o := d.Closed(v, "input", []string{"sessionId", "workspace"}, []string{"name", "labels", "modelTarget", "permissionMode", "thinking"})
	in := SessionCreateInput{SessionID: o.EntityID("sessionId")}
	wv, wp := o.Get("workspace")
	in.Workspace = decodeWorkspace(d, wv, wp)
	if o.Has("name") {
		in.Name = o.String("name", 1, SessionNameMaxLen)
	}
	if o.Has("labels") {
		lv, lp := o.Get("labels")
		in.Labels = decodeSessionLabels(d, lv, lp)
	}
	if o.Has("modelTarget") {
		mv, mp := o.Get("modelTarget")
		t := decodeModelTarget(d, mv, mp)
		in.ModelTarget = &t
	}
	if o.Has("permissionMode") {
		in.PermissionMode = PermissionMode(o.Enum("permissionMode", sessionPermissionModes...))
	}
	if o.Has("thinking") {
		in.Thinking = o.Enum("thinking", SessionThinkingLevels...)
	}
	return in
}

func decodeSessionCatalogQueryInput(d *D, v Value) any {
	k := SessionCatalogQueryKind(discriminator(d, v, "input", "kind",
		string(SessionCatalogListStart), string(SessionCatalogListContinue), string(SessionCatalogGet)))
	in := SessionCatalogQueryInput{Kind: k}
	switch k {
	case SessionCatalogListStart:
		in.IncludeArchived = d.Exact(v, "input", "kind", "includeArchived").Bool("includeArchived")
	case SessionCatalogListContinue:
		o := d.Exact(v, "input", "kind", "revision", "cursor")
		in.Revision = o.Count("revision")
		in.Cursor = o.String("cursor", 1, SessionCursorMaxLen)
	case SessionCatalogGet:
		in.SessionID = d.Exact(v, "input", "kind", "sessionId").EntityID("sessionId")
	}
	return in
}

// decodeNullableCursor decodes a next cursor: a Str(SessionCursorMaxLen) or
// null.
func decodeNullableCursor(o Obj, key string) *string {
	if o.IsNull(key) {
		return nil
	}
	s := o.String(key, 1, SessionCursorMaxLen)
	if o.d.Failed() {
		return nil
	}
	return &s
}

func decodeSessionCatalogQueryResult(d *D, v Value) any {
	k := SessionCatalogResultKind(discriminator(d, v, "result", "kind",
		string(SessionCatalogKindPage), string(SessionCatalogKindRevisionChanged), string(SessionCatalogKindSession)))
	r := SessionCatalogQueryResult{Kind: k}
	switch k {
	case SessionCatalogKindPage:
		o := d.Exact(v, "result", "kind", "revision", "sessions", "nextCursor")
		r.Revision = o.Count("revision")
		items, ip := o.Array("sessions", 0, SessionCatalogPageMaxSessions)
		for i, item := range items {
			p := Index(ip, i)
			s := decodeSessionSummary(d, item, p)
			if d.Failed() {
				return r
			}
			if i > 0 {
				prev := r.Sessions[i-1]
				if prev.LastUsedAt < s.LastUsedAt || prev.LastUsedAt == s.LastUsedAt && prev.SessionID >= s.SessionID {
					d.Fail(p, "sessions must be ordered by lastUsedAt descending, then sessionId ascending")
					return r
				}
			}
			r.Sessions = append(r.Sessions, s)
		}
		r.NextCursor = decodeNullableCursor(o, "nextCursor")
		d.EncodedWithin(r, "result", SessionCatalogPageMaxBytes)
	case SessionCatalogKindRevisionChanged:
		o := d.Exact(v, "result", "kind", "expected", "actual")
		r.Expected = o.Count("expected")
		r.Actual = o.Count("actual")
	case SessionCatalogKindSession:
		o := d.Exact(v, "result", "kind", "session")
		if sv, sp := o.Get("session"); !d.Failed() && sv.Kind() != KindNull {
			s := decodeSessionSummary(d, sv, sp)
			r.Session = &s
		}
	}
	return r
}

func decodeSessionLifecycleSetInput(d *D, v Value) any {
	o := d.Exact(v, "input", "sessionId", "action")
	return SessionLifecycleSetInput{
		SessionID: o.EntityID("sessionId"),
		Action:    SessionLifecycleAction(o.Enum("action", string(SessionActionArchive), string(SessionActionUnarchive))),
	}
}

func decodeSessionTranscriptPageInput(d *D, v Value) any {
	o := d.Closed(v, "input", []string{"sessionId"}, []string{"cursor", "limit"})
	in := SessionTranscriptPageInput{SessionID: o.EntityID("sessionId")}
	if o.Has("cursor") {
		in.Cursor = o.String("cursor", 1, SessionCursorMaxLen)
	}
	if o.Has("limit") {
		in.Limit = o.SafeInt("limit", 1, SessionTranscriptMaxLimit)
	}
	return in
}

func transcriptKeys(extra ...string) []string {
	return append([]string{"messageId", "turnId", "role", "createdAt", "part"}, extra...)
}

func decodeTranscriptMessage(d *D, v Value, path string) TranscriptMessage {
	role := TranscriptRole(discriminator(d, v, path, "role", transcriptRoles...))
	var o Obj
	if role == TranscriptRoleTool {
		o = d.Closed(v, path, transcriptKeys("toolUseId", "toolName", "status"), []string{"output", "truncated"})
	} else {
		o = d.Exact(v, path, transcriptKeys("text")...)
	}
	m := TranscriptMessage{
		MessageID: o.EntityID("messageId"),
		TurnID:    o.EntityID("turnId"),
		Role:      role,
		CreatedAt: o.Count("createdAt"),
		Part:      o.PosCount("part"),
	}
	if role != TranscriptRoleTool {
		m.Text = o.StringBytes("text", 1, TranscriptTextMaxBytes)
		return m
	}
	m.ToolUseID = o.ID("toolUseId")
	m.ToolName = o.StringBytes("toolName", 1, TranscriptToolNameMaxBytes)
	m.Status = o.Enum("status", TranscriptToolCompleted, TranscriptToolErrored, TranscriptToolUnknown)
	if d.Failed() {
		return m
	}
	if o.Has("output") != o.Has("truncated") {
		d.Fail(path, "output and truncated must be both present or both absent")
		return m
	}
	if o.Has("output") {
		m.Output = o.StringBytes("output", 1, TranscriptToolOutputMaxBytes)
		m.Truncated = o.Bool("truncated")
	}
	if !d.Failed() && m.Part != 1 {
		d.Fail(path+".part", "a tool entry is never split: part must be 1")
	}
	return m
}

// checkTranscriptSequence applies the split rule to entry m at index i > 0
// of a page, following prev: an entry continuing the same text message
// (same messageId and text role) has the next part and the same turnId and
// createdAt, and an entry with part > 1 continues the previous one. The
// first entry of a page may have any part (the page starts inside a split
// text).
func checkTranscriptSequence(d *D, path string, prev, m TranscriptMessage) {
	continues := m.Role != TranscriptRoleTool && prev.Role == m.Role && prev.MessageID == m.MessageID
	switch {
	case continues && m.Part != prev.Part+1:
		d.Fail(path+".part", "a continuation of message %q must have part %d", m.MessageID, prev.Part+1)
	case continues && (m.TurnID != prev.TurnID || m.CreatedAt != prev.CreatedAt):
		d.Fail(path, "a continuation of message %q must keep its turnId and createdAt", m.MessageID)
	case !continues && m.Part != 1:
		d.Fail(path+".part", "part %d does not continue the previous entry", m.Part)
	}
}

func decodeSessionTranscriptPage(d *D, v Value) any {
	o := d.Exact(v, "result", "sessionId", "messages", "nextCursor")
	p := SessionTranscriptPage{SessionID: o.EntityID("sessionId")}
	items, ip := o.Array("messages", 0, SessionTranscriptPageMaxEntries)
	for i, item := range items {
		path := Index(ip, i)
		m := decodeTranscriptMessage(d, item, path)
		if i > 0 {
			checkTranscriptSequence(d, path, p.Messages[i-1], m)
		}
		if d.Failed() {
			return p
		}
		p.Messages = append(p.Messages, m)
	}
	p.NextCursor = decodeNullableCursor(o, "nextCursor")
	d.EncodedWithin(p, "result", SessionTranscriptPageMaxBytes)
	return p
}
