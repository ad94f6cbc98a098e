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
}

// compactValidCases are the shape examples of session.compact, the notice
// frame and the notices member of subscription.open.
func compactValidCases() []shCase {
	return []shCase{
		{name: "compact input", op: OpSessionCompact, in: compactSeeds[0]},
		{name: "compact result", op: OpSessionCompact, out: true, in: compactSeeds[1]},
		{name: "notice frame", in: compactSeeds[3]},
		{name: "notice frame on demand", in: `{"kind":"subscription.session_notice","hostEpoch":"e1","subscriptionId":"s1","sequence":1,"sessionId":"s-1","notice":{"kind":"context_compaction_failed","beforeTokens":9000,"afterTokens":4000,"message":"summary failed"}}`},
		{name: "subscription.open with notices", op: OpSubscriptionOpen, in: `{"sessionId":"s-1","notices":true}`},
		{name: "connection create with a context window", op: OpConnectionCatalogCreate,
			in: `{"expectedCatalogRevision":1,"connection":{"slug":"local","name":"Local","providerType":"openai-compatible","baseUrl":"http://localhost:8080/v1","enabled":true,"enabledModelIds":["m1"],"contextWindow":32000}}`},
		{name: "connection update with a context window", op: OpConnectionCatalogUpdate,
			in: `{"expected":{"connectionId":"0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90","revision":2},"changes":{"name":"Local","enabled":true,"enabledModelIds":["m1"],"contextWindow":8000}}`},
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

func TestSubscriptionOpenNotices(t *testing.T) {
	spec, _ := Lookup(string(OpSubscriptionOpen))
	in, err := spec.DecodeInput(mustParse(t, `{"sessionId":"0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90","notices":true}`))
	if err != nil || !in.(SubscriptionOpenInput).Notices {
		t.Fatalf("%#v %v", in, err)
	}
	// The v0 form is unchanged: no notices member unless asked for.
	b, _ := Marshal(SubscriptionOpenInput{SessionID: "0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90"})
	if string(b) != `{"sessionId":"0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90"}` {
		t.Fatalf("%s", b)
	}
}

// FuzzCompact feeds arbitrary JSON through the session.compact codecs and
// the notice push frame decoder.
func FuzzCompact(f *testing.F) {
	for _, s := range compactSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		shFuzzOps(t, data, OpSessionCompact, OpSubscriptionOpen)
		if v, err := Parse(data); err == nil {
			shFuzzCodec(t, KindSubscriptionNotice, pushDecoders[KindSubscriptionNotice], v)
		}
	})
}
