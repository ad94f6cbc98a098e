package protocol

import (
	"strings"
	"testing"
)

var compactSeeds = []string{
	`{"sessionId":"0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90"}`,
	`{"compacted":true,"beforeTokens":9000,"afterTokens":2100}`,
	`{"compacted":false,"beforeTokens":10,"afterTokens":10}`,
	`{"kind":"subscription.session_notice","hostEpoch":"e1","subscriptionId":"s1","sequence":3,"sessionId":"0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90","notice":{"kind":"context_compacted","turnId":"1c6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e91","beforeTokens":9000,"afterTokens":2100,"message":"context compacted (9000 → 2100 tokens)"}}`,
	`{"kind":"context_compaction_failed","beforeTokens":9000,"afterTokens":4000,"message":"x"}`,
	`{"kind":"subscription.session_notice","hostEpoch":"e1","subscriptionId":"s1","sequence":4,"sessionId":"0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90","notice":{"kind":"model_retry","turnId":"1c6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e91","beforeTokens":0,"afterTokens":0,"message":"attempt 2/10 in 1.1 s: HTTP 500 Internal Server Error: <b>down</b>","attempt":2,"maxAttempts":10,"delayMs":1125}}`,
	`{"kind":"subscription.session_notice","hostEpoch":"e1","subscriptionId":"s1","sequence":5,"sessionId":"0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90","notice":{"kind":"model_failed","turnId":"1c6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e91","beforeTokens":0,"afterTokens":0,"message":"connection refused at http://127.0.0.1:9/v1"}}`,
}

// compactValidCases are the shape examples of session.compact, the notice
// frame and the notices member of subscription.open.
func compactValidCases() []shCase {
	return []shCase{
		{name: "compact input", op: OpSessionCompact, in: compactSeeds[0]},
		{name: "compact result", op: OpSessionCompact, out: true, in: compactSeeds[1]},
		{name: "notice frame", in: compactSeeds[3]},
		{name: "notice frame on demand", in: `{"kind":"subscription.session_notice","hostEpoch":"e1","subscriptionId":"s1","sequence":1,"sessionId":"s-1","notice":{"kind":"context_compaction_failed","beforeTokens":9000,"afterTokens":4000,"message":"summary failed"}}`},
		{name: "retry notice", in: compactSeeds[5]},
		{name: "model failure notice", in: compactSeeds[6]},
		{name: "notices on", op: OpSubscriptionNoticesSet, in: `{"subscriptionId":"sub-1","enabled":true}`},
		{name: "notices off", op: OpSubscriptionNoticesSet, out: true, in: `{"subscriptionId":"sub-1","enabled":false}`},
		{name: "context window", op: OpConnectionContextWindowSet,
			in: `{"expected":{"connectionId":"0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90","revision":2},"contextWindow":8000}`},
		{name: "context window committed", op: OpConnectionContextWindowSet, out: true,
			in: `{"kind":"committed","catalogRevision":6,"connection":{"connectionId":"0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90","revision":3}}`},
	}
}

func TestSessionCompactCodecs(t *testing.T) {
	spec, ok := Lookup(string(OpSessionCompact))
	if !ok || spec.Mode != ModeCommand || spec.Availability != AvailabilityReady || !spec.Declares(ErrSessionBusy) || !spec.Declares(ErrNotFound) {
		t.Fatalf("session.compact spec %+v", spec)
	}
	in, err := spec.DecodeInput(mustParse(t, compactSeeds[0]))
	if err != nil || in.(SessionCompactInput).SessionID != "0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90" {
		t.Fatalf("input: %#v %v", in, err)
	}
	for _, bad := range []string{`{}`, `{"sessionId":""}`, `{"sessionId":"0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90","force":true}`} {
		if _, err := spec.DecodeInput(mustParse(t, bad)); err == nil {
			t.Errorf("input %s decoded", bad)
		}
	}
	out, err := spec.DecodeOutput(mustParse(t, compactSeeds[1]))
	if err != nil || out != (SessionCompactResult{Compacted: true, BeforeTokens: 9000, AfterTokens: 2100}) {
		t.Fatalf("result: %#v %v", out, err)
	}
	if _, err := spec.DecodeOutput(mustParse(t, `{"compacted":true,"beforeTokens":-1,"afterTokens":0}`)); err == nil {
		t.Error("negative tokens decoded")
	}
}

