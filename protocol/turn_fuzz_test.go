package protocol

import (
	"bytes"
	"reflect"
	"testing"
)

// shFuzzCodec runs codec c on v without the panic guard of runCodec, so a
// decoder panic fails the fuzz target. When decoding succeeds, the encoding
// of the result must decode again to an equal value with identical bytes.
func shFuzzCodec(t *testing.T, name string, c Codec, v Value) {
	t.Helper()
	d := &D{}
	out := c(d, v)
	if d.Failed() {
		return
	}
	b, err := Marshal(out)
	if err != nil {
		t.Fatalf("%s: decoded value does not encode: %v", name, err)
	}
	v2, err := Parse(b)
	if err != nil {
		t.Fatalf("%s: encoding is not JSON: %v\n%s", name, err, b)
	}
	d2 := &D{}
	out2 := c(d2, v2)
	if d2.Failed() {
		t.Fatalf("%s: encoding does not decode: %v\n%s", name, d2.Err(), b)
	}
	if !reflect.DeepEqual(out, out2) {
		t.Fatalf("%s: re-decoded value differs\n%#v\n%#v", name, out, out2)
	}
	b2, err := Marshal(out2)
	if err != nil || !bytes.Equal(b, b2) {
		t.Fatalf("%s: encoding is not stable (%v)\n%s\n%s", name, err, b, b2)
	}
}

// shFuzzOps feeds data through both codecs of every operation in ops.
func shFuzzOps(t *testing.T, data []byte, ops ...Operation) {
	v, err := Parse(data)
	if err != nil {
		return
	}
	for _, op := range ops {
		spec, _ := Lookup(string(op))
		shFuzzCodec(t, string(op)+".input", spec.input, v)
		shFuzzCodec(t, string(op)+".result", spec.output, v)
	}
}

func shSeed(f *testing.F, cases []shCase) {
	for _, c := range cases {
		f.Add([]byte(c.in))
	}
}

func FuzzTurn(f *testing.F) {
	shSeed(f, turnValidCases())
	f.Fuzz(func(t *testing.T, data []byte) {
		shFuzzOps(t, data, OpTurnStart, OpTurnQuery, OpTurnStop)
	})
}
