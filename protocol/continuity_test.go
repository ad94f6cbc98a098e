package protocol

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

const (
	shSnapshot = `{"schemaVersion":1,` +
		`"session":{"sessionId":"s1","status":"running","createdAt":1700000000000,"lastUsedAt":1700000001000,"isArchived":false},` +
		`"projectionRevision":3,` +
		`"rootTurn":{"sessionId":"s1","turnId":"t1","runId":"r1","status":"running"},` +
		`"queue":{"hostEpoch":"epoch-1","queueRevision":2,` +
		`"steering":[{"entryId":"e1","messageId":"m1","content":{"text":"x"},"placement":"current_turn","state":"in_flight"}],` +
		`"followup":[{"entryId":"e2","messageId":"m2","content":{"text":"y"},"placement":"next_turn","state":"queued"}]},` +
		`"interactions":{"pending":[]}}`
	shIdleSnapshot = `{"schemaVersion":1,` +
		`"session":{"sessionId":"s1","status":"archived","createdAt":0,"lastUsedAt":0,"isArchived":true,"archivedAt":5},` +
		`"projectionRevision":1,"rootTurn":null,` +
		`"queue":{"hostEpoch":"epoch-1","queueRevision":0,"steering":[],"followup":[]},"interactions":{"pending":[]}}`
	shPendingInteraction = `{"schemaVersion":1,"interactionId":"i1","sessionId":"s1","turnId":"t1","runId":"r1","revision":1,` +
		`"request":{"kind":"question","toolUseId":"tu1","questions":[{"question":"Which?","options":[{"label":"A"},{"label":"B"}]}]},` +
		`"status":"pending","outcome":null}`
	shOpenResult  = `{"hostEpoch":"epoch-1","subscriptionId":"sub-1","nextSequence":1,"snapshot":` + shSnapshot + `}`
	shEnvelope    = `"hostEpoch":"epoch-1","subscriptionId":"sub-1","sequence":`
	shProjection  = `{"kind":"subscription.session_projection",` + shEnvelope + `2,"snapshot":` + shSnapshot + `}`
	shDelta       = `{"kind":"subscription.session_delta",` + shEnvelope + `3,"sessionId":"s1","delta":{"kind":"text","turnId":"t1","runId":"r1","messageId":"msg1","text":"Hel"}}`
	shClosed      = `{"kind":"subscription.closed",` + shEnvelope + `5,"reason":"slow_consumer"}`
	shToolStart   = `{"type":"tool_start","id":"ev1","turnId":"t1","ts":1700000000000,"toolUseId":"tu1","toolName":"Bash"}`
	shToolOutput  = `{"type":"tool_output_delta","id":"ev2","turnId":"t1","ts":1,"toolUseId":"tu1","seq":0,"stream":"stderr","chunk":"out\n","redacted":false,"createdAt":2}`
	shToolProg    = `{"type":"tool_progress","id":"ev3","turnId":"t1","ts":1,"toolUseId":"tu1","chunk":"50%"}`
	shToolResult  = `{"type":"tool_result","id":"ev4","turnId":"t1","ts":5,"toolUseId":"tu1","status":"errored"}`
	shToolStartOK = `{"type":"tool_start","id":"ev1","turnId":"t1","ts":1700000000000,"toolUseId":"` + "\u7528" + `","toolName":"Read","operationId":"op1","activityKind":"read","displayName":"Read file","stepId":"st1"}`
)

func shEvent(event string) string {
	return `{"kind":"subscription.session_event",` + shEnvelope + `4,"sessionId":"s1","runId":"r1","event":` + event + `}`
}

