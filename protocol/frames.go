package protocol

import (
	"strconv"
)

// Surface names the kind of client (ClientSurface).
type Surface string

// Client surfaces.
const (
	SurfaceDesktop     Surface = "desktop"
	SurfaceTUI         Surface = "tui"
	SurfaceRun         Surface = "run"
	SurfaceBot         Surface = "bot"
	SurfaceOpenGateway Surface = "open_gateway"
	SurfaceInspect     Surface = "inspect"
)

var surfaces = []string{"desktop", "tui", "run", "bot", "open_gateway", "inspect"}

// HostState is a HostLifecycleState.
type HostState string

// Host lifecycle states.
const (
	StateStarting   HostState = "starting"
	StateContaining HostState = "containing"
	StateRecovering HostState = "recovering"
	StateReady      HostState = "ready"
	StateDraining   HostState = "draining"
)

var hostStates = []string{"starting", "containing", "recovering", "ready", "draining"}

// Replacement advice in an incompatible reply.
const (
	ReplacementBlockedByResidency = "blocked_by_residency"
	ReplacementWaitForIdleExit    = "wait_for_idle_exit"
)

// Frame kinds.
const (
	KindHello                  = "hello"
	KindAccepted               = "accepted"
	KindIncompatible           = "incompatible"
	KindDraining               = "draining"
	KindSubscriptionProjection = "subscription.session_projection"
	KindSubscriptionDelta      = "subscription.session_delta"
	KindSubscriptionEvent      = "subscription.session_event"
	KindSubscriptionClosed     = "subscription.closed"
)

// Hello is the client's first frame.
type Hello struct {
	Kind             string  `json:"kind"`
	ClientInstanceID string  `json:"clientInstanceId"`
	Surface          Surface `json:"surface"`
	ProtocolMin      int64   `json:"protocolMin"`
	ProtocolMax      int64   `json:"protocolMax"`
}

// Accepted is the host's reply to an admitted hello.
type Accepted struct {
	Kind             string    `json:"kind"`
	HostEpoch        string    `json:"hostEpoch"`
	ConnectionID     string    `json:"connectionId"`
	SelectedProtocol int64     `json:"selectedProtocol"`
	State            HostState `json:"state"`
}

// Incompatible is the host's reply when no protocol version is shared.
type Incompatible struct {
	Kind        string    `json:"kind"`
	HostEpoch   string    `json:"hostEpoch"`
	ProtocolMin int64     `json:"protocolMin"`
	ProtocolMax int64     `json:"protocolMax"`
	State       HostState `json:"state"`
	Replacement string    `json:"replacement"`
}

// Draining is the host's reply while it shuts down.
type Draining struct {
	Kind      string `json:"kind"`
	HostEpoch string `json:"hostEpoch"`
}

// Request is a decoded request frame; Input holds the operation's typed input.
type Request struct {
	RequestID string
	Operation *OperationSpec
	Input     any
}

// Response is a decoded response frame. Exactly one of Result (when OK) and
// Error is meaningful.
type Response struct {
	RequestID string
	Operation Operation
	OK        bool
	Result    any
	Error     *OpError
}

// ProtocolRange is an inclusive range of protocol versions.
type ProtocolRange struct{ Min, Max int64 }

// HostProtocol is the range this host speaks.
var HostProtocol = ProtocolRange{Min: Version, Max: Version}

// Valid reports whether r is a well-formed range.
func (r ProtocolRange) Valid() bool {
	return r.Min >= 0 && r.Max >= r.Min && r.Max <= MaxSafeInteger
}

// Negotiate returns the selected version, or false when there is none.
func Negotiate(client, host ProtocolRange) (int64, bool) {
	sel := min(client.Max, host.Max)
	return sel, sel >= max(client.Min, host.Min)
}

// DecodeClientFrame decodes a client→host frame: a *Hello or a *Request.
func DecodeClientFrame(v Value) (any, error) {
	if v.kind == KindObject {
		if k, ok := v.Get("kind"); ok && k.kind == KindString && k.s == KindHello {
			return decodeHello(v)
		}
	}
	return decodeRequest(v)
}

