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
	// NoticeTurnUsage: a model step of the turn ended (Final false), or
	// the turn did (Final true): the turn's token usage so far and the
	// stop reason of that step or of the turn.
	NoticeTurnUsage = "turn_usage"
)

// Stop reasons of a turn_usage notice: a step's (Final false) is one of
// end_turn, tool_use, max_tokens, content_filter, other; a turn's (Final
// true) is one of end_turn, max_tokens, content_filter, cancelled, failed,
// other.
const (
	StopReasonEndTurn       = "end_turn"
	StopReasonToolUse       = "tool_use"
	StopReasonMaxTokens     = "max_tokens"
	StopReasonContentFilter = "content_filter"
	StopReasonCancelled     = "cancelled"
	StopReasonFailed        = "failed"
	StopReasonOther         = "other"
)

// TokenUsage is the token usage of a turn: InputTokens counts every prompt
// token of its model requests (cache reads included, so CacheReadTokens <=
// InputTokens), OutputTokens every generated token (ReasoningTokens, the
// part spent reasoning, <= OutputTokens).
type TokenUsage struct {
	InputTokens     int64 `json:"inputTokens"`
	OutputTokens    int64 `json:"outputTokens"`
	CacheReadTokens int64 `json:"cacheReadTokens"`
	ReasoningTokens int64 `json:"reasoningTokens"`
}

// MaxNoticeAttempts bounds the attempt numbers of a model_retry notice.
const MaxNoticeAttempts = 1000

// SessionNoticeMessageMaxBytes bounds a notice's message.
const SessionNoticeMessageMaxBytes = 1024

// SessionNotice is one notice about a session. TurnID names the turn it
// happened in (empty: on demand). BeforeTokens and AfterTokens are those of
// a compaction (0 otherwise); Attempt, MaxAttempts and DelayMs are sent
// with model_retry only; StopReason, Final, Usage (when HasUsage),
// ContextTokens and ContextWindow (when positive) with turn_usage only.
type SessionNotice struct {
	Kind         string `json:"kind"`
	TurnID       string `json:"turnId,omitempty"`
	BeforeTokens int64  `json:"beforeTokens"`
	AfterTokens  int64  `json:"afterTokens"`
	Message      string `json:"message"`
	Attempt      int64  `json:"attempt"`
	MaxAttempts  int64  `json:"maxAttempts"`
	DelayMs      int64  `json:"delayMs"`

	StopReason string `json:"stopReason"`
	Final      bool   `json:"final"`
	// HasUsage is false when a model step of the turn reported no usage
	// (the total is then unknown) or no step ended.
	HasUsage bool       `json:"-"`
	Usage    TokenUsage `json:"usage"`
	// ContextTokens is what the conversation holds after the last step
	// (its input and output tokens); ContextWindow the model's window.
	ContextTokens int64 `json:"contextTokens,omitempty"`
	ContextWindow int64 `json:"contextWindow,omitempty"`
}