// shSizedSnapshot returns a snapshot whose raw encoding is exactly size
// bytes; its only queue entry repeats its text as displayText, which the
// decoder drops.
func shSizedSnapshot(t testing.TB, size int) string {
	t.Helper()
	build := func(n int, revision string) string {
		text := shRep("z", n)
		return `{"schemaVersion":1,"session":{"sessionId":"s1","status":"active","createdAt":1,"lastUsedAt":1,"isArchived":false},` +
			`"projectionRevision":1,"rootTurn":null,"queue":{"hostEpoch":"epoch-1","queueRevision":` + revision + `,"steering":[],` +
			`"followup":[{"entryId":"e1","messageId":"m1","content":{"text":"` + text + `","displayText":"` + text + `"},"placement":"next_turn","state":"queued"}]},` +
			`"interactions":{"pending":[]}}`
	}
	rest := size - len(build(0, "0"))
	s := build(rest/2, "0")
	if rest%2 == 1 {
		s = build(rest/2, "10")
	}
	if len(s) != size {
		t.Fatalf("built a snapshot of %d bytes, want %d", len(s), size)
	}
	return s
}

func continuityValidCases(t testing.TB) []shCase {
	atBound := shSizedSnapshot(t, SessionContinuitySnapshotMaxBytes)
	v, _ := Parse([]byte(atBound))
	normalized, err := DecodeSessionContinuitySnapshot(v)
	if err != nil {
		t.Fatalf("snapshot at the bound: %v", err)
	}
	atBoundWant, _ := Marshal(normalized)
	return []shCase{
		{name: "open input", op: OpSubscriptionOpen, in: `{"sessionId":"s1"}`},
		{name: "open result", op: OpSubscriptionOpen, out: true, in: shOpenResult},
		{name: "open result idle archived session", op: OpSubscriptionOpen, out: true,
			in: `{"hostEpoch":"epoch-1","subscriptionId":"sub-1","nextSequence":7,"snapshot":` + shIdleSnapshot + `}`},
		{name: "open result snapshot at 56 KiB as received", op: OpSubscriptionOpen, out: true,
			in:   `{"hostEpoch":"epoch-1","subscriptionId":"sub-1","nextSequence":1,"snapshot":` + atBound + `}`,
			want: `{"hostEpoch":"epoch-1","subscriptionId":"sub-1","nextSequence":1,"snapshot":` + string(atBoundWant) + `}`},
		{name: "open result with a pending interaction", op: OpSubscriptionOpen, out: true,
			in: `{"hostEpoch":"epoch-1","subscriptionId":"sub-1","nextSequence":1,"snapshot":` +
				strings.Replace(shSnapshot, `"pending":[]`, `"pending":[`+shPendingInteraction+`]`, 1) + `}`},
		{name: "close input", op: OpSubscriptionClose, in: `{"subscriptionId":"` + shRep("\u00e9", 128) + `"}`},
		{name: "close result", op: OpSubscriptionClose, out: true, in: `{"subscriptionId":"sub-1"}`},
		{name: "projection frame", in: shProjection},
		{name: "delta frame", in: shDelta},
		{name: "thinking delta of 16 KiB", in: strings.NewReplacer(`"kind":"text"`, `"kind":"thinking"`, `"text":"Hel"`, `"text":"`+shRep("\u00e9", SessionLiveDeltaMaxBytes/2)+`"`).Replace(shDelta)},
		{name: "event tool_start", in: shEvent(shToolStart)},
		{name: "event tool_start with options", in: shEvent(shToolStartOK)},
		{name: "event tool_start names at 256 bytes", in: shEvent(`{"type":"tool_start","id":"ev1","turnId":"t1","ts":1,"toolUseId":"tu1","toolName":"` + shRep("n", 256) + `","displayName":"` + shRep("\u00e9", 128) + `"}`)},
		{name: "event tool_output_delta", in: shEvent(shToolOutput)},
		{name: "event tool_output_delta chunk of 24 KiB", in: shEvent(`{"type":"tool_output_delta","id":"ev2","turnId":"t1","ts":1,"toolUseId":"tu1","seq":3,"stream":"stdout","chunk":"` + shRep("c", ToolOutputDeltaChunkMaxBytes) + `","redacted":true,"createdAt":2}`)},
		{name: "event tool_progress", in: shEvent(shToolProg)},
		{name: "event tool_progress chunk of 16 KiB", in: shEvent(`{"type":"tool_progress","id":"ev3","turnId":"t1","ts":1,"toolUseId":"tu1","chunk":"` + shRep("p", SessionLiveDeltaMaxBytes) + `"}`)},
		{name: "event tool_result", in: shEvent(shToolResult)},
		{name: "event tool_result with options", in: shEvent(`{"type":"tool_result","id":"ev4","turnId":"t1","ts":5,"toolUseId":"tu1","status":"completed","durationMs":0,"operationId":"op1"}`),
			want: shEvent(`{"type":"tool_result","id":"ev4","turnId":"t1","ts":5,"toolUseId":"tu1","operationId":"op1","status":"completed","durationMs":0}`)},
		{name: "closed frame", in: shClosed},
		{name: "closed frame session_removed", in: strings.Replace(shClosed, "slow_consumer", "session_removed", 1)},
	}
}

