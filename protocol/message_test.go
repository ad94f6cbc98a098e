package protocol

import (
	"strconv"
	"strings"
	"testing"
)

const (
	shSubmitInput = `{"originHostEpoch":"epoch-1","sessionId":"s1","messageId":"m1","content":{"text":"hi"},"placement":"current_turn"}`
	shQueued      = `{"entryId":"e1","messageId":"m1","content":{"text":"x"},"placement":"current_turn","state":"queued"}`
	shInFlight    = `{"entryId":"e0","messageId":"m0","content":{"text":"w"},"placement":"current_turn","state":"in_flight"}`
	shFollowup    = `{"entryId":"e2","messageId":"m2","content":{"text":"y"},"placement":"next_turn","state":"queued"}`
	shRetractedA  = `{"entryId":"e1","messageId":"m1","content":{"text":"x"},"placement":"current_turn","state":"retracted"}`
	shRetractedB  = `{"entryId":"e2","messageId":"m2","content":{"text":"y"},"placement":"next_turn","state":"retracted"}`
	shQueue       = `{"hostEpoch":"epoch-1","queueRevision":2,"steering":[` + shInFlight + `,` + shQueued + `],"followup":[` + shFollowup + `]}`
	shRetract     = `{"queueRevision":3,"retracted":[` + shRetractedA + `,` + shRetractedB + `]}`
	shInterrupt   = `{"queueRevision":3,"retracted":[` + shRetractedA + `],"turn":` + shCancelled + `}`
)

// shEntries returns n comma-separated entries with distinct ids, the given
// placement and state, and text of textLen bytes.
func shEntries(prefix string, n int, placement, state string, textLen int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		id := prefix + strconv.Itoa(i)
		b.WriteString(`{"entryId":"e` + id + `","messageId":"m` + id + `","content":{"text":"` + shRep("t", textLen) +
			`"},"placement":"` + placement + `","state":"` + state + `"}`)
	}
	return b.String()
}

// shRetractResult returns a queue.retract result whose encoding is exactly
// size bytes, using two entries.
func shRetractResult(t testing.TB, size int) string {
	t.Helper()
	build := func(n int) string {
		return `{"queueRevision":1,"retracted":[` + shEntries("a", 1, "next_turn", "retracted", MessageTextMaxBytes) + `,` +
			shEntries("b", 1, "current_turn", "retracted", n) + `]}`
	}
	n := 1 + size - len(build(1))
	if n < 1 || n > MessageTextMaxBytes {
		t.Fatalf("cannot build a retract result of %d bytes", size)
	}
	return build(n)
}

// shQueueOf returns a queue projection with the given steering and followup
// lists.
func shQueueOf(steering, followup string) string {
	return `{"hostEpoch":"epoch-1","queueRevision":0,"steering":[` + steering + `],"followup":[` + followup + `]}`
}

