package protocol

import (
	"bytes"
	"unicode/utf8"
)

// Protocol constants: the protocol version, the frame bound (docs/protocol.md,
// Frames) and the schema version of registration.json.
const (
	Version                    = 0
	MaxFrameBytes              = 64 * 1024 // one frame including its LF
	RegistrationSchemaVersion  = 1
	SubscriptionFrameMaxBytes  = MaxFrameBytes - 1
	maxFrameTextWithoutNewline = MaxFrameBytes - 1
)

var bom = []byte{0xef, 0xbb, 0xbf}

// DecodeFrameText turns the bytes of one frame (without its LF) into a JSON
// value, applying the frame checks of docs/protocol.md (Frames) in order:
// empty frame, size, one trailing CR dropped, strict UTF-8 with one leading
// BOM dropped, then JSON.
func DecodeFrameText(frame []byte) (Value, error) {
	text, err := frameJSONText(frame)
	if err != nil {
		return Value{}, err
	}
	v, err := Parse(text)
	if err != nil {
		return Value{}, &ProtocolError{Code: CodeInvalidJSON, Message: "frame is not valid JSON"}
	}
	return v, nil
}

// frameJSONText applies the empty, size, CR, UTF-8 and BOM rules and returns
// the JSON text of a frame.
func frameJSONText(frame []byte) ([]byte, error) {
	if len(frame) == 0 {
		return nil, &ProtocolError{Code: CodeInvalidFrame, Message: "frame is empty"}
	}
	if len(frame)+1 > MaxFrameBytes {
		return nil, &ProtocolError{Code: CodeFrameTooLarge, Message: "frame exceeds 65536 bytes"}
	}
	if frame[len(frame)-1] == '\r' {
		frame = frame[:len(frame)-1]
	}
	if !utf8.Valid(frame) {
		return nil, &ProtocolError{Code: CodeInvalidUTF8, Message: "frame is not valid UTF-8"}
	}
	return bytes.TrimPrefix(frame, bom), nil
}

// Splitter cuts a byte stream into frames. It never holds more than one
// frame's worth of pending bytes: an unterminated run longer than the limit
// fails as soon as it is seen.
type Splitter struct {
	pending []byte
	failed  error
}

// Next consumes bytes from data and returns the next complete frame text
// (without LF) and how many bytes of data were consumed. A nil frame with a
// nil error means data was consumed entirely into the pending buffer. The
// returned frame aliases data or the splitter's buffer and is valid until the
// next call.
func (s *Splitter) Next(data []byte) (frame []byte, consumed int, err error) {
	if s.failed != nil {
		return nil, 0, s.failed
	}
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		if len(s.pending)+len(data) > MaxFrameBytes {
			return nil, 0, s.fail()
		}
		s.pending = append(s.pending, data...)
		return nil, len(data), nil
	}
	if len(s.pending)+i+1 > MaxFrameBytes {
		return nil, 0, s.fail()
	}
	if len(s.pending) == 0 {
		return data[:i], i + 1, nil
	}
	s.pending = append(s.pending, data[:i]...)
	frame = s.pending
	s.pending = s.pending[:0:0]
	return frame, i + 1, nil
}

func (s *Splitter) fail() error {
	s.failed = &ProtocolError{Code: CodeFrameTooLarge, Message: "frame exceeds 65536 bytes"}
	s.pending = nil
	return s.failed
}

// Pending reports whether a partial frame is buffered.
func (s *Splitter) Pending() bool { return len(s.pending) > 0 }

// ErrPartialFrame is returned at end of stream after a partial frame.
var ErrPartialFrame = &ProtocolError{Code: CodeInvalidFrame, Message: "stream ended with a partial frame"}

// AppendFrame appends the encoding of v plus LF, refusing frames larger
// than MaxFrameBytes.
func AppendFrame(b []byte, v any) ([]byte, error) {
	start := len(b)
	b, err := AppendMarshal(b, v)
	if err != nil {
		return b[:start], &ProtocolError{Code: CodeInvalidFrame, Message: "cannot encode frame: " + err.Error()}
	}
	b = append(b, '\n')
	if len(b)-start > MaxFrameBytes {
		return b[:start], &ProtocolError{Code: CodeFrameTooLarge, Message: "frame exceeds 65536 bytes"}
	}
	return b, nil
}

// EncodeFrame returns the encoding of v plus LF.
func EncodeFrame(v any) ([]byte, error) { return AppendFrame(nil, v) }