// MarshalJSON encodes the notice with the retry members for model_retry
// only and the usage members for turn_usage only.
func (n SessionNotice) MarshalJSON() ([]byte, error) {
	type common struct {
		Kind         string `json:"kind"`
		TurnID       string `json:"turnId,omitempty"`
		BeforeTokens int64  `json:"beforeTokens"`
		AfterTokens  int64  `json:"afterTokens"`
		Message      string `json:"message"`
	}
	c := common{n.Kind, n.TurnID, n.BeforeTokens, n.AfterTokens, n.Message}
	if n.Kind == NoticeTurnUsage {
		var u *TokenUsage
		if n.HasUsage {
			u = &n.Usage
		}
		return Marshal(struct {
			common
			StopReason    string      `json:"stopReason"`
			Final         bool        `json:"final"`
			Usage         *TokenUsage `json:"usage,omitempty"`
			ContextTokens int64       `json:"contextTokens,omitempty"`
			ContextWindow int64       `json:"contextWindow,omitempty"`
		}{c, n.StopReason, n.Final, u, n.ContextTokens, n.ContextWindow})
	}
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

// Members of a notice that belong to one kind.
var (
	retryMembers = []string{"attempt", "maxAttempts", "delayMs"}
	usageMembers = []string{"stopReason", "final", "usage", "contextTokens", "contextWindow"}
)

func decodeSessionNotice(d *D, v Value, path string) SessionNotice {
	optional := append(append([]string{"turnId"}, retryMembers...), usageMembers...)
	o := d.Closed(v, path, []string{"kind", "beforeTokens", "afterTokens", "message"}, optional)
	n := SessionNotice{
		Kind:         o.Enum("kind", NoticeContextCompacted, NoticeContextCompactionFailed, NoticeModelRetry, NoticeModelFailed, NoticeTurnUsage),
		BeforeTokens: o.Count("beforeTokens"),
		AfterTokens:  o.Count("afterTokens"),
		Message:      o.StringBytes("message", 0, SessionNoticeMessageMaxBytes),
	}
	if o.Has("turnId") {
		n.TurnID = o.EntityID("turnId")
	}
	onlyWith := func(kind string, members []string) {
		if n.Kind == kind {
			return
		}
		for _, k := range members {
			if o.Has(k) {
				d.Fail(path+"."+k, "is only sent with %s", kind)
			}
		}
	}
	onlyWith(NoticeModelRetry, retryMembers)
	onlyWith(NoticeTurnUsage, usageMembers)
	switch n.Kind {
	case NoticeTurnUsage:
		decodeTurnUsage(d, o, &n)
		return n
	case NoticeModelRetry:
	default:
		return n
	}
	n.Attempt = o.SafeInt("attempt", 2, MaxNoticeAttempts)
	n.MaxAttempts = o.SafeInt("maxAttempts", n.Attempt, MaxNoticeAttempts)
	n.DelayMs = o.Count("delayMs")
	return n
}

// decodeTurnUsage decodes the members of a turn_usage notice: a step's
// stop reason never says how the turn ended, a turn's never tool_use.
func decodeTurnUsage(d *D, o Obj, n *SessionNotice) {
	if n.BeforeTokens != 0 || n.AfterTokens != 0 {
		d.Fail(o.Path()+".beforeTokens", "is 0 with %s", NoticeTurnUsage)
	}
	n.Final = o.Bool("final")
	if n.Final {
		n.StopReason = o.Enum("stopReason", StopReasonEndTurn, StopReasonMaxTokens, StopReasonContentFilter,
			StopReasonCancelled, StopReasonFailed, StopReasonOther)
	} else {
		n.StopReason = o.Enum("stopReason", StopReasonEndTurn, StopReasonToolUse, StopReasonMaxTokens,
			StopReasonContentFilter, StopReasonOther)
	}
	if o.Has("usage") {
		u := o.Object("usage", []string{"inputTokens", "outputTokens", "cacheReadTokens", "reasoningTokens"}, nil)
		n.HasUsage = true
		n.Usage = TokenUsage{InputTokens: u.Count("inputTokens"), OutputTokens: u.Count("outputTokens"),
			CacheReadTokens: u.Count("cacheReadTokens"), ReasoningTokens: u.Count("reasoningTokens")}
		if n.Usage.CacheReadTokens > n.Usage.InputTokens {
			d.Fail(u.Path()+".cacheReadTokens", "exceeds inputTokens")
		}
		if n.Usage.ReasoningTokens > n.Usage.OutputTokens {
			d.Fail(u.Path()+".reasoningTokens", "exceeds outputTokens")
		}
	}
	if o.Has("contextTokens") {
		n.ContextTokens = o.PosCount("contextTokens")
	}
	if o.Has("contextWindow") {
		n.ContextWindow = o.PosCount("contextWindow")
	}
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
