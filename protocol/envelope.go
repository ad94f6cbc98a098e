package protocol

// decodeRequestFast decodes the common request frame — one object with the
// keys requestId, operation and input — without building a Value for the
// envelope. ok is false when the frame is anything else (a hello, an extra
// or missing key, a syntax error); the caller then takes the general path,
// which produces the precise error.
func decodeRequestFast(text []byte, req *Request) (ok bool, err error) {
	p := new(parser)
	p.data, p.pos = text, 0
	p.skipSpace()
	if !p.consume('{') {
		return false, nil
	}
	var id string
	var input Value
	var seen uint8
	var spec *OperationSpec
	for {
		p.skipSpace()
		key, plain := p.rawString()
		p.skipSpace()
		if !plain || !p.consume(':') {
			return false, nil
		}
		p.skipSpace()
		switch string(key) {
		case "requestId":
			raw, plain := p.rawString()
			if !plain {
				return false, nil
			}
			id, seen = string(raw), seen|1
		case "operation":
			raw, plain := p.rawString()
			if !plain {
				return false, nil
			}
			spec, seen = lookupBytes(raw), seen|2
		case "input":
			v, verr := p.value(1)
			if verr != nil {
				return false, nil
			}
			input, seen = v, seen|4
		default:
			return false, nil
		}
		p.skipSpace()
		if p.consume(',') {
			continue
		}
		if !p.consume('}') {
			return false, nil
		}
		break
	}
	p.skipSpace()
	if p.pos != len(p.data) || seen != 7 {
		return false, nil
	}
	if n := UTF16Len(id); n < 1 || n > 128 {
		return true, &ProtocolError{Code: CodeInvalidFrame, Message: "request.requestId: invalid id"}
	}
	if spec == nil {
		return true, &ProtocolError{Code: CodeInvalidFrame, Message: "unknown operation"}
	}
	var in any
	if spec.emptyInput && input.kind == KindObject && len(input.obj) == 0 {
		in = spec.zeroInput // an exact {} input needs no codec run
	} else if in, err = spec.DecodeInput(input); err != nil {
		return true, err
	}
	*req = Request{RequestID: id, Operation: spec, Input: in}
	return true, nil
}

// rawString consumes a string literal without escapes and returns its
// bytes; plain is false (and nothing is consumed) for anything else.
func (p *parser) rawString() (raw []byte, plain bool) {
	d := p.data
	if p.pos >= len(d) || d[p.pos] != '"' {
		return nil, false
	}
	for i := p.pos + 1; i < len(d); i++ {
		switch c := d[i]; {
		case c == '"':
			raw = d[p.pos+1 : i]
			p.pos = i + 1
			return raw, true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// lookupBytes finds an operation by name without allocating.
func lookupBytes(name []byte) *OperationSpec {
	return table[Operation(name)]
}

func (p *parser) consume(c byte) bool {
	if p.pos < len(p.data) && p.data[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

// DecodeClientFrameText decodes one client→host frame from its text
// (without LF), applying every framing rule of DecodeFrameText: a *Hello or a
// *Request. Request frames take a fast path that builds no envelope value.
func DecodeClientFrameText(frame []byte) (any, error) {
	return DecodeClientFrameTextTo(frame, nil)
}

// DecodeClientFrameTextTo is DecodeClientFrameText decoding a request into
// req, when req is not nil, instead of a new Request: it then returns req
// for a request frame. A connection's reader decodes every request into
// one Request of its own, so that reading a request allocates nothing
// beyond its requestId.
func DecodeClientFrameTextTo(frame []byte, req *Request) (any, error) {
	text, err := frameJSONText(frame)
	if err != nil {
		return nil, err
	}
	if req == nil {
		req = new(Request)
	}
	if ok, err := decodeRequestFast(text, req); ok {
		if err != nil {
			return nil, err
		}
		return req, nil
	}
	v, err := Parse(text)
	if err != nil {
		return nil, &ProtocolError{Code: CodeInvalidJSON, Message: "frame is not valid JSON"}
	}
	f, err := DecodeClientFrame(v)
	if r, ok := f.(*Request); ok && err == nil {
		*req = *r
		return req, nil
	}
	return f, err
}
