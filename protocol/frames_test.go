package protocol

import (
	"strings"
	"testing"
)

func mustParse(t *testing.T, s string) Value {
	t.Helper()
	v, err := Parse([]byte(s))
	if err != nil {
		t.Fatalf("Parse(%s): %v", s, err)
	}
	return v
}

func TestHelloIsOpen(t *testing.T) {
	f, err := DecodeClientFrame(mustParse(t, `{"kind":"hello","clientInstanceId":"客户端","surface":"tui","protocolMin":0,"protocolMax":3,"extra":true}`))
	if err != nil {
		t.Fatal(err)
	}
	h := f.(*Hello)
	if h.ClientInstanceID != "客户端" || h.Surface != SurfaceTUI || h.ProtocolMax != 3 {
		t.Fatalf("%+v", h)
	}
	for _, bad := range []string{
		`{"kind":"hello","clientInstanceId":"","surface":"tui","protocolMin":0,"protocolMax":0}`,
		`{"kind":"hello","clientInstanceId":"` + strings.Repeat("a", 129) + `","surface":"tui","protocolMin":0,"protocolMax":0}`,
		`{"kind":"hello","clientInstanceId":"c","surface":"web","protocolMin":0,"protocolMax":0}`,
		`{"kind":"hello","clientInstanceId":"c","surface":"tui","protocolMin":2,"protocolMax":1}`,
		`{"kind":"hello","clientInstanceId":"c","surface":"tui","protocolMin":-1,"protocolMax":1}`,
		`{"kind":"hello","clientInstanceId":"c","surface":"tui","protocolMin":0}`,
	} {
		if _, err := DecodeClientFrame(mustParse(t, bad)); frameCode(err) != CodeInvalidFrame {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestRequestIsExact(t *testing.T) {
	f, err := DecodeClientFrame(mustParse(t, `{"requestId":"r","operation":"host.status","input":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := f.(*Request); r.RequestID != "r" || r.Operation.Key != OpHostStatus {
		t.Fatalf("%+v", r)
	}
	for _, bad := range []string{
		`{"requestId":"r","operation":"host.status","input":{},"x":1}`, // extra key
		`{"requestId":"r","operation":"host.status"}`,                  // missing input
		`{"requestId":"","operation":"host.status","input":{}}`,        // invalid id
		`{"requestId":"r","operation":"host.nope","input":{}}`,         // unknown operation
		`{"requestId":"r","operation":"toString","input":{}}`,          // not an own property
		`{"requestId":"r","operation":"host.status","input":{"a":1}}`,  // input not exact
		`{"requestId":"r","operation":"turn.query","input":{"sessionId":"s"}}`,
		`{"requestId":"r","operation":"turn.query","input":{"sessionId":"s s","turnId":"t"}}`,
		`{"kind":"accepted","requestId":"r","operation":"host.status","input":{}}`,
		`[]`, `"hello"`, `null`,
	} {
		if _, err := DecodeClientFrame(mustParse(t, bad)); frameCode(err) != CodeInvalidFrame {
			t.Errorf("accepted %s (%v)", bad, err)
		}
	}
}

func TestNegotiate(t *testing.T) {
	cases := []struct {
		c, h ProtocolRange
		sel  int64
		ok   bool
	}{
		{ProtocolRange{0, 0}, ProtocolRange{0, 0}, 0, true},
		{ProtocolRange{1, 3}, ProtocolRange{2, 4}, 3, true},
		{ProtocolRange{0, 0}, ProtocolRange{1, 1}, 0, false},
		{ProtocolRange{2, 5}, ProtocolRange{0, 1}, 1, false},
	}
	for _, c := range cases {
		sel, ok := Negotiate(c.c, c.h)
		if ok != c.ok || (ok && sel != c.sel) {
			t.Errorf("Negotiate(%v, %v) = %d %v", c.c, c.h, sel, ok)
		}
	}
}

func TestHostFrames(t *testing.T) {
	ok := []string{
		`{"kind":"accepted","hostEpoch":"e","connectionId":"c","selectedProtocol":0,"state":"ready","x":1}`,
		`{"kind":"incompatible","hostEpoch":"e","protocolMin":0,"protocolMax":0,"state":"draining","replacement":"wait_for_idle_exit"}`,
		`{"kind":"draining","hostEpoch":"e"}`,
		`{"requestId":"r","operation":"host.status","ok":true,"result":{"hostEpoch":"e","state":"ready","connections":1,"activeOperations":1,"activeResidencies":0}}`,
		`{"requestId":"r","operation":"turn.query","ok":false,"error":{"code":"not_found","message":"Turn was not admitted"}}`,
	}
	for _, s := range ok {
		if _, err := DecodeHostFrame(mustParse(t, s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	bad := []string{
		`{"kind":"accepted","hostEpoch":"e","connectionId":"c","selectedProtocol":0,"state":"draining"}`,
		`{"kind":"incompatible","hostEpoch":"e","protocolMin":1,"protocolMax":0,"state":"ready","replacement":"wait_for_idle_exit"}`,
		`{"requestId":"r","operation":"host.status","ok":true,"result":{"hostEpoch":"e","state":"ready","connections":1,"activeOperations":1}}`,
		`{"requestId":"r","operation":"host.status","ok":false,"error":{"code":"not_found","message":"m"}}`, // undeclared
		`{"requestId":"r","operation":"turn.query","ok":false,"error":{"code":"not_found","message":""}}`,
		`{"requestId":"r","operation":"turn.query","ok":false,"error":{"code":"not_found","message":"` + strings.Repeat("m", 1025) + `"}}`,
		`{"requestId":"r","operation":"turn.query","ok":"false","error":{"code":"not_found","message":"m"}}`,
		`{"requestId":"r","operation":"turn.query","ok":false,"result":{}}`,
		`{"requestId":"r","operation":"turn.query","ok":true,"result":{},"error":{}}`,
	}
	for _, s := range bad {
		if _, err := DecodeHostFrame(mustParse(t, s)); frameCode(err) != CodeInvalidFrame {
			t.Errorf("accepted %s (%v)", s, err)
		}
	}
}

func TestResponseEncodingRoundTrips(t *testing.T) {
	st := HostStatus{HostEpoch: "e", State: StateReady, Connections: 2, ActiveOperations: 1}
	res, _ := Marshal(st)
	b, err := AppendSuccess(nil, "r\u2028", OpHostStatus, res)
	if err != nil {
		t.Fatal(err)
	}
	want := "{\"requestId\":\"r\u2028\",\"operation\":\"host.status\",\"ok\":true,\"result\":{\"hostEpoch\":\"e\",\"state\":\"ready\",\"connections\":2,\"activeOperations\":1,\"activeResidencies\":0}}\n"
	if string(b) != want {
		t.Fatalf("got %s", b)
	}
	v, _ := DecodeFrameText(b[:len(b)-1])
	f, err := DecodeHostFrame(v)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.(*Response); !r.OK || r.Result.(HostStatus) != st {
		t.Fatalf("%+v", r)
	}
	fb, _ := AppendFailure(nil, "r", OpTurnQuery, NewOpError(ErrNotFound, "Turn was not admitted"))
	if string(fb) != `{"requestId":"r","operation":"turn.query","ok":false,"error":{"code":"not_found","message":"Turn was not admitted"}}`+"\n" {
		t.Fatalf("got %s", fb)
	}
}

// The fast envelope path and the general path must agree on every frame.
func TestClientFrameFastPathAgreesWithGeneralPath(t *testing.T) {
	frames := append([]string{}, frameSeeds...)
	frames = append(frames,
		` { "input" : {} , "operation":"host.status","requestId":"r" } `,
		`{"requestId":"r","operation":"host.status","input":{},"requestId":"s"}`,
		`{"requestId":"r","operation":"host.status","input":{"a":1}}`,
		`{"requestId":"","operation":"host.status","input":{}}`,
		`{"requestId":"\u0072","operation":"host.\u0073tatus","input":{}}`,
		`{"requestId":1,"operation":"host.status","input":{}}`,
		`{"requestId":"r","operation":"nope","input":{}}`,
		`{"requestId":"r","operation":"host.status"}`,
		`{"requestId":"r","operation":"host.status","input":{},}`,
		`{"requestId":"r","operation":"host.status","input":{}} x`,
		`{"kind":"hello","requestId":"r","operation":"host.status","input":{}}`,
	)
	for _, f := range frames {
		fast, ferr := DecodeClientFrameText([]byte(f))
		var slow any
		v, serr := DecodeFrameText([]byte(f))
		if serr == nil {
			slow, serr = DecodeClientFrame(v)
		}
		if (ferr == nil) != (serr == nil) {
			t.Errorf("%s: fast err %v, general err %v", f, ferr, serr)
			continue
		}
		if ferr != nil {
			continue
		}
		fb, _ := Marshal(fast)
		sb, _ := Marshal(slow)
		if r, ok := fast.(*Request); ok {
			s := slow.(*Request)
			fb, _ = AppendRequest(nil, r.RequestID, r.Operation.Key, r.Input)
			sb, _ = AppendRequest(nil, s.RequestID, s.Operation.Key, s.Input)
		}
		if string(fb) != string(sb) {
			t.Errorf("%s: fast %s, general %s", f, fb, sb)
		}
	}
}