func decodeHello(v Value) (*Hello, error) {
	d := &D{}
	o := d.Open(v, "hello")
	h := &Hello{Kind: KindHello}
	h.ClientInstanceID = o.ID("clientInstanceId")
	h.Surface = Surface(o.Enum("surface", surfaces...))
	h.ProtocolMin = o.Count("protocolMin")
	h.ProtocolMax = o.Count("protocolMax")
	if d.err == nil && h.ProtocolMax < h.ProtocolMin {
		d.Fail("hello", "protocolMax < protocolMin")
	}
	if d.err != nil {
		return nil, d.err
	}
	return h, nil
}

func decodeRequest(v Value) (*Request, error) {
	d := &D{}
	o := d.Exact(v, "request", "requestId", "operation", "input")
	id := o.ID("requestId")
	opName := o.String("operation", 1, 256)
	if d.err != nil {
		return nil, d.err
	}
	spec, ok := Lookup(opName)
	if !ok {
		return nil, &ProtocolError{Code: CodeInvalidFrame, Message: "unknown operation " + strconv.Quote(opName)}
	}
	in, _ := v.Get("input")
	input, err := spec.DecodeInput(in)
	if err != nil {
		return nil, err
	}
	return &Request{RequestID: id, Operation: spec, Input: input}, nil
}

// PushDecoders decode subscription push frames by kind; the continuity shape
// file registers them.
var pushDecoders = map[string]Codec{}

// DecodeHostFrame decodes a host→client frame: *Accepted, *Incompatible,
// *Draining, a subscription push frame, or *Response.
func DecodeHostFrame(v Value) (any, error) {
	if v.kind == KindObject {
		if k, ok := v.Get("kind"); ok && k.kind == KindString {
			switch k.s {
			case KindAccepted, KindIncompatible, KindDraining:
				return decodeHandshake(v, k.s)
			}
			if c, ok := pushDecoders[k.s]; ok {
				return runCodec(c, v, k.s)
			}
		}
	}
	return decodeResponse(v)
}

func decodeHandshake(v Value, kind string) (any, error) {
	d := &D{}
	o := d.Open(v, kind)
	var out any
	switch kind {
	case KindAccepted:
		a := &Accepted{Kind: kind}
		a.HostEpoch = o.ID("hostEpoch")
		a.ConnectionID = o.ID("connectionId")
		a.SelectedProtocol = o.Count("selectedProtocol")
		a.State = HostState(o.Enum("state", "starting", "containing", "recovering", "ready"))
		out = a
	case KindIncompatible:
		a := &Incompatible{Kind: kind}
		a.HostEpoch = o.ID("hostEpoch")
		a.ProtocolMin = o.Count("protocolMin")
		a.ProtocolMax = o.Count("protocolMax")
		a.State = HostState(o.Enum("state", hostStates...))
		a.Replacement = o.Enum("replacement", ReplacementBlockedByResidency, ReplacementWaitForIdleExit)
		if d.err == nil && a.ProtocolMax < a.ProtocolMin {
			d.Fail(kind, "protocolMax < protocolMin")
		}
		out = a
	default:
		out = &Draining{Kind: kind, HostEpoch: o.ID("hostEpoch")}
	}
	if d.err != nil {
		return nil, d.err
	}
	return out, nil
}

