package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// shCase is one example for a codec: op names the operation ("" decodes a
// host push frame with DecodeHostFrame), out selects the result side, in is
// the JSON given and want the canonical encoding of the decoded value ("" when
// it equals in).
type shCase struct {
	name string
	op   Operation
	out  bool
	in   string
	want string
}

func shDecode(t *testing.T, c shCase, text string) (any, error) {
	t.Helper()
	v, err := Parse([]byte(text))
	if err != nil {
		t.Fatalf("%s: test JSON does not parse: %v", c.name, err)
	}
	if c.op == "" {
		return DecodeHostFrame(v)
	}
	spec, ok := Lookup(string(c.op))
	if !ok {
		t.Fatalf("%s: unknown operation %s", c.name, c.op)
	}
	if c.out {
		return spec.DecodeOutput(v)
	}
	return spec.DecodeInput(v)
}

// shCheckValid decodes every case, checks that the value encodes to the
// canonical bytes, and that the canonical bytes decode to an equal value.
func shCheckValid(t *testing.T, cases []shCase) {
	t.Helper()
	for _, c := range cases {
		got, err := shDecode(t, c, c.in)
		if err != nil {
			t.Errorf("%s: unexpected error: %v", c.name, err)
			continue
		}
		b, err := Marshal(got)
		if err != nil {
			t.Errorf("%s: Marshal: %v", c.name, err)
			continue
		}
		want := c.want
		if want == "" {
			want = c.in
		}
		if string(b) != want {
			t.Errorf("%s: encoding\n got %.300s\nwant %.300s", c.name, b, want)
			continue
		}
		again, err := shDecode(t, c, want)
		if err != nil {
			t.Errorf("%s: canonical form does not decode: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(got, again) {
			t.Errorf("%s: canonical form decodes to a different value\n%#v\n%#v", c.name, got, again)
		}
	}
}

// shCheckInvalid asserts that every case fails with invalid_frame (and not
// through a recovered decoder panic).
func shCheckInvalid(t *testing.T, cases []shCase) {
	t.Helper()
	for _, c := range cases {
		_, err := shDecode(t, c, c.in)
		shWantInvalidFrame(t, c.name, err)
	}
}

func shWantInvalidFrame(t *testing.T, name string, err error) {
	t.Helper()
	var pe *ProtocolError
	switch {
	case err == nil:
		t.Errorf("%s: decoded, want invalid_frame", name)
	case !errors.As(err, &pe) || pe.Code != CodeInvalidFrame:
		t.Errorf("%s: error %v, want a *ProtocolError invalid_frame", name, err)
	case strings.Contains(pe.Message, "decoder panic"):
		t.Errorf("%s: decoder panicked: %v", name, err)
	}
}

// shEdit returns base with edits applied. An edit "a/b/0/c=JSON" sets the
// member or element at that path to JSON; "-a/b" deletes a member. Key order
// of the result is not preserved, so it is meant for invalid examples.
func shEdit(t *testing.T, base string, edits ...string) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(base))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		t.Fatalf("shEdit: base does not parse: %v", err)
	}
	for _, e := range edits {
		del := strings.HasPrefix(e, "-")
		path, val := strings.TrimPrefix(e, "-"), ""
		if !del {
			var ok bool
			path, val, ok = strings.Cut(e, "=")
			if !ok {
				t.Fatalf("shEdit: bad edit %q", e)
			}
		}
		var newVal any
		if !del {
			d := json.NewDecoder(strings.NewReader(val))
			d.UseNumber()
			if err := d.Decode(&newVal); err != nil {
				t.Fatalf("shEdit: bad value in %q: %v", e, err)
			}
		}
		segs := strings.Split(path, "/")
		cur := root
		for _, s := range segs[:len(segs)-1] {
			switch x := cur.(type) {
			case map[string]any:
				cur = x[s]
			case []any:
				i, _ := strconv.Atoi(s)
				cur = x[i]
			default:
				t.Fatalf("shEdit: cannot walk %q", e)
			}
		}
		last := segs[len(segs)-1]
		switch x := cur.(type) {
		case map[string]any:
			if del {
				delete(x, last)
			} else {
				x[last] = newVal
			}
		case []any:
			i, _ := strconv.Atoi(last)
			x[i] = newVal
		default:
			t.Fatalf("shEdit: cannot edit %q", e)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(root); err != nil {
		t.Fatalf("shEdit: %v", err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// shStr encodes s as a JSON string.
func shStr(s string) string { return string(appendString(nil, s)) }

const (
	shSessionFile = `{"kind":"session_file","sessionId":"s1","relativePath":"uploads/a.png"}`
	shAttachment  = `{"kind":"image","name":"a.png","mimeType":"image/png","bytes":1024,"ref":` + shSessionFile + `}`
	shStartInput  = `{"sessionId":"s1","turnId":"t1","content":{"text":"hello"}}`
	shRunning     = `{"sessionId":"s1","turnId":"t1","runId":"r1","status":"running"}`
	shCompleted   = `{"sessionId":"s1","turnId":"t1","runId":"r1","status":"completed","terminalEventId":"ev-9"}`
	shFailed      = `{"sessionId":"s1","turnId":"t1","runId":"r1","status":"failed","terminalEventId":"ev-9","failureClass":"RateLimit"}`
	shCancelled   = `{"sessionId":"s1","turnId":"t1","runId":"r1","status":"cancelled","terminalEventId":"ev-9","abortSource":"app_restarted"}`
)

// shContent returns a turn.start input carrying content.
func shContent(content string) string {
	return `{"sessionId":"s1","turnId":"t1","content":` + content + `}`
}

func shAttach(ref string) string {
	return shContent(`{"text":"x","attachments":[{"kind":"doc","name":"n","mimeType":"m","bytes":1,"ref":` + ref + `}]}`)
}

func shRep(s string, n int) string { return strings.Repeat(s, n) }

func turnValidCases() []shCase {
	full := shContent(`{"text":"see attached","displayText":"","attachments":[` + shAttachment +
		`,{"kind":"code","name":"main.go","mimeType":"text/x-go","bytes":-0,"ref":{"kind":"workspace_file","relativePath":"cmd/main.go"}}` +
		`,{"kind":"pdf","name":"r.pdf","mimeType":"application/pdf","bytes":52428800,"ref":{"kind":"external_file","absolutePath":"C:\\docs\\r.pdf"}}` +
		`],"quotes":[{"sourceTurnId":"t0","label":"earlier","text":"quoted"},{"text":"plain"}]}`)
	fullWant := shContent(`{"text":"see attached","displayText":"","attachments":[` + shAttachment +
		`,{"kind":"code","name":"main.go","mimeType":"text/x-go","bytes":0,"ref":{"kind":"workspace_file","relativePath":"cmd/main.go"}}` +
		`,{"kind":"pdf","name":"r.pdf","mimeType":"application/pdf","bytes":52428800,"ref":{"kind":"external_file","absolutePath":"C:\\docs\\r.pdf"}}` +
		`],"quotes":[{"text":"quoted","label":"earlier","sourceTurnId":"t0"},{"text":"plain"}]}`)
	// {"text":"<49152>","displayText":"<n>"} is 49180+n bytes.
	text48k := shRep("a", MessageTextMaxBytes)
	cases := []shCase{
		{name: "start minimal", op: OpTurnStart, in: shStartInput},
		{name: "start full, normalized", op: OpTurnStart, in: full, want: fullWant},
		{name: "start drops displayText equal to text and empty lists", op: OpTurnStart,
			in:   shContent(`{"text":"x","displayText":"x","attachments":[],"quotes":[]}`),
			want: shContent(`{"text":"x"}`)},
		{name: "start keeps a different displayText", op: OpTurnStart, in: shContent(`{"text":"x","displayText":"y"}`)},
		{name: "start text at 48 KiB of 3-byte characters", op: OpTurnStart, in: shContent(`{"text":"` + shRep("€", MessageTextMaxBytes/3) + `"}`)},
		{name: "start content at 52 KiB", op: OpTurnStart, in: shContent(`{"text":"` + text48k + `","displayText":"` + shRep("b", 4068) + `"}`)},
		{name: "start 8 attachments", op: OpTurnStart, in: shContent(`{"text":"x","attachments":[` + strings.TrimSuffix(shRep(shAttachment+",", 8), ",") + `]}`)},
		{name: "start 16 quotes", op: OpTurnStart, in: shContent(`{"text":"x","quotes":[` + strings.TrimSuffix(shRep(`{"text":"q"},`, 16), ",") + `]}`)},
		{name: "start quote text 32000 units", op: OpTurnStart, in: shContent(`{"text":"x","quotes":[{"text":"` + shRep("a", 32000) + `"}]}`)},
		{name: "start quote label 200 units", op: OpTurnStart, in: shContent(`{"text":"x","quotes":[{"text":"q","label":"` + shRep("😀", 100) + `"}]}`)},
		{name: "start name and mimeType at their byte bounds", op: OpTurnStart,
			in:   shContent(`{"text":"x","attachments":[{"kind":"other","name":"` + shRep("é", 256) + `","mimeType":"` + shRep("m", 256) + `","bytes":1.0,"ref":{"kind":"workspace_file","relativePath":"a"}}]}`),
			want: shContent(`{"text":"x","attachments":[{"kind":"other","name":"` + shRep("é", 256) + `","mimeType":"` + shRep("m", 256) + `","bytes":1,"ref":{"kind":"workspace_file","relativePath":"a"}}]}`)},
		{name: "start relative path of 4096 bytes", op: OpTurnStart, in: shAttach(`{"kind":"workspace_file","relativePath":"` + shRep("a", 4096) + `"}`)},
		{name: "query", op: OpTurnQuery, in: `{"sessionId":"s1","turnId":"t1"}`},
		{name: "stop", op: OpTurnStop, in: `{"sessionId":"s_1","turnId":"T-1","runId":"r1"}`},
		{name: "snapshot completed", op: OpTurnQuery, out: true, in: shCompleted},
		{name: "snapshot failed", op: OpTurnStop, out: true, in: shFailed},
		{name: "snapshot cancelled", op: OpTurnStart, out: true, in: shCancelled},
		{name: "snapshot failureClass of 128 units", op: OpTurnQuery, out: true,
			in: `{"sessionId":"s1","turnId":"t1","runId":"r1","status":"failed","terminalEventId":"` + shRep("e", 128) + `","failureClass":"` + shRep("\\u0000", 128) + `"}`},
	}
	for _, status := range []string{"admitted", "created", "running", "waiting_for_user"} {
		cases = append(cases, shCase{name: "snapshot " + status, op: OpTurnQuery, out: true,
			in: `{"sessionId":"s1","turnId":"t1","runId":"r1","status":"` + status + `"}`})
	}
	for _, p := range []string{`/abs/file`, `C:\\x`, `c:/x`, `\\\\server\\share`, `\\\\server/share/more`} {
		cases = append(cases, shCase{name: "start absolute path " + p, op: OpTurnStart, in: shAttach(`{"kind":"external_file","absolutePath":"` + p + `"}`)})
	}
	return cases
}

func TestTurnValid(t *testing.T) { shCheckValid(t, turnValidCases()) }

func TestTurnInvalid(t *testing.T) {
	text48k := shRep("a", MessageTextMaxBytes)
	cases := []shCase{
		{name: "start not an object", in: `[]`},
		{name: "start null", in: `null`},
		{name: "start missing content", in: `{"sessionId":"s1","turnId":"t1"}`},
		{name: "start extra key", in: shEdit(t, shStartInput, `extra=1`)},
		{name: "start sessionId not an entity id", in: shEdit(t, shStartInput, `sessionId="s 1"`)},
		{name: "start turnId empty", in: shEdit(t, shStartInput, `turnId=""`)},
		{name: "start turnId of 129", in: shEdit(t, shStartInput, `turnId="`+shRep("t", 129)+`"`)},
		{name: "start content null", in: shEdit(t, shStartInput, `content=null`)},
		{name: "content missing text", in: shContent(`{"displayText":"x"}`)},
		{name: "content text empty", in: shContent(`{"text":""}`)},
		{name: "content text a number", in: shContent(`{"text":1}`)},
		{name: "content text over 48 KiB", in: shContent(`{"text":"` + shRep("€", MessageTextMaxBytes/3) + `a"}`)},
		{name: "content displayText null", in: shContent(`{"text":"x","displayText":null}`)},
		{name: "content displayText over 48 KiB", in: shContent(`{"text":"x","displayText":"` + text48k + `a"}`)},
		{name: "content over 52 KiB", in: shContent(`{"text":"` + text48k + `","displayText":"` + shRep("b", 4069) + `"}`)},
		{name: "content extra key", in: shContent(`{"text":"x","extra":true}`)},
		{name: "content attachments null", in: shContent(`{"text":"x","attachments":null}`)},
		{name: "content attachments an object", in: shContent(`{"text":"x","attachments":{}}`)},
		{name: "content attachments of numbers", in: shContent(`{"text":"x","attachments":[1]}`)},
		{name: "content 9 attachments", in: shContent(`{"text":"x","attachments":[` + strings.TrimSuffix(shRep(shAttachment+",", 9), ",") + `]}`)},
		{name: "content 17 quotes", in: shContent(`{"text":"x","quotes":[` + strings.TrimSuffix(shRep(`{"text":"q"},`, 17), ",") + `]}`)},
		{name: "content quotes of strings", in: shContent(`{"text":"x","quotes":["q"]}`)},
		{name: "quote text empty", in: shContent(`{"text":"x","quotes":[{"text":""}]}`)},
		{name: "quote text 32001 units", in: shContent(`{"text":"x","quotes":[{"text":"` + shRep("a", 32001) + `"}]}`)},
		{name: "quote label 201 units", in: shContent(`{"text":"x","quotes":[{"text":"q","label":"` + shRep("😀", 100) + `a"}]}`)},
		{name: "quote label empty", in: shContent(`{"text":"x","quotes":[{"text":"q","label":""}]}`)},
		{name: "quote sourceTurnId invalid", in: shContent(`{"text":"x","quotes":[{"text":"q","sourceTurnId":"a.b"}]}`)},
		{name: "quote extra key", in: shContent(`{"text":"x","quotes":[{"text":"q","url":"u"}]}`)},
		{name: "quote missing text", in: shContent(`{"text":"x","quotes":[{"label":"l"}]}`)},
	}
	att := shContent(`{"text":"x","attachments":[` + shAttachment + `]}`)
	for _, e := range []struct{ name, edit string }{
		{"attachment kind unknown", `content/attachments/0/kind="video"`},
		{"attachment missing kind", `-content/attachments/0/kind`},
		{"attachment extra key", `content/attachments/0/url="u"`},
		{"attachment name empty", `content/attachments/0/name=""`},
		{"attachment name 513 bytes", `content/attachments/0/name="` + shRep("é", 256) + `a"`},
		{"attachment mimeType empty", `content/attachments/0/mimeType=""`},
		{"attachment mimeType 257 bytes", `content/attachments/0/mimeType="` + shRep("m", 257) + `"`},
		{"attachment bytes over 50 MiB", `content/attachments/0/bytes=52428801`},
		{"attachment bytes negative", `content/attachments/0/bytes=-1`},
		{"attachment bytes fractional", `content/attachments/0/bytes=1.5`},
		{"attachment bytes a string", `content/attachments/0/bytes="1"`},
		{"attachment ref null", `content/attachments/0/ref=null`},
		{"ref kind unknown", `content/attachments/0/ref/kind="url"`},
		{"session_file ref bad sessionId", `content/attachments/0/ref/sessionId="a/b"`},
		{"session_file ref missing sessionId", `-content/attachments/0/ref/sessionId`},
		{"session_file ref extra key", `content/attachments/0/ref/absolutePath="/a"`},
		{"workspace_file ref with sessionId", `content/attachments/0/ref/kind="workspace_file"`},
		{"external_file ref with relativePath", `content/attachments/0/ref={"kind":"external_file","relativePath":"a"}`},
	} {
		cases = append(cases, shCase{name: e.name, in: shEdit(t, att, e.edit)})
	}
	for _, p := range []string{``, `/a`, `a//b`, `a/`, `./a`, `a/./b`, `a/..`, `..`, `C:x`, `c:`, `a\\b`, `a\u0000b`, shRep("a", 4097)} {
		cases = append(cases, shCase{name: "relative path " + strconv.Quote(p), in: shAttach(`{"kind":"workspace_file","relativePath":"` + p + `"}`)})
	}
	for _, p := range []string{``, `rel`, `C:`, `C:x`, `1:/x`, `\\\\server`, `\\\\server\\`, `\\\\\\share`, `/a\u0000`, "/" + shRep("a", 4096)} {
		cases = append(cases, shCase{name: "absolute path " + strconv.Quote(p), in: shAttach(`{"kind":"external_file","absolutePath":"` + p + `"}`)})
	}
	for i := range cases {
		cases[i].op = OpTurnStart
	}
	snapshots := []shCase{
		{name: "query input missing turnId", op: OpTurnQuery, in: `{"sessionId":"s1"}`},
		{name: "query input extra key", op: OpTurnQuery, in: `{"sessionId":"s1","turnId":"t1","runId":"r1"}`},
		{name: "stop input missing runId", op: OpTurnStop, in: `{"sessionId":"s1","turnId":"t1"}`},
		{name: "stop input runId a number", op: OpTurnStop, in: `{"sessionId":"s1","turnId":"t1","runId":1}`},
		{name: "snapshot not an object", in: `"running"`},
		{name: "snapshot status unknown", in: shEdit(t, shRunning, `status="waiting_permission"`)},
		{name: "snapshot status missing", in: shEdit(t, shRunning, `-status`)},
		{name: "snapshot runId missing", in: shEdit(t, shRunning, `-runId`)},
		{name: "snapshot runId invalid", in: shEdit(t, shRunning, `runId="r 1"`)},
		{name: "snapshot running with terminalEventId", in: shEdit(t, shRunning, `terminalEventId="e"`)},
		{name: "snapshot completed without terminalEventId", in: shEdit(t, shCompleted, `-terminalEventId`)},
		{name: "snapshot completed with failureClass", in: shEdit(t, shCompleted, `failureClass="x"`)},
		{name: "snapshot completed terminalEventId empty", in: shEdit(t, shCompleted, `terminalEventId=""`)},
		{name: "snapshot completed terminalEventId 129", in: shEdit(t, shCompleted, `terminalEventId="`+shRep("e", 129)+`"`)},
		{name: "snapshot failed without failureClass", in: shEdit(t, shFailed, `-failureClass`)},
		{name: "snapshot failed failureClass empty", in: shEdit(t, shFailed, `failureClass=""`)},
		{name: "snapshot failed failureClass 129", in: shEdit(t, shFailed, `failureClass="`+shRep("f", 129)+`"`)},
		{name: "snapshot failed with abortSource", in: shEdit(t, shFailed, `abortSource="x"`)},
		{name: "snapshot cancelled without abortSource", in: shEdit(t, shCancelled, `-abortSource`)},
		{name: "snapshot cancelled with failureClass instead", in: shEdit(t, shCancelled, `-abortSource`, `failureClass="x"`)},
		{name: "snapshot cancelled abortSource 129", in: shEdit(t, shCancelled, `abortSource="`+shRep("a", 129)+`"`)},
	}
	for i := range snapshots {
		if snapshots[i].op == "" {
			snapshots[i].op, snapshots[i].out = OpTurnQuery, true
		}
	}
	shCheckInvalid(t, append(cases, snapshots...))
}

func TestDecodeMessageContentNormalizes(t *testing.T) {
	v, err := Parse([]byte(`{"quotes":[],"displayText":"same","text":"same","attachments":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := DecodeMessageContent(v)
	if err != nil {
		t.Fatal(err)
	}
	if c.DisplayText != nil || c.Attachments != nil || c.Quotes != nil || c.Text != "same" {
		t.Fatalf("not normalized: %#v", c)
	}
	if _, err := DecodeMessageContent(NullValue()); err == nil {
		t.Fatal("null content decoded")
	}
}

func TestDecodeTurnSnapshot(t *testing.T) {
	v, _ := Parse([]byte(shFailed))
	got, err := DecodeTurnSnapshot(v)
	want := TurnSnapshot{SessionID: "s1", TurnID: "t1", RunID: "r1", Status: TurnFailed, TerminalEventID: "ev-9", FailureClass: "RateLimit"}
	if err != nil || got != want {
		t.Fatalf("got %#v, %v", got, err)
	}
	if !got.Status.Terminal() || TurnWaitingForUser.Terminal() {
		t.Fatal("Terminal is wrong")
	}
}
