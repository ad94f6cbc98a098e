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
	`{"kind":"subscription.session_notice","hostEpoch":"e1","subscriptionId":"s1","sequence":6,"sessionId":"0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90","notice":{"kind":"turn_usage","turnId":"1c6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e91","beforeTokens":0,"afterTokens":0,"message":"1.2k in · 34 out · tool_use","stopReason":"tool_use","final":false,"usage":{"inputTokens":1200,"outputTokens":34,"cacheReadTokens":1000,"reasoningTokens":10},"contextTokens":1234,"contextWindow":128000}}`,
	`{"kind":"subscription.session_notice","hostEpoch":"e1","subscriptionId":"s1","sequence":7,"sessionId":"0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90","notice":{"kind":"turn_usage","turnId":"1c6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e91","beforeTokens":0,"afterTokens":0,"message":"","stopReason":"cancelled","final":true}}`,
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
		{name: "step usage notice", in: compactSeeds[7]},
		{name: "turn usage notice without usage", in: compactSeeds[8]},
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

// A turn_usage notice round-trips with its usage, stop reason and context;
// its members belong to turn_usage alone, and the stop reason of a step
// and of a turn are each a closed set.
func TestTurnUsageNoticeFrame(t *testing.T) {
	f := NoticeFrame{HostEpoch: "e1", SubscriptionID: "s1", Sequence: 6, SessionID: "0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90",
		Notice: SessionNotice{Kind: NoticeTurnUsage, TurnID: "1c6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e91", Message: "m",
			StopReason: StopReasonEndTurn, Final: true, HasUsage: true,
			Usage:         TokenUsage{InputTokens: 12300, OutputTokens: 845, CacheReadTokens: 12000, ReasoningTokens: 40},
			ContextTokens: 9000, ContextWindow: 128000}}
	b, err := Marshal(f)
	want := `"message":"m","stopReason":"end_turn","final":true,"usage":{"inputTokens":12300,"outputTokens":845,"cacheReadTokens":12000,"reasoningTokens":40},"contextTokens":9000,"contextWindow":128000}}`
	if err != nil || !strings.HasSuffix(string(b), want) {
		t.Fatalf("%s %v", b, err)
	}
	got, err := DecodeHostFrame(mustParse(t, string(b)))
	if err != nil || got.(NoticeFrame) != f {
		t.Fatalf("decoded %#v %v", got, err)
	}
	f.Notice.HasUsage, f.Notice.Usage, f.Notice.ContextTokens, f.Notice.ContextWindow = false, TokenUsage{}, 0, 0
	if b, _ := Marshal(f); strings.Contains(string(b), "usage\":") || strings.Contains(string(b), "context") {
		t.Fatalf("unknown usage encoded: %s", b)
	}
	c := SessionNotice{Kind: NoticeModelFailed, Message: "m", StopReason: StopReasonFailed, Final: true, HasUsage: true}
	if b, _ := Marshal(c); strings.Contains(string(b), "stopReason") || strings.Contains(string(b), "usage") {
		t.Fatalf("a model_failed notice carries usage members: %s", b)
	}
	step, turn := compactSeeds[7], compactSeeds[8]
	for _, bad := range []string{
		strings.Replace(step, `"stopReason":"tool_use"`, `"stopReason":"cancelled"`, 1),
		strings.Replace(step, `"stopReason":"tool_use"`, `"stopReason":"stop"`, 1),
		strings.Replace(turn, `"stopReason":"cancelled"`, `"stopReason":"tool_use"`, 1),
		strings.Replace(step, `,"final":false`, ``, 1),
		strings.Replace(step, `"stopReason":"tool_use",`, ``, 1),
		strings.Replace(step, `"cacheReadTokens":1000`, `"cacheReadTokens":1201`, 1),
		strings.Replace(step, `"reasoningTokens":10`, `"reasoningTokens":35`, 1),
		strings.Replace(step, `"inputTokens":1200`, `"inputTokens":-1`, 1),
		strings.Replace(step, `,"reasoningTokens":10`, ``, 1),
		strings.Replace(step, `"reasoningTokens":10}`, `"reasoningTokens":10,"costUsd":1}`, 1),
		strings.Replace(step, `"contextWindow":128000`, `"contextWindow":0`, 1),
		strings.Replace(step, `"beforeTokens":0`, `"beforeTokens":5`, 1),
		strings.Replace(compactSeeds[6], `"message"`, `"final":true,"message"`, 1),
		strings.Replace(compactSeeds[5], `"message"`, `"stopReason":"end_turn","message"`, 1),
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