func decodeResponse(v Value) (*Response, error) {
	d := &D{}
	o := d.Open(v, "response")
	okv, _ := o.Get("ok")
	ok := d.Bool(okv, "response.ok")
	if d.err != nil {
		return nil, d.err
	}
	if ok {
		o = d.Exact(v, "response", "requestId", "operation", "ok", "result")
	} else {
		o = d.Exact(v, "response", "requestId", "operation", "ok", "error")
	}
	r := &Response{OK: ok}
	r.RequestID = o.ID("requestId")
	opName := o.String("operation", 1, 256)
	if d.err != nil {
		return nil, d.err
	}
	spec, found := Lookup(opName)
	if !found {
		return nil, &ProtocolError{Code: CodeInvalidFrame, Message: "unknown operation " + strconv.Quote(opName)}
	}
	r.Operation = spec.Key
	if ok {
		res, _ := v.Get("result")
		out, err := spec.DecodeOutput(res)
		if err != nil {
			return nil, err
		}
		r.Result = out
		return r, nil
	}
	e := o.Object("error", []string{"code", "message"}, nil)
	code := ErrorCode(e.String("code", 1, 64))
	msg := e.String("message", 1, 1024)
	if d.err == nil && !spec.Declares(code) {
		d.Fail("response.error.code", "%q is not declared by %s", code, spec.Key)
	}
	if d.err != nil {
		return nil, d.err
	}
	r.Error = &OpError{Code: code, Message: msg}
	return r, nil
}

// AppendRequest appends a request frame (with LF). input is encoded as is.
func AppendRequest(b []byte, requestID string, op Operation, input any) ([]byte, error) {
	return AppendFrame(b, requestFrame{RequestID: requestID, Operation: op, Input: input})
}

type requestFrame struct {
	RequestID string    `json:"requestId"`
	Operation Operation `json:"operation"`
	Input     any       `json:"input"`
}

// AppendSuccess appends a success response frame (with LF) whose result is
// already encoded as JSON.
func AppendSuccess(b []byte, requestID string, op Operation, result []byte) ([]byte, error) {
	if b == nil {
		b = make([]byte, 0, 48+len(requestID)+len(op)+len(result))
	}
	start := len(b)
	b = AppendSuccessHeader(b, requestID, op)
	b = append(b, result...)
	return FinishFrame(b, start)
}

// AppendSuccessHeader appends a success response up to its result; append
// the result, then call FinishFrame.
func AppendSuccessHeader(b []byte, requestID string, op Operation) []byte {
	b = append(b, `{"requestId":`...)
	b = appendString(b, requestID)
	b = append(b, `,"operation":`...)
	if s, ok := table[op]; ok {
		b = append(b, s.quotedKey...)
	} else {
		b = appendString(b, string(op))
	}
	return append(b, `,"ok":true,"result":`...)
}

// FinishFrame closes a frame begun at start by AppendSuccessHeader and
// checks its size.
func FinishFrame(b []byte, start int) ([]byte, error) {
	b = append(b, '}', '\n')
	if len(b)-start > MaxFrameBytes {
		return b[:start], &ProtocolError{Code: CodeFrameTooLarge, Message: "frame exceeds 65536 bytes"}
	}
	return b, nil
}

// AppendFailure appends a failure response frame (with LF).
func AppendFailure(b []byte, requestID string, op Operation, e *OpError) ([]byte, error) {
	start := len(b)
	b = append(b, `{"requestId":`...)
	b = appendString(b, requestID)
	b = append(b, `,"operation":`...)
	b = appendString(b, string(op))
	b = append(b, `,"ok":false,"error":{"code":`...)
	b = appendString(b, string(e.Code))
	b = append(b, `,"message":`...)
	b = appendString(b, e.Message)
	b = append(b, '}', '}', '\n')
	if len(b)-start > MaxFrameBytes {
		return b[:start], &ProtocolError{Code: CodeFrameTooLarge, Message: "frame exceeds 65536 bytes"}
	}
	return b, nil
}

// MarshalJSON encodes a response frame.
func (r *Response) MarshalJSON() ([]byte, error) {
	var b []byte
	var err error
	if r.OK {
		res, merr := Marshal(r.Result)
		if merr != nil {
			return nil, merr
		}
		b, err = AppendSuccess(nil, r.RequestID, r.Operation, res)
	} else {
		b, err = AppendFailure(nil, r.RequestID, r.Operation, r.Error)
	}
	if err != nil {
		return nil, err
	}
	return b[:len(b)-1], nil
}
