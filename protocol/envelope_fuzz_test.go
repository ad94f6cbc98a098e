package protocol

import (
	"bytes"
	"testing"
)

// FuzzRequestFastPath checks that the fast request decode a connection's
// reader uses (DecodeClientFrameText) agrees with the general one (parse,
// then DecodeClientFrame): the same frames are refused, and an accepted
// request has the same id, operation and input.
func FuzzRequestFastPath(f *testing.F) {
	for _, s := range frameSeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		`{"requestId":"r","operation":"host.status","input":{ }}`,
		`{"requestId":"r","operation":"host.status","input":{"a":1}}`,
		`{"requestId":"r","operation":"host.status","input":{}} `,
		`{"input":{},"operation":"host.status","requestId":"r"}`,
		`{"requestId":"r","operation":"turn.query","input":{}}`,
		`{"requestId":"r","operation":"host.statuz","input":{}}`,
		`{"requestId":"r","operation":"","input":{}}`,
		`{"requestId":"","operation":"host.status","input":{}}`,
		`{"requestId":"r","operation":"host.status","input":{}{}}`,
		`{"requestId":"r","operation":"host.status","input":{},"input":{}}`,
		`{"requestId":"r","operation":"subscription.close","input":{"subscriptionId":"s"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, fastErr := DecodeClientFrameText(data)
		var slow any
		v, slowErr := DecodeFrameText(data)
		if slowErr == nil {
			slow, slowErr = DecodeClientFrame(v)
		}
		if (fastErr == nil) != (slowErr == nil) {
			t.Fatalf("fast %v, general %v", fastErr, slowErr)
		}
		if fastErr != nil {
			if frameCode(fastErr) != frameCode(slowErr) {
				t.Fatalf("fast refuses with %v, general with %v", fastErr, slowErr)
			}
			return
		}
		fr, ok1 := fast.(*Request)
		sr, ok2 := slow.(*Request)
		if ok1 != ok2 {
			t.Fatalf("fast %T, general %T", fast, slow)
		}
		if !ok1 {
			return
		}
		in1, err1 := Marshal(fr.Input)
		in2, err2 := Marshal(sr.Input)
		if fr.RequestID != sr.RequestID || fr.Operation != sr.Operation || (err1 == nil) != (err2 == nil) || !bytes.Equal(in1, in2) {
			t.Fatalf("fast %q %s %s, general %q %s %s", fr.RequestID, fr.Operation.Key, in1, sr.RequestID, sr.Operation.Key, in2)
		}
	})
}