func TestNoticeFrameRoundTrip(t *testing.T) {
	f := NoticeFrame{HostEpoch: "e1", SubscriptionID: "s1", Sequence: 3, SessionID: "0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90",
		Notice: SessionNotice{Kind: NoticeContextCompacted, BeforeTokens: 9000, AfterTokens: 2100, Message: "context compacted (9000 → 2100 tokens)"}}
	b, err := Marshal(f)
	if err != nil || !strings.HasPrefix(string(b), `{"kind":"subscription.session_notice",`) {
		t.Fatalf("%s %v", b, err)
	}
	got, err := DecodeHostFrame(mustParse(t, string(b)))
	if err != nil || got.(NoticeFrame) != f {
		t.Fatalf("decoded %#v %v", got, err)
	}
	// An unknown notice kind is refused, like every closed shape.
	bad := strings.Replace(string(b), NoticeContextCompacted, "other", 1)
	if _, err := DecodeHostFrame(mustParse(t, bad)); err == nil {
		t.Error("unknown notice kind decoded")
	}
}

// A model_retry notice round-trips with its attempt, bound and delay; the
// retry members belong to model_retry alone.
func TestRetryNoticeFrame(t *testing.T) {
	f := NoticeFrame{HostEpoch: "e1", SubscriptionID: "s1", Sequence: 4, SessionID: "0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90",
		Notice: SessionNotice{Kind: NoticeModelRetry, TurnID: "1c6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e91", Message: "attempt 2/10 in 0 ms: <x> & y",
			Attempt: 2, MaxAttempts: 10, DelayMs: 0}}
	b, err := Marshal(f)
	if err != nil || !strings.Contains(string(b), `"message":"attempt 2/10 in 0 ms: <x> & y","attempt":2,"maxAttempts":10,"delayMs":0}`) {
		t.Fatalf("%s %v", b, err)
	}
	got, err := DecodeHostFrame(mustParse(t, string(b)))
	if err != nil || got.(NoticeFrame) != f {
		t.Fatalf("decoded %#v %v", got, err)
	}
	c := NoticeFrame{HostEpoch: "e1", SubscriptionID: "s1", Sequence: 1, SessionID: "s-1",
		Notice: SessionNotice{Kind: NoticeContextCompacted, BeforeTokens: 9, AfterTokens: 2, Message: "m", Attempt: 3}}
	if b, _ := Marshal(c); strings.Contains(string(b), "attempt") {
		t.Fatalf("a compaction notice carries retry members: %s", b)
	}
	for _, bad := range []string{
		strings.Replace(compactSeeds[5], `"attempt":2`, `"attempt":1`, 1),
		strings.Replace(compactSeeds[5], `"maxAttempts":10`, `"maxAttempts":1`, 1),
		strings.Replace(compactSeeds[5], `,"delayMs":1125`, ``, 1),
		strings.Replace(compactSeeds[5], `"delayMs":1125`, `"delayMs":-1`, 1),
		strings.Replace(compactSeeds[6], `"message"`, `"attempt":2,"message"`, 1),
	} {
		if _, err := DecodeHostFrame(mustParse(t, bad)); err == nil {
			t.Errorf("decoded %s", bad)
		}
	}
}

func TestContextWindowSetInput(t *testing.T) {
	spec, _ := Lookup(string(OpConnectionContextWindowSet))
	for _, bad := range []string{
		`{"expected":{"connectionId":"0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90","revision":2},"contextWindow":0}`,
		`{"expected":{"connectionId":"0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90","revision":2}}`,
		`{"expected":{"connectionId":"0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90","revision":2},"contextWindow":1.5}`,
	} {
		if _, err := spec.DecodeInput(mustParse(t, bad)); err == nil {
			t.Errorf("input %s decoded", bad)
		}
	}
}

// FuzzCompact feeds arbitrary JSON through the codecs of the compaction
// extension operations and the notice push frame decoder.
func FuzzCompact(f *testing.F) {
	for _, s := range compactSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		shFuzzOps(t, data, OpSessionCompact, OpSubscriptionNoticesSet, OpConnectionContextWindowSet)
		if v, err := Parse(data); err == nil {
			shFuzzCodec(t, KindSubscriptionNotice, pushDecoders[KindSubscriptionNotice], v)
		}
	})
}