func TestContinuityValid(t *testing.T) { shCheckValid(t, continuityValidCases(t)) }

func TestContinuityInvalid(t *testing.T) {
	open := func(name string, edits ...string) shCase {
		return shCase{name: "open result " + name, op: OpSubscriptionOpen, out: true, in: shEdit(t, shOpenResult, edits...)}
	}
	frame := func(name, base string, edits ...string) shCase {
		return shCase{name: name, in: shEdit(t, base, edits...)}
	}
	cases := []shCase{
		{name: "open input missing sessionId", op: OpSubscriptionOpen, in: `{}`},
		{name: "open input sessionId invalid", op: OpSubscriptionOpen, in: `{"sessionId":"s/1"}`},
		{name: "open input extra key", op: OpSubscriptionOpen, in: `{"sessionId":"s1","from":1}`},
		{name: "close input subscriptionId empty", op: OpSubscriptionClose, in: `{"subscriptionId":""}`},
		{name: "close input subscriptionId 129", op: OpSubscriptionClose, in: `{"subscriptionId":"` + shRep("x", 129) + `"}`},
		{name: "close result extra key", op: OpSubscriptionClose, out: true, in: `{"subscriptionId":"s","ok":true}`},
		{name: "close result not an object", op: OpSubscriptionClose, out: true, in: `"s"`},
		open("hostEpoch differs from the queue's", `hostEpoch="epoch-2"`),
		open("nextSequence 0", `nextSequence=0`),
		open("nextSequence fractional", `nextSequence=1.5`),
		open("subscriptionId missing", `-subscriptionId`),
		open("extra key", `sessionId="s1"`),
		open("snapshot null", `snapshot=null`),
		open("schemaVersion 2", `snapshot/schemaVersion=2`),
		open("schemaVersion a string", `snapshot/schemaVersion="1"`),
		open("snapshot extra key", `snapshot/revision=1`),
		open("snapshot missing interactions", `-snapshot/interactions`),
		open("interactions not exact", `snapshot/interactions={}`),
		open("projectionRevision 0", `snapshot/projectionRevision=0`),
		open("rootTurn of another session", `snapshot/rootTurn/sessionId="s2"`),
		open("rootTurn invalid", `snapshot/rootTurn/status="paused"`),
		open("rootTurn missing", `-snapshot/rootTurn`),
		open("session status unknown", `snapshot/session/status="idle"`),
		open("session extra key", `snapshot/session/title="x"`),
		open("session missing lastUsedAt", `-snapshot/session/lastUsedAt`),
		open("session isArchived a string", `snapshot/session/isArchived="false"`),
		open("session createdAt negative", `snapshot/session/createdAt=-1`),
		open("session archivedAt null", `snapshot/session/archivedAt=null`),
		open("session sessionId invalid", `snapshot/session/sessionId="s 1"`, `snapshot/rootTurn=null`),
		open("queue invalid", `snapshot/queue/steering/0/placement="next_turn"`),
		open("queue missing", `-snapshot/queue`),
		{name: "open result snapshot over 56 KiB as received", op: OpSubscriptionOpen, out: true,
			in: `{"hostEpoch":"epoch-1","subscriptionId":"sub-1","nextSequence":1,"snapshot":` + shSizedSnapshot(t, SessionContinuitySnapshotMaxBytes+1) + `}`},

		frame("projection frame hostEpoch differs from the queue's", shProjection, `hostEpoch="epoch-2"`),
		frame("projection frame extra key", shProjection, `sessionId="s1"`),
		frame("projection frame sequence 0", shProjection, `sequence=0`),
		frame("projection frame sequence negative", shProjection, `sequence=-1`),
		frame("projection frame missing snapshot", shProjection, `-snapshot`),
		frame("projection frame snapshot invalid", shProjection, `snapshot/schemaVersion=0`),
		frame("delta frame hostEpoch empty", shDelta, `hostEpoch=""`),
		frame("delta frame subscriptionId a number", shDelta, `subscriptionId=1`),
		frame("delta frame missing sessionId", shDelta, `-sessionId`),
		frame("delta frame sessionId invalid", shDelta, `sessionId="s.1"`),
		frame("delta frame extra key", shDelta, `runId="r1"`),
		frame("delta kind unknown", shDelta, `delta/kind="tool"`),
		frame("delta extra key", shDelta, `delta/seq=1`),
		frame("delta missing messageId", shDelta, `-delta/messageId`),
		frame("delta runId invalid", shDelta, `delta/runId=""`),
		frame("delta text empty", shDelta, `delta/text=""`),
		frame("delta text over 16 KiB", shDelta, `delta/text="`+shRep("\u00e9", SessionLiveDeltaMaxBytes/2)+`a"`),
		frame("delta frame over 64 KiB once escaped", shDelta, `delta/text="`+shRep(`\u0001`, SessionLiveDeltaMaxBytes)+`"`),
		frame("event frame missing runId", shEvent(shToolStart), `-runId`),
		frame("event frame event null", shEvent(shToolStart), `event=null`),
		frame("event type unknown", shEvent(shToolStart), `event/type="tool_end"`),
		frame("event id empty", shEvent(shToolStart), `event/id=""`),
		frame("event turnId invalid", shEvent(shToolStart), `event/turnId="t 1"`),
		frame("event ts negative", shEvent(shToolStart), `event/ts=-5`),
		frame("event toolUseId missing", shEvent(shToolStart), `-event/toolUseId`),
		frame("tool_start missing toolName", shEvent(shToolStart), `-event/toolName`),
		frame("tool_start toolName empty", shEvent(shToolStart), `event/toolName=""`),
		frame("tool_start toolName 257 bytes", shEvent(shToolStart), `event/toolName="`+shRep("\u00e9", 128)+`a"`),
		frame("tool_start displayName empty", shEvent(shToolStart), `event/displayName=""`),
		frame("tool_start displayName 257 bytes", shEvent(shToolStart), `event/displayName="`+shRep("d", 257)+`"`),
		frame("tool_start activityKind unknown", shEvent(shToolStart), `event/activityKind="write"`),
		frame("tool_start operationId invalid", shEvent(shToolStart), `event/operationId="op:1"`),
		frame("tool_start stepId null", shEvent(shToolStart), `event/stepId=null`),
		frame("tool_start with args", shEvent(shToolStart), `event/args={}`),
		frame("tool_output_delta with operationId", shEvent(shToolOutput), `event/operationId="op1"`),
		frame("tool_output_delta missing redacted", shEvent(shToolOutput), `-event/redacted`),
		frame("tool_output_delta stream unknown", shEvent(shToolOutput), `event/stream="stdin"`),
		frame("tool_output_delta seq negative", shEvent(shToolOutput), `event/seq=-1`),
		frame("tool_output_delta createdAt fractional", shEvent(shToolOutput), `event/createdAt=0.5`),
		frame("tool_output_delta chunk empty", shEvent(shToolOutput), `event/chunk=""`),
		frame("tool_output_delta chunk over 24 KiB", shEvent(shToolOutput), `event/chunk="`+shRep("c", ToolOutputDeltaChunkMaxBytes+1)+`"`),
		frame("tool_output_delta frame over 64 KiB once escaped", shEvent(shToolOutput), `event/chunk="`+shRep(`\u0002`, ToolOutputDeltaChunkMaxBytes)+`"`),
		frame("tool_progress chunk over 16 KiB", shEvent(shToolProg), `event/chunk="`+shRep("p", SessionLiveDeltaMaxBytes+1)+`"`),
		frame("tool_progress chunk an object", shEvent(shToolProg), `event/chunk={"kind":"text","text":"x"}`),
		frame("tool_progress extra key", shEvent(shToolProg), `event/seq=1`),
		frame("tool_result status interrupted", shEvent(shToolResult), `event/status="interrupted"`),
		frame("tool_result missing status", shEvent(shToolResult), `-event/status`),
		frame("tool_result durationMs negative", shEvent(shToolResult), `event/durationMs=-1`),
		frame("tool_result with content", shEvent(shToolResult), `event/content="x"`),
		frame("tool_result with toolName", shEvent(shToolResult), `event/toolName="Bash"`),
		frame("closed frame reason unknown", shClosed, `reason="done"`),
		frame("closed frame missing reason", shClosed, `-reason`),
		frame("closed frame extra key", shClosed, `sessionId="s1"`),
		frame("closed frame sequence unsafe", shClosed, `sequence=9007199254740992`),
	}
	shCheckInvalid(t, cases)
}

