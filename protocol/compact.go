package protocol

// Context compaction (docs/protocol.md, "session.compact",
// "subscription.notices.set" and "connection.context-window.set"): the
// on-demand operation, the live notice a subscription receives once it
// asked for notices, and the context window a connection declares. Each is
// an extension operation: no v0 shape changes.

// Extension operations of context compaction.
const (
	// OpSessionCompact summarises the older part of an idle session's
	// conversation for the model.
	OpSessionCompact Operation = "session.compact"
	// OpSubscriptionNoticesSet asks for (or stops) the notice frames of
	// one of the connection's subscriptions.
	OpSubscriptionNoticesSet Operation = "subscription.notices.set"
	// OpConnectionContextWindowSet declares the context window of a
	// connection's models.
	OpConnectionContextWindowSet Operation = "connection.context-window.set"
)

// SubscriptionNoticesSetInput is the input of subscription.notices.set;
// its result is the same object.
type SubscriptionNoticesSetInput struct {
	SubscriptionID string `json:"subscriptionId"`
	Enabled        bool   `json:"enabled"`
}

// ConnectionContextWindowSetInput is the input of
// connection.context-window.set: the context window in tokens of the
// connection's models where model discovery did not describe one. Its
// result is that of connection.catalog.update (never
// invalid_default_target).
type ConnectionContextWindowSetInput struct {
	Expected      ConnectionVersionBasis `json:"expected"`
	ContextWindow int64                  `json:"contextWindow"`
}

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
	// NoticeModelRetry: a model request failed and is retried: Attempt
	// of MaxAttempts starts in DelayMs; Message says what failed.
	NoticeModelRetry = "model_retry"
	// NoticeModelFailed: the turn's model request failed for good;
	// Message says what happened (the turn's terminal snapshot follows).
	NoticeModelFailed = "model_failed"
)

// MaxNoticeAttempts bounds the attempt numbers of a model_retry notice.
const MaxNoticeAttempts = 1000

// SessionNoticeMessageMaxBytes bounds a notice's message.
const SessionNoticeMessageMaxBytes = 1024

// SessionNotice is one notice about a session. TurnID names the turn it
// happened in (empty: on demand). BeforeTokens and AfterTokens are those of
// a compaction (0 otherwise); Attempt, MaxAttempts and DelayMs are sent
// with model_retry only.
type SessionNotice struct {
	Kind         string `json:"kind"`
	TurnID       string `json:"turnId,omitempty"`
	BeforeTokens int64  `json:"beforeTokens"`
	AfterTokens  int64  `json:"afterTokens"`
	Message      string `json:"message"`
	Attempt      int64  `json:"attempt"`
	MaxAttempts  int64  `json:"maxAttempts"`
	DelayMs      int64  `json:"delayMs"`
}

// MarshalJSON encodes the notice with the retry members for model_retry
// only.
func (n SessionNotice) MarshalJSON() ([]byte, error) {
	type common struct {
		Kind         string `json:"kind"`
		TurnID       string `json:"turnId,omitempty"`
		BeforeTokens int64  `json:"beforeTokens"`
		AfterTokens  int64  `json:"afterTokens"`
		Message      string `json:"message"`
	}
	c := common{n.Kind, n.TurnID, n.BeforeTokens, n.AfterTokens, n.Message}
	if n.Kind != NoticeModelRetry {
		return Marshal(c)
	}
	return Marshal(struct {
		common
		Attempt     int64 `json:"attempt"`
		MaxAttempts int64 `json:"maxAttempts"`
		DelayMs     int64 `json:"delayMs"`
	}{c, n.Attempt, n.MaxAttempts, n.DelayMs})
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
	retry := []string{"attempt", "maxAttempts", "delayMs"}
	o := d.Closed(v, path, []string{"kind", "beforeTokens", "afterTokens", "message"}, append([]string{"turnId"}, retry...))
	n := SessionNotice{
		Kind:         o.Enum("kind", NoticeContextCompacted, NoticeContextCompactionFailed, NoticeModelRetry, NoticeModelFailed),
		BeforeTokens: o.Count("beforeTokens"),
		AfterTokens:  o.Count("afterTokens"),
		Message:      o.StringBytes("message", 0, SessionNoticeMessageMaxBytes),
	}
	if o.Has("turnId") {
		n.TurnID = o.EntityID("turnId")
	}
	if n.Kind != NoticeModelRetry {
		for _, k := range retry {
			if o.Has(k) {
				d.Fail(path+"."+k, "is only sent with %s", NoticeModelRetry)
			}
		}
		return n
	}
	n.Attempt = o.SafeInt("attempt", 2, MaxNoticeAttempts)
	n.MaxAttempts = o.SafeInt("maxAttempts", n.Attempt, MaxNoticeAttempts)
	n.DelayMs = o.Count("delayMs")
	return n
}

func decodeSubscriptionNoticesSet(path string) Codec {
	return func(d *D, v Value) any {
		o := d.Exact(v, path, "subscriptionId", "enabled")
		return SubscriptionNoticesSetInput{SubscriptionID: o.ID("subscriptionId"), Enabled: o.Bool("enabled")}
	}
}

func decodeConnectionContextWindowSetInput(d *D, v Value) any {
	o := d.Exact(v, "input", "expected", "contextWindow")
	ev, ep := o.Get("expected")
	return ConnectionContextWindowSetInput{Expected: decodeConnectionVersionBasis(d, ev, ep), ContextWindow: o.PosCount("contextWindow")}
}

func init() {
	DefineExtension(OpSubscriptionNoticesSet, ModeControl, AvailabilityReady,
		sessionErrors(ErrNotFound), decodeSubscriptionNoticesSet("input"), decodeSubscriptionNoticesSet("result"))
	DefineExtension(OpConnectionContextWindowSet, ModeCommand, AvailabilityReady,
		[]ErrorCode{ErrHostNotReady, ErrHostDraining, ErrOperationUnavailable, ErrInvalidRequest, ErrInternalFailure, ErrPersistenceFailed, ErrCommitOutcomeUnknown},
		decodeConnectionContextWindowSetInput, decodeCatalogUpdateResult)
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
