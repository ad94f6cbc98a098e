package protocol

import (
	"regexp"
	"strings"
	"sync"
)

// This file owns the MessageContent and TurnSnapshot shapes of protocol v0
// and the codecs of turn.start, turn.query and turn.stop.

// Message content bounds.
const (
	MessageTextMaxBytes     = 48 * 1024 // text and displayText, UTF-8 bytes
	MessageContentMaxBytes  = 52 * 1024 // the normalized content, encoded
	MessageQuoteMaxCount    = 16
	MessageQuoteTextMaxLen  = 32000 // UTF-16 units
	MessageQuoteLabelMaxLen = 200   // UTF-16 units
	MaxAttachmentCount      = 8
	MaxAttachmentBytes      = 50 * 1024 * 1024
	AttachmentNameMaxBytes  = 512
	AttachmentMimeMaxBytes  = 256
	AttachmentPathMaxBytes  = 4096
)

// MessageContent is the content of a user message. Decoding normalizes it:
// a displayText equal to text is dropped, and empty attachment and quote
// lists are dropped.
type MessageContent struct {
	Text string `json:"text"`
	// DisplayText is nil when absent; it may point to an empty string.
	DisplayText *string         `json:"displayText,omitempty"`
	Attachments []AttachmentRef `json:"attachments,omitempty"`
	Quotes      []QuoteRef      `json:"quotes,omitempty"`
}

// Attachment kinds.
const (
	AttachmentImage = "image"
	AttachmentPDF   = "pdf"
	AttachmentDoc   = "doc"
	AttachmentCode  = "code"
	AttachmentOther = "other"
)

var attachmentKinds = []string{AttachmentImage, AttachmentPDF, AttachmentDoc, AttachmentCode, AttachmentOther}

// AttachmentRef names a file attached to a message.
type AttachmentRef struct {
	Kind     string     `json:"kind"`
	Name     string     `json:"name"`
	MimeType string     `json:"mimeType"`
	Bytes    int64      `json:"bytes"`
	Ref      StorageRef `json:"ref"`
}

// Storage reference kinds.
const (
	StorageSessionFile   = "session_file"
	StorageWorkspaceFile = "workspace_file"
	StorageExternalFile  = "external_file"
)

// StorageRef locates an attachment (union on Kind): session_file uses
// SessionID and RelativePath, workspace_file uses RelativePath, and
// external_file uses AbsolutePath. Fields of other kinds stay empty.
type StorageRef struct {
	Kind         string `json:"kind"`
	SessionID    string `json:"sessionId,omitempty"`
	RelativePath string `json:"relativePath,omitempty"`
	AbsolutePath string `json:"absolutePath,omitempty"`
}

// QuoteRef is a quoted passage attached to a message. Label and
// SourceTurnID are empty when absent.
type QuoteRef struct {
	Text         string `json:"text"`
	Label        string `json:"label,omitempty"`
	SourceTurnID string `json:"sourceTurnId,omitempty"`
}

// TurnStatus is a TurnRunStatus.
type TurnStatus string

// Turn run statuses.
const (
	TurnAdmitted       TurnStatus = "admitted"
	TurnCreated        TurnStatus = "created"
	TurnRunning        TurnStatus = "running"
	TurnWaitingForUser TurnStatus = "waiting_for_user"
	TurnCompleted      TurnStatus = "completed"
	TurnFailed         TurnStatus = "failed"
	TurnCancelled      TurnStatus = "cancelled"
)

var turnStatuses = []string{
	string(TurnAdmitted), string(TurnCreated), string(TurnRunning), string(TurnWaitingForUser),
	string(TurnCompleted), string(TurnFailed), string(TurnCancelled),
}

// Terminal reports whether s is completed, failed or cancelled.
func (s TurnStatus) Terminal() bool {
	return s == TurnCompleted || s == TurnFailed || s == TurnCancelled
}

// TurnSnapshot is the state of a turn (union on Status). TerminalEventID is
// set exactly for terminal statuses, FailureClass only for failed and
// AbortSource only for cancelled.
type TurnSnapshot struct {
	SessionID       string     `json:"sessionId"`
	TurnID          string     `json:"turnId"`
	RunID           string     `json:"runId"`
	Status          TurnStatus `json:"status"`
	TerminalEventID string     `json:"terminalEventId,omitempty"`
	FailureClass    string     `json:"failureClass,omitempty"`
	AbortSource     string     `json:"abortSource,omitempty"`
}