func TestPushFramesEncodeKindFirst(t *testing.T) {
	ms := int64(12)
	for _, c := range []struct {
		v    any
		want string
	}{
		{ClosedFrame{HostEpoch: "h", SubscriptionID: "s", Sequence: 9, Reason: CloseSlowConsumer},
			`{"kind":"subscription.closed","hostEpoch":"h","subscriptionId":"s","sequence":9,"reason":"slow_consumer"}`},
		{DeltaFrame{HostEpoch: "h", SubscriptionID: "s", Sequence: 1, SessionID: "s1",
			Delta: SessionAssistantDelta{Kind: DeltaThinking, TurnID: "t", RunID: "r", MessageID: "m", Text: "a\u2028<b>"}},
			"{\"kind\":\"subscription.session_delta\",\"hostEpoch\":\"h\",\"subscriptionId\":\"s\",\"sequence\":1,\"sessionId\":\"s1\",\"delta\":{\"kind\":\"thinking\",\"turnId\":\"t\",\"runId\":\"r\",\"messageId\":\"m\",\"text\":\"a\u2028<b>\"}}"},
		{EventFrame{HostEpoch: "h", SubscriptionID: "s", Sequence: 2, SessionID: "s1", RunID: "r",
			Event: SessionToolEvent{Type: ToolResult, ID: "i", TurnID: "t", TS: 3, ToolUseID: "u", Status: "completed", DurationMs: &ms}},
			`{"kind":"subscription.session_event","hostEpoch":"h","subscriptionId":"s","sequence":2,"sessionId":"s1","runId":"r","event":{"type":"tool_result","id":"i","turnId":"t","ts":3,"toolUseId":"u","status":"completed","durationMs":12}}`},
	} {
		b, err := Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("Marshal(%T) = %s, %v\nwant %s", c.v, b, err, c.want)
		}
		v, _ := Parse(b)
		if _, err := DecodeHostFrame(v); err != nil {
			t.Errorf("%T does not decode: %v", c.v, err)
		}
	}
	if _, err := Marshal(SessionToolEvent{Type: "tool_end"}); err == nil {
		t.Error("an unknown tool event type encoded")
	}
}