func messageValidCases(t testing.TB) []shCase {
	return []shCase{
		{name: "submit current_turn", op: OpTurnMessageSubmit, in: shSubmitInput},
		{name: "submit next_turn normalizes content", op: OpTurnMessageSubmit,
			in:   `{"originHostEpoch":"` + shRep("é", 128) + `","sessionId":"s1","messageId":"m1","content":{"text":"hi","displayText":"hi","quotes":[]},"placement":"next_turn"}`,
			want: `{"originHostEpoch":"` + shRep("é", 128) + `","sessionId":"s1","messageId":"m1","content":{"text":"hi"},"placement":"next_turn"}`},
		{name: "submit steering", op: OpTurnMessageSubmit, out: true, in: `{"disposition":"steering","queueRevision":0}`},
		{name: "submit followup", op: OpTurnMessageSubmit, out: true, in: `{"disposition":"followup","queueRevision":9007199254740991}`},
		{name: "submit followup revision 1e2", op: OpTurnMessageSubmit, out: true,
			in: `{"disposition":"followup","queueRevision":1e2}`, want: `{"disposition":"followup","queueRevision":100}`},
		{name: "submit turn_started", op: OpTurnMessageSubmit, out: true, in: `{"disposition":"turn_started","turnId":"t9"}`},
		{name: "retract input", op: OpQueueRetract, in: `{"originHostEpoch":"epoch-1","sessionId":"s1","retractId":"x1"}`},
		{name: "retract result empty", op: OpQueueRetract, out: true, in: `{"queueRevision":0,"retracted":[]}`},
		{name: "retract result", op: OpQueueRetract, out: true, in: shRetract},
		{name: "retract result of 64 entries", op: OpQueueRetract, out: true, in: `{"queueRevision":1,"retracted":[` + shEntries("", 64, "next_turn", "retracted", 1) + `]}`},
		{name: "retract result at 56 KiB", op: OpQueueRetract, out: true, in: shRetractResult(t, MessageOperationResultMaxBytes)},
		{name: "interrupt input", op: OpTurnInterrupt, in: `{"originHostEpoch":"epoch-1","sessionId":"s1","interruptId":"i1","turnId":"t1","runId":"r1"}`},
		{name: "interrupt result", op: OpTurnInterrupt, out: true, in: shInterrupt},
		{name: "interrupt result without retractions", op: OpTurnInterrupt, out: true, in: `{"queueRevision":0,"retracted":[],"turn":` + shFailed + `}`},
	}
}

func TestMessageValid(t *testing.T) { shCheckValid(t, messageValidCases(t)) }

