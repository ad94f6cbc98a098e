package protocol

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzContinuity(f *testing.F) {
	shSeed(f, continuityValidCases(f))
	f.Fuzz(func(t *testing.T, data []byte) {
		shFuzzOps(t, data, OpSubscriptionOpen, OpSubscriptionClose)
		v, err := Parse(data)
		if err != nil {
			return
		}
		for _, kind := range []string{KindSubscriptionProjection, KindSubscriptionDelta, KindSubscriptionEvent, KindSubscriptionClosed} {
			shFuzzCodec(t, kind, pushDecoders[kind], v)
		}
	})
}

// FuzzSplitDelta checks the split rule on arbitrary text: chunks rebuild the
// text, stay within the byte bound, never split a character, and a frame
// carrying one fits SubscriptionFrameMaxBytes and decodes.
func FuzzSplitDelta(f *testing.F) {
	f.Add("", 1)
	f.Add("hello", 1)
	f.Add("\x01\x02", 7000)
	f.Add("\u20ac\"", 5000)
	f.Add("\xff\U0001F600", 3000)
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 1 || n > 10000 || len(s)*n > 1<<20 {
			n = 1
		}
		text := strings.Repeat(s, n)
		chunks := SplitDelta(text)
		if strings.Join(chunks, "") != text {
			t.Fatal("chunks do not rebuild the text")
		}
		id := strings.Repeat("\x01", 128)
		for _, c := range chunks {
			if c == "" || len(c) > SessionLiveDeltaMaxBytes {
				t.Fatalf("chunk of %d bytes", len(c))
			}
			if utf8.ValidString(text) && !utf8.ValidString(c) {
				t.Fatal("chunk splits a character")
			}
			f := DeltaFrame{HostEpoch: id, SubscriptionID: id, Sequence: MaxSafeInteger, SessionID: "s",
				Delta: SessionAssistantDelta{Kind: DeltaText, TurnID: "t", RunID: "r", MessageID: "m", Text: c}}
			b, err := Marshal(f)
			if err != nil || len(b) > SubscriptionFrameMaxBytes {
				t.Fatalf("frame of %d bytes (%v)", len(b), err)
			}
			v, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := DecodeHostFrame(v); err != nil {
				t.Fatalf("frame does not decode: %v", err)
			}
		}
	})
}
