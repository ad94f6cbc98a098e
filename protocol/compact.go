package protocol

// Context compaction (docs/protocol.md, "session.compact" and
// "subscription.session_notice"): the on-demand operation and the live
// notice a subscription that asked for notices receives.

// OpSessionCompact summarises the older part of an idle session's
// conversation for the model (an extension operation).
const OpSessionCompact Operation = "session.compact"

// SessionCompactInput is the input of session.compact.
type SessionCompactInput struct {
	SessionID string `json:"sessionId"`
}

// SessionCompactResult is the result of session.compact: whether a
// compaction was recorded, and the estimated tokens of the model's context
// before and after it (equal when nothing was compacted).
type SessionCompactResult struct {
	Compacted    bool  `json:"compacted"`
	BeforeTokens int64 `json:"beforeTokens"`
	AfterTokens  int64 `json:"afterTokens"`
}

// KindSubscriptionNotice is the kind of a session notice push frame.
const KindSubscriptionNotice = "subscription.session_notice"

// Session notice kinds.
const (
	// NoticeContextCompacted: the older conversation was summarised.
	NoticeContextCompacted = "context_compacted"
	// NoticeContextCompactionFailed: the summary could not be made; the
	// oldest exchanges were left out instead.
	NoticeContextCompactionFailed = "context_compaction_failed"
)

// SessionNoticeMessageMaxBytes bounds a notice's message.
const SessionNoticeMessageMaxBytes = 1024

// SessionNotice is one notice about a session. TurnID names the turn it
// happened in (empty: on demand).
type SessionNotice struct {
	Kind         string `json:"kind"`
	TurnID       string `json:"turnId,omitempty"`
	BeforeTokens int64  `json:"beforeTokens"`
	AfterTokens  int64  `json:"afterTokens"`
	Message      string `json:"message"`
}

// NoticeFrame is a subscription.session_notice push frame.
type NoticeFrame struct {
	HostEpoch      string        `json:"hostEpoch"`
	SubscriptionID string        `json:"subscriptionId"`
	Sequence       int64         `json:"sequence"`
	SessionID      string        `json:"sessionId"`
	Notice         SessionNotice `json:"notice"`
}

// MarshalJSON encodes the frame with its kind first.
func (f NoticeFrame) MarshalJSON() ([]byte, error) {
	type plain NoticeFrame
	return Marshal(struct {
		Kind string `json:"kind"`
		plain
	}{KindSubscriptionNotice, plain(f)})
}

func decodeSessionCompactInput(d *D, v Value) any {
	return SessionCompactInput{SessionID: d.Exact(v, "input", "sessionId").EntityID("sessionId")}
}

func decodeSessionCompactResult(d *D, v Value) any {
	o := d.Exact(v, "result", "compacted", "beforeTokens", "afterTokens")
	return SessionCompactResult{Compacted: o.Bool("compacted"), BeforeTokens: o.Count("beforeTokens"), AfterTokens: o.Count("afterTokens")}
}

func decodeSessionNotice(d *D, v Value, path string) SessionNotice {
	o := d.Closed(v, path, []string{"kind", "beforeTokens", "afterTokens", "message"}, []string{"turnId"})
	n := SessionNotice{
		Kind:         o.Enum("kind", NoticeContextCompacted, NoticeContextCompactionFailed),
		BeforeTokens: o.Count("beforeTokens"),
		AfterTokens:  o.Count("afterTokens"),
		Message:      o.StringBytes("message", 0, SessionNoticeMessageMaxBytes),
	}
	if o.Has("turnId") {
		n.TurnID = o.EntityID("turnId")
	}
	return n
}

func init() {
	DefineExtension(OpSessionCompact, ModeCommand, AvailabilityReady,
		sessionErrors(ErrNotFound, ErrSessionBusy, ErrOperationConflict, ErrPersistenceFailed, ErrCommitOutcomeUnknown),
		decodeSessionCompactInput, decodeSessionCompactResult)
	pushDecoders[KindSubscriptionNotice] = func(d *D, v Value) any {
		o := d.Exact(v, KindSubscriptionNotice, "kind", "hostEpoch", "subscriptionId", "sequence", "sessionId", "notice")
		f := NoticeFrame{}
		f.HostEpoch, f.SubscriptionID, f.Sequence = decodeEnvelope(o, KindSubscriptionNotice)
		f.SessionID = o.EntityID("sessionId")
		nv, np := o.Get("notice")
		f.Notice = decodeSessionNotice(d, nv, np)
		d.EncodedWithin(f, KindSubscriptionNotice, SubscriptionFrameMaxBytes)
		return f
	}
}