func TestMessageInvalid(t *testing.T) {
	cases := []shCase{
		{name: "submit missing placement", in: shEdit(t, shSubmitInput, `-placement`)},
		{name: "submit extra key", in: shEdit(t, shSubmitInput, `turnId="t1"`)},
		{name: "submit placement unknown", in: shEdit(t, shSubmitInput, `placement="now"`)},
		{name: "submit placement null", in: shEdit(t, shSubmitInput, `placement=null`)},
		{name: "submit originHostEpoch empty", in: shEdit(t, shSubmitInput, `originHostEpoch=""`)},
		{name: "submit originHostEpoch 129", in: shEdit(t, shSubmitInput, `originHostEpoch="`+shRep("é", 129)+`"`)},
		{name: "submit messageId invalid", in: shEdit(t, shSubmitInput, `messageId="m:1"`)},
		{name: "submit content invalid", in: shEdit(t, shSubmitInput, `content={"text":""}`)},
		{name: "submit not an object", in: `["x"]`},
		{name: "retract missing retractId", op: OpQueueRetract, in: `{"originHostEpoch":"e","sessionId":"s1"}`},
		{name: "retract retractId invalid", op: OpQueueRetract, in: `{"originHostEpoch":"e","sessionId":"s1","retractId":"x y"}`},
		{name: "retract extra key", op: OpQueueRetract, in: `{"originHostEpoch":"e","sessionId":"s1","retractId":"x","messageId":"m"}`},
		{name: "interrupt missing runId", op: OpTurnInterrupt, in: `{"originHostEpoch":"e","sessionId":"s1","interruptId":"i1","turnId":"t1"}`},
		{name: "interrupt interruptId invalid", op: OpTurnInterrupt, in: `{"originHostEpoch":"e","sessionId":"s1","interruptId":"","turnId":"t1","runId":"r1"}`},
	}
	for i := range cases {
		if cases[i].op == "" {
			cases[i].op = OpTurnMessageSubmit
		}
	}
	results := []shCase{
		{name: "submit result disposition unknown", op: OpTurnMessageSubmit, in: `{"disposition":"queued","queueRevision":1}`},
		{name: "submit result disposition missing", op: OpTurnMessageSubmit, in: `{"queueRevision":1}`},
		{name: "submit steering with turnId", op: OpTurnMessageSubmit, in: `{"disposition":"steering","turnId":"t1"}`},
		{name: "submit steering with both", op: OpTurnMessageSubmit, in: `{"disposition":"steering","queueRevision":1,"turnId":"t1"}`},
		{name: "submit followup revision negative", op: OpTurnMessageSubmit, in: `{"disposition":"followup","queueRevision":-1}`},
		{name: "submit followup revision fractional", op: OpTurnMessageSubmit, in: `{"disposition":"followup","queueRevision":0.5}`},
		{name: "submit followup revision unsafe", op: OpTurnMessageSubmit, in: `{"disposition":"followup","queueRevision":9007199254740992}`},
		{name: "submit turn_started with queueRevision", op: OpTurnMessageSubmit, in: `{"disposition":"turn_started","queueRevision":1}`},
		{name: "submit turn_started turnId invalid", op: OpTurnMessageSubmit, in: `{"disposition":"turn_started","turnId":"t.1"}`},
		{name: "retract result missing retracted", op: OpQueueRetract, in: `{"queueRevision":0}`},
		{name: "retract result retracted null", op: OpQueueRetract, in: `{"queueRevision":0,"retracted":null}`},
		{name: "retract result extra key", op: OpQueueRetract, in: `{"queueRevision":0,"retracted":[],"turn":null}`},
		{name: "retract result queued entry", op: OpQueueRetract, in: `{"queueRevision":0,"retracted":[` + shQueued + `]}`},
		{name: "retract result in_flight entry", op: OpQueueRetract, in: `{"queueRevision":0,"retracted":[` + shInFlight + `]}`},
		{name: "retract result repeated entryId", op: OpQueueRetract, in: shEdit(t, shRetract, `retracted/1/entryId="e1"`)},
		{name: "retract result repeated messageId", op: OpQueueRetract, in: shEdit(t, shRetract, `retracted/1/messageId="m1"`)},
		{name: "retract result of 65 entries", op: OpQueueRetract, in: `{"queueRevision":1,"retracted":[` + shEntries("", 65, "next_turn", "retracted", 1) + `]}`},
		{name: "retract result over 56 KiB", op: OpQueueRetract, in: shRetractResult(t, MessageOperationResultMaxBytes+1)},
		{name: "retract result entry extra key", op: OpQueueRetract, in: shEdit(t, shRetract, `retracted/0/retractId="x"`)},
		{name: "retract result entry missing content", op: OpQueueRetract, in: shEdit(t, shRetract, `-retracted/0/content`)},
		{name: "retract result entry state unknown", op: OpQueueRetract, in: shEdit(t, shRetract, `retracted/0/state="gone"`)},
		{name: "retract result entry placement unknown", op: OpQueueRetract, in: shEdit(t, shRetract, `retracted/0/placement="later"`)},
		{name: "retract result entry content invalid", op: OpQueueRetract, in: shEdit(t, shRetract, `retracted/0/content={"text":"x","quotes":null}`)},
		{name: "retract result entries not objects", op: OpQueueRetract, in: `{"queueRevision":0,"retracted":["e1"]}`},
		{name: "interrupt result missing turn", op: OpTurnInterrupt, in: shRetract},
		{name: "interrupt result turn invalid", op: OpTurnInterrupt, in: shEdit(t, shInterrupt, `turn/status="done"`)},
		{name: "interrupt result turn null", op: OpTurnInterrupt, in: shEdit(t, shInterrupt, `turn=null`)},
		{name: "interrupt result queued entry", op: OpTurnInterrupt, in: shEdit(t, shInterrupt, `retracted/0/state="queued"`)},
		{name: "interrupt result over 56 KiB", op: OpTurnInterrupt,
			in: `{"queueRevision":1,"retracted":[` + shEntries("", 2, "next_turn", "retracted", 29000) + `],"turn":` + shCancelled + `}`},
	}
	for i := range results {
		results[i].out = true
	}
	shCheckInvalid(t, append(cases, results...))
}