func TestSplitDelta(t *testing.T) {
	big := func(s string, n int) string { return strings.Repeat(s, n) }
	cases := []struct {
		name string
		text string
		want []int // chunk lengths in bytes
	}{
		{"empty", "", nil},
		{"short", "hello", []int{5}},
		{"exactly 16 KiB", big("a", 16384), []int{16384}},
		{"one byte over", big("a", 16385), []int{16384, 1}},
		{"3-byte characters stay whole", big("\u20ac", 5462), []int{16383, 3}},
		{"4-byte characters stay whole", big("\U0001F600", 4097), []int{16384, 4}},
		{"quotes escape to twice their size", big(`"`, 20000), []int{16384, 3616}},
		{"control characters escape to six bytes", big("\x01", 20000), []int{10240, 9760}},
		{"invalid bytes count as U+FFFD", big("\xff", 10241), []int{5461, 4780}},
	}
	for _, c := range cases {
		chunks := SplitDelta(c.text)
		var lens []int
		for _, ch := range chunks {
			lens = append(lens, len(ch))
		}
		if !slicesEqualInt(lens, c.want) {
			t.Errorf("%s: chunk lengths %v, want %v", c.name, lens, c.want)
		}
		if strings.Join(chunks, "") != c.text {
			t.Errorf("%s: chunks do not concatenate to the text", c.name)
		}
		for _, ch := range chunks {
			if utf8.ValidString(c.text) && !utf8.ValidString(ch) {
				t.Errorf("%s: a chunk splits a character", c.name)
			}
		}
	}
}

