package protocol

import (
	"bytes"
	"testing"
)

var frameSeeds = []string{
	`{"kind":"hello","clientInstanceId":"c","surface":"tui","protocolMin":0,"protocolMax":0}`,
	`{"requestId":"r","operation":"host.status","input":{}}`,
	`{"requestId":"r","operation":"turn.query","input":{"sessionId":"s","turnId":"t"}}`,
	`{"requestId":"r","operation":"turn.start","input":{"sessionId":"s","turnId":"t","content":{"text":"hi","displayText":"hi"}}}`,
	`{"requestId":"r","operation":"subscription.open","input":{"sessionId":"s"}}`,
	`{"requestId":"r","operation":"task.ledger.query","input":{"kind":"list_start","sessionId":"s"}}`,
	`{"requestId":"r","operation":"runtime.policy.query","input":{}}`,
	`{"kind":"accepted","hostEpoch":"e","connectionId":"c","selectedProtocol":0,"state":"ready"}`,
	`{"requestId":"r","operation":"host.status","ok":true,"result":{"hostEpoch":"e","state":"ready","connections":1,"activeOperations":1,"activeResidencies":0}}`,
	"\xef\xbb\xbf{}\r", "\"\\ud800\"", "[1e400,-0,1.0]", "{\"a\":1,\"a\":2}",
}

// FuzzFrameDecoder feeds arbitrary byte streams through the splitter and the
// frame decoders: nothing may panic, and every value that decodes must
// re-encode to JSON that parses to the same encoding.
func FuzzFrameDecoder(f *testing.F) {
	for _, s := range frameSeeds {
		f.Add([]byte(s+"\n"), uint8(3))
	}
	f.Add([]byte("{}\n\n{\n"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		n := int(chunk) + 1
		var s Splitter
		rest := data
		for len(rest) > 0 {
			c := rest[:min(n, len(rest))]
			rest = rest[len(c):]
			for len(c) > 0 {
				frame, used, err := s.Next(c)
				if err != nil {
					return
				}
				c = c[used:]
				if frame == nil {
					continue
				}
				if len(frame)+1 > MaxFrameBytes {
					t.Fatalf("splitter returned a %d-byte frame", len(frame))
				}
				v, err := DecodeFrameText(frame)
				if err != nil {
					continue
				}
				enc, err := Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				v2, err := Parse(enc)
				if err != nil {
					t.Fatalf("re-encoded JSON does not parse: %s", enc)
				}
				enc2, _ := Marshal(v2)
				if !bytes.Equal(enc, enc2) {
					t.Fatalf("encoding is not stable: %s vs %s", enc, enc2)
				}
				_, _ = DecodeClientFrame(v)
				_, _ = DecodeHostFrame(v)
			}
		}
	})
}

// FuzzRequestDecoder checks that a decoded request re-encodes to a request
// that decodes to the same operation, id and input.
func FuzzRequestDecoder(f *testing.F) {
	for _, s := range frameSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := DecodeFrameText(data)
		if err != nil {
			return
		}
		fr, err := DecodeClientFrame(v)
		if err != nil {
			return
		}
		req, ok := fr.(*Request)
		if !ok {
			return
		}
		b, err := AppendRequest(nil, req.RequestID, req.Operation.Key, req.Input)
		if err != nil {
			if frameCode(err) == CodeFrameTooLarge {
				return // normalisation never grows a frame past the bound in practice
			}
			t.Fatalf("re-encoding %s: %v", req.Operation.Key, err)
		}
		v2, err := DecodeFrameText(b[:len(b)-1])
		if err != nil {
			t.Fatalf("re-encoded request is not a frame: %v", err)
		}
		fr2, err := DecodeClientFrame(v2)
		if err != nil {
			t.Fatalf("re-encoded %s does not decode: %v\n%s", req.Operation.Key, err, b)
		}
		req2 := fr2.(*Request)
		in1, _ := Marshal(req.Input)
		in2, _ := Marshal(req2.Input)
		if req2.RequestID != req.RequestID || req2.Operation != req.Operation || !bytes.Equal(in1, in2) {
			t.Fatalf("round trip changed the request: %s vs %s", in1, in2)
		}
	})
}