// TurnStartInput is the input of turn.start.
type TurnStartInput struct {
	SessionID string         `json:"sessionId"`
	TurnID    string         `json:"turnId"`
	Content   MessageContent `json:"content"`
}

// TurnQueryInput is the input of turn.query.
type TurnQueryInput struct {
	SessionID string `json:"sessionId"`
	TurnID    string `json:"turnId"`
}

// TurnStopInput is the input of turn.stop.
type TurnStopInput struct {
	SessionID string `json:"sessionId"`
	TurnID    string `json:"turnId"`
	RunID     string `json:"runId"`
}

func init() {
	registerCodec(OpTurnStart,
		func(d *D, v Value) any {
			o := d.Exact(v, "input", "sessionId", "turnId", "content")
			in := TurnStartInput{SessionID: o.EntityID("sessionId"), TurnID: o.EntityID("turnId")}
			cv, cp := o.Get("content")
			in.Content = decodeMessageContent(d, cv, cp)
			return in
		},
		turnSnapshotCodec)
	registerCodec(OpTurnQuery,
		func(d *D, v Value) any {
			o := d.Exact(v, "input", "sessionId", "turnId")
			return TurnQueryInput{SessionID: o.EntityID("sessionId"), TurnID: o.EntityID("turnId")}
		},
		turnSnapshotCodec)
	registerCodec(OpTurnStop,
		func(d *D, v Value) any {
			o := d.Exact(v, "input", "sessionId", "turnId", "runId")
			return TurnStopInput{SessionID: o.EntityID("sessionId"), TurnID: o.EntityID("turnId"), RunID: o.EntityID("runId")}
		},
		turnSnapshotCodec)
}

func turnSnapshotCodec(d *D, v Value) any { return decodeTurnSnapshot(d, v, "result") }

// DecodeMessageContent strictly decodes and normalizes a MessageContent.
func DecodeMessageContent(v Value) (MessageContent, error) {
	d := &D{}
	c := decodeMessageContent(d, v, "content")
	return c, d.Err()
}

// DecodeTurnSnapshot strictly decodes a TurnSnapshot.
func DecodeTurnSnapshot(v Value) (TurnSnapshot, error) {
	d := &D{}
	t := decodeTurnSnapshot(d, v, "turn")
	return t, d.Err()
}

// discriminator reads the union tag key of v, which must be one of allowed.
func discriminator(d *D, v Value, path, key string, allowed ...string) string {
	return d.Open(v, path).Enum(key, allowed...)
}

func decodeMessageContent(d *D, v Value, path string) MessageContent {
	o := d.Closed(v, path, []string{"text"}, []string{"displayText", "attachments", "quotes"})
	c := MessageContent{Text: o.StringBytes("text", 1, MessageTextMaxBytes)}
	if o.Has("displayText") {
		if dt := o.StringBytes("displayText", 0, MessageTextMaxBytes); dt != c.Text {
			c.DisplayText = &dt
		}
	}
	if o.Has("attachments") {
		items, p := o.Array("attachments", 0, MaxAttachmentCount)
		for i, item := range items {
			c.Attachments = append(c.Attachments, decodeAttachmentRef(d, item, Index(p, i)))
		}
	}
	if o.Has("quotes") {
		items, p := o.Array("quotes", 0, MessageQuoteMaxCount)
		for i, item := range items {
			c.Quotes = append(c.Quotes, decodeQuoteRef(d, item, Index(p, i)))
		}
	}
	d.EncodedWithin(c, path, MessageContentMaxBytes)
	return c
}

func decodeAttachmentRef(d *D, v Value, path string) AttachmentRef {
	o := d.Exact(v, path, "kind", "name", "mimeType", "bytes", "ref")
	a := AttachmentRef{
		Kind:     o.Enum("kind", attachmentKinds...),
		Name:     o.StringBytes("name", 1, AttachmentNameMaxBytes),
		MimeType: o.StringBytes("mimeType", 1, AttachmentMimeMaxBytes),
		Bytes:    o.SafeInt("bytes", 0, MaxAttachmentBytes),
	}
	rv, rp := o.Get("ref")
	a.Ref = decodeStorageRef(d, rv, rp)
	return a
}