func slicesEqualInt(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSplitDeltaChunksFitWorstCaseFrame puts chunks of hostile text into delta
// frames whose other fields are as large as they can be encoded, and checks
// that every frame encodes within SubscriptionFrameMaxBytes and decodes.
func TestSplitDeltaChunksFitWorstCaseFrame(t *testing.T) {
	worstID := strings.Repeat("\x01", 128) // 128 UTF-16 units, six bytes each once escaped
	entity := strings.Repeat("e", 128)
	for _, text := range []string{
		strings.Repeat("\x01", 40000),
		strings.Repeat("\"\x1f", 30000),
		strings.Repeat("a\\\n\U0001F600", 9000),
		strings.Repeat("\xff", 20000),
	} {
		for i, chunk := range SplitDelta(text) {
			f := DeltaFrame{HostEpoch: worstID, SubscriptionID: worstID, Sequence: MaxSafeInteger, SessionID: entity,
				Delta: SessionAssistantDelta{Kind: DeltaThinking, TurnID: entity, RunID: entity, MessageID: entity, Text: chunk}}
			b, err := Marshal(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > SubscriptionFrameMaxBytes {
				t.Fatalf("chunk %d: frame of %d bytes", i, len(b))
			}
			v, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeHostFrame(v)
			if err != nil {
				t.Fatalf("chunk %d: %v", i, err)
			}
			if utf8.ValidString(chunk) && got.(DeltaFrame) != f {
				t.Fatalf("chunk %d: decoded frame differs", i)
			}
		}
	}
}

func TestDecodeSessionContinuitySnapshot(t *testing.T) {
	v, _ := Parse([]byte(shIdleSnapshot))
	s, err := DecodeSessionContinuitySnapshot(v)
	if err != nil {
		t.Fatal(err)
	}
	if s.RootTurn != nil || s.Session.ArchivedAt == nil || *s.Session.ArchivedAt != 5 || s.Queue.Steering == nil {
		t.Fatalf("unexpected snapshot %#v", s)
	}
	for _, bad := range []string{`null`, `[]`, strconv.Quote(shIdleSnapshot)} {
		v, _ := Parse([]byte(bad))
		_, err := DecodeSessionContinuitySnapshot(v)
		shWantInvalidFrame(t, "snapshot "+bad[:min(len(bad), 8)], err)
	}
}