func TestQueueProjection(t *testing.T) {
	valid := []string{
		shQueue,
		shQueueOf("", ""),
		shQueueOf(shEntries("s", 32, "current_turn", "queued", 1), shEntries("f", 32, "next_turn", "queued", 1)),
		shQueueOf(shEntries("s", 1, "current_turn", "in_flight", MessageTextMaxBytes), ""),
	}
	for i, text := range valid {
		v, _ := Parse([]byte(text))
		p, err := DecodeSessionMessageQueueProjection(v)
		if err != nil {
			t.Errorf("valid[%d]: %v", i, err)
			continue
		}
		if b, _ := Marshal(p); string(b) != text {
			t.Errorf("valid[%d]: encoding\n got %.200s\nwant %.200s", i, b, text)
		}
	}
	invalid := map[string]string{
		"not an object":                `[]`,
		"missing hostEpoch":            shEdit(t, shQueue, `-hostEpoch`),
		"hostEpoch empty":              shEdit(t, shQueue, `hostEpoch=""`),
		"queueRevision negative":       shEdit(t, shQueue, `queueRevision=-1`),
		"extra key":                    shEdit(t, shQueue, `retracted=[]`),
		"steering null":                shEdit(t, shQueue, `steering=null`),
		"steering entry next_turn":     shQueueOf(shFollowup, ""),
		"steering entry retracted":     shQueueOf(shRetractedA, ""),
		"followup entry current_turn":  shQueueOf("", shQueued),
		"followup entry in_flight":     shQueueOf("", shInFlight),
		"followup entry retracted":     shQueueOf("", shRetractedB),
		"in_flight with next_turn":     shQueueOf("", shEdit(t, shInFlight, `placement="next_turn"`)),
		"steering of 65":               shQueueOf(shEntries("s", 65, "current_turn", "queued", 1), ""),
		"more than 64 entries in all":  shQueueOf(shEntries("s", 40, "current_turn", "queued", 1), shEntries("f", 25, "next_turn", "queued", 1)),
		"entryId repeated across":      shQueueOf(shQueued, shEdit(t, shFollowup, `entryId="e1"`)),
		"messageId repeated across":    shQueueOf(shQueued, shEdit(t, shFollowup, `messageId="m1"`)),
		"messageId repeated in a list": shQueueOf(shQueued+","+shEdit(t, shInFlight, `messageId="m1"`), ""),
		"over 52 KiB":                  shQueueOf(shEntries("s", 1, "current_turn", "queued", MessageTextMaxBytes), shEntries("f", 1, "next_turn", "queued", 4000)),
	}
	for name, text := range invalid {
		v, err := Parse([]byte(text))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, err = DecodeSessionMessageQueueProjection(v)
		shWantInvalidFrame(t, name, err)
	}
}

func TestMessageEncodersWriteEmptyLists(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{SessionMessageQueueProjection{HostEpoch: "e"}, `{"hostEpoch":"e","queueRevision":0,"steering":[],"followup":[]}`},
		{QueueRetractResult{}, `{"queueRevision":0,"retracted":[]}`},
		{TurnInterruptResult{Turn: TurnSnapshot{SessionID: "s", TurnID: "t", RunID: "r", Status: TurnCancelled, TerminalEventID: "x", AbortSource: "user_stop"}},
			`{"queueRevision":0,"retracted":[],"turn":{"sessionId":"s","turnId":"t","runId":"r","status":"cancelled","terminalEventId":"x","abortSource":"user_stop"}}`},
		{TurnMessageSubmitResult{Disposition: DispositionSteering}, `{"disposition":"steering","queueRevision":0}`},
		{TurnMessageSubmitResult{Disposition: DispositionTurnStarted, TurnID: "t"}, `{"disposition":"turn_started","turnId":"t"}`},
	} {
		b, err := Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("Marshal(%#v) = %s, %v; want %s", c.v, b, err, c.want)
		}
	}
}