func decodeStorageRef(d *D, v Value, path string) StorageRef {
	r := StorageRef{Kind: discriminator(d, v, path, "kind", StorageSessionFile, StorageWorkspaceFile, StorageExternalFile)}
	switch r.Kind {
	case StorageSessionFile:
		o := d.Exact(v, path, "kind", "sessionId", "relativePath")
		r.SessionID = o.EntityID("sessionId")
		r.RelativePath = decodePath(o, "relativePath", isRelPath)
	case StorageWorkspaceFile:
		o := d.Exact(v, path, "kind", "relativePath")
		r.RelativePath = decodePath(o, "relativePath", isRelPath)
	case StorageExternalFile:
		o := d.Exact(v, path, "kind", "absolutePath")
		r.AbsolutePath = decodePath(o, "absolutePath", isAbsPath)
	}
	return r
}

func decodePath(o Obj, key string, valid func(string) bool) string {
	s := o.StringBytes(key, 1, AttachmentPathMaxBytes)
	if !o.d.Failed() && !valid(s) {
		o.d.Fail(o.path+"."+key, "not a valid path")
	}
	return s
}

// isRelPath reports whether s is a RelPath: no NUL, no backslash, not
// absolute, no drive prefix, and every segment non-empty and not . or ..
func isRelPath(s string) bool {
	if strings.ContainsAny(s, "\x00\\") || strings.HasPrefix(s, "/") || hasDrivePrefix(s) {
		return false
	}
	for seg := range strings.SplitSeq(s, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

var uncPath = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\\\\[^\\/]+[\\/][^\\/]+`) })

// isAbsPath reports whether s is an AbsPath: no NUL, and a POSIX root, a
// drive root or a UNC share.
func isAbsPath(s string) bool {
	switch {
	case strings.Contains(s, "\x00"):
		return false
	case strings.HasPrefix(s, "/"):
		return true
	case hasDrivePrefix(s) && len(s) > 2 && (s[2] == '/' || s[2] == '\\'):
		return true
	}
	return uncPath().MatchString(s)
}

func hasDrivePrefix(s string) bool {
	return len(s) >= 2 && s[1] == ':' && (s[0] >= 'A' && s[0] <= 'Z' || s[0] >= 'a' && s[0] <= 'z')
}

func decodeQuoteRef(d *D, v Value, path string) QuoteRef {
	o := d.Closed(v, path, []string{"text"}, []string{"label", "sourceTurnId"})
	q := QuoteRef{Text: o.String("text", 1, MessageQuoteTextMaxLen)}
	if o.Has("label") {
		q.Label = o.String("label", 1, MessageQuoteLabelMaxLen)
	}
	if o.Has("sourceTurnId") {
		q.SourceTurnID = o.EntityID("sourceTurnId")
	}
	return q
}

func decodeTurnSnapshot(d *D, v Value, path string) TurnSnapshot {
	status := TurnStatus(discriminator(d, v, path, "status", turnStatuses...))
	var o Obj
	switch status {
	case TurnCompleted:
		o = d.Exact(v, path, "sessionId", "turnId", "runId", "status", "terminalEventId")
	case TurnFailed:
		o = d.Exact(v, path, "sessionId", "turnId", "runId", "status", "terminalEventId", "failureClass")
	case TurnCancelled:
		o = d.Exact(v, path, "sessionId", "turnId", "runId", "status", "terminalEventId", "abortSource")
	default:
		o = d.Exact(v, path, "sessionId", "turnId", "runId", "status")
	}
	t := TurnSnapshot{
		SessionID: o.EntityID("sessionId"),
		TurnID:    o.EntityID("turnId"),
		RunID:     o.EntityID("runId"),
		Status:    status,
	}
	if status.Terminal() {
		t.TerminalEventID = o.ID("terminalEventId")
	}
	switch status {
	case TurnFailed:
		t.FailureClass = o.String("failureClass", 1, 128)
	case TurnCancelled:
		t.AbortSource = o.String("abortSource", 1, 128)
	}
	return t
}
