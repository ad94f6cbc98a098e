package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/maka-agent/maka/internal/bashcategory"
)

// ---------------------------------------------------------------------------
// Canonical examples (keys in the order the encoder writes them)

const (
	ixBashPrompt = `{"kind":"tool_permission","toolName":"Bash","category":"fs_destructive","reason":"fs_destructive",` +
		`"review":{"kind":"command","command":"rm -rf build","cwd":"/work"},"rememberForTurnAllowed":true}`
	ixBashRequest     = `{"kind":"permission","toolUseId":"tu1","prompt":` + ixBashPrompt + `}`
	ixQuestionRequest = `{"kind":"question","toolUseId":"tu2","questions":[{"question":"Which one?",` +
		`"options":[{"label":"A","description":"first"},{"label":"B"}]}]}`
	ixQuestionRequest2 = `{"kind":"question","toolUseId":"tu3","questions":[` +
		`{"question":"Q1","options":[{"label":"A"},{"label":"B"},{"label":"C"}]},` +
		`{"question":"Q2","options":[{"label":"A"},{"label":"B"}]}]}`
	ixAdditionalRequest = `{"kind":"permission","toolUseId":"tu4","prompt":{"kind":"additional_permissions",` +
		`"toolName":"Bash","category":"shell_unsafe","reason":"additional_permissions",` +
		`"review":{"kind":"additional_permissions","cwd":"/work","paths":[{"path":"/data","access":"write","scope":"subtree"}],"networkEnabled":true},` +
		`"risk":{"outsideWorkspace":true,"protectedMetadata":false,"networkEnabled":true},` +
		`"alsoApprovesToolExecution":false,"availableDecisions":["allow_once","deny"]}}`
	ixSandboxRequest = `{"kind":"permission","toolUseId":"tu5","prompt":{"kind":"sandbox_escalation","toolName":"Bash",` +
		`"category":"shell_unsafe","reason":"sandbox_escalation","review":{"kind":"command","command":"npm install","cwd":"/work"},` +
		`"trigger":"sandbox_denial","risk":{"unsandboxedExecution":true,"unrestrictedFileSystem":true,"unrestrictedNetwork":true,"protectedMetadataExposed":true},` +
		`"alsoApprovesToolExecution":true,"availableDecisions":["allow_once","deny"]}}`

	ixAllowRemember = `{"kind":"permission_answer","reviewer":"user","committedAt":1700000000000,"decision":"allow","rememberForTurn":true}`
	ixAutoDeny      = `{"kind":"permission_answer","reviewer":"auto_review","committedAt":5,"decision":"deny","rememberForTurn":false,"rationale":"too risky","riskLevel":"high"}`
	ixQuestionOut   = `{"kind":"question_answer","answers":["A"],"committedAt":7}`
	ixTimedOut      = `{"kind":"closure","reason":"timed_out","committedAt":9}`
)

// ixToolPrompt builds a canonical tool_permission prompt.
func ixToolPrompt(tool, category, review string, remember bool) string {
	return fmt.Sprintf(`{"kind":"tool_permission","toolName":%q,"category":%q,"reason":%q,"review":%s,"rememberForTurnAllowed":%v}`,
		tool, category, PermissionReasonForCategory(category), review, remember)
}

// ixPermission wraps a prompt into a permission request.
func ixPermission(prompt string) string {
	return `{"kind":"permission","toolUseId":"tu1","prompt":` + prompt + `}`
}

// ixSnapshot builds a canonical snapshot; outcome "" means pending.
func ixSnapshot(request, outcome string) string {
	if outcome == "" {
		return `{"schemaVersion":1,"interactionId":"i1","sessionId":"s1","turnId":"t1","runId":"r1","revision":1,` +
			`"request":` + request + `,"status":"pending","outcome":null}`
	}
	status := InteractionStatusAnswered
	if strings.Contains(outcome, `"kind":"closure"`) {
		status = InteractionStatusClosed
	}
	return `{"schemaVersion":1,"interactionId":"i1","sessionId":"s1","turnId":"t1","runId":"r1","revision":2,` +
		`"request":` + request + `,"status":"` + status + `","outcome":` + outcome + `}`
}

// ixValidPrompts are canonical tool_permission prompts, one per review shape
// and tool identity rule.
var ixValidPrompts = map[string]string{
	"bash fs":       ixBashPrompt,
	"bash unsafe":   ixToolPrompt("Bash", "shell_unsafe", `{"kind":"command","command":"ls -la"}`, true),
	"bash priv":     ixToolPrompt("Bash", "privileged", `{"kind":"command","command":"sudo make install"}`, false),
	"bash git":      ixToolPrompt("Bash", "git_destructive", `{"kind":"command","command":"git push --force"}`, true),
	"read":          ixToolPrompt("Read", "read", `{"kind":"path","operation":"read","path":"src/main.go"}`, true),
	"write":         ixToolPrompt("Write", "file_write", `{"kind":"path","operation":"write","path":"out.txt"}`, true),
	"edit":          ixToolPrompt("Edit", "file_write", `{"kind":"path","operation":"edit","path":"ünïcødé.go"}`, true),
	"write content": ixToolPrompt("Write", "file_write", `{"kind":"path","operation":"write","path":"out.txt","content":{"lines":["package a","","func F() {}"],"bytes":23,"truncated":false}}`, true),
	"edit diff":     ixToolPrompt("Edit", "file_write", `{"kind":"path","operation":"edit","path":"a.go","oldString":{"lines":["a := 1"],"bytes":6,"truncated":false},"newString":{"lines":[],"bytes":0,"truncated":true}}`, true),
	"glob":          ixToolPrompt("Glob", "read", `{"kind":"search","operation":"glob","pattern":"**/*.go","root":"."}`, true),
	"grep":          ixToolPrompt("Grep", "read", `{"kind":"search","operation":"grep","pattern":"TODO","root":"src","glob":"*.go"}`, true),
	"webfetch":      ixToolPrompt("WebFetch", "web_read", `{"kind":"web","targetKind":"url","target":"https://example.com/?a=1&b=<2>"}`, true),
	"websearch":     ixToolPrompt("WebSearch", "web_read", `{"kind":"web","targetKind":"query","target":"golang fuzzing"}`, false),
	"stdin full":    ixToolPrompt("WriteStdin", "shell_unsafe", `{"kind":"stdin","ref":"proc-1","input":{"text":"yes","bytes":4,"truncated":false},"size":{"cols":80,"rows":24}}`, false),
	"stdin ref":     ixToolPrompt("WriteStdin", "shell_unsafe", `{"kind":"stdin","ref":"proc-1"}`, false),
	"stdin size":    ixToolPrompt("WriteStdin", "shell_unsafe", `{"kind":"stdin","size":{"cols":1,"rows":1}}`, false),
	"tool":          ixToolPrompt("mcp__db__query", "custom_tool", `{"kind":"tool","arguments":{"text":"{\"sql\":\"select 1\"}","bytes":20,"truncated":false}}`, true),
	"tool empty":    ixToolPrompt("mcp__x", "network_send", `{"kind":"tool","arguments":{"text":"","bytes":0,"truncated":true}}`, true),
	"tool safe cat": ixToolPrompt("custom", "shell_safe", `{"kind":"tool","arguments":{"text":"x","bytes":1,"truncated":false}}`, true),
	"tool hinted":   ixToolPrompt("mcp__echo__echo", "custom_tool", `{"kind":"tool","arguments":{"text":"{}","bytes":2,"truncated":false},"serverReadOnlyHint":true}`, true),
	"computer use":  ixToolPrompt("computer", "computer_use", `{"kind":"computer_use","action":"click","approvalClass":"pointer_mutation","app":"Finder","windowId":3,"observationId":"obs-1"}`, false),
	"computer min":  ixToolPrompt("computer", "computer_use", `{"kind":"computer_use","action":"list windows","approvalClass":"metadata_read"}`, true),
	"navigate":      ixToolPrompt("browser_navigate", "browser", `{"kind":"browser","action":"navigate","url":"https://example.com"}`, true),
	"snapshot":      ixToolPrompt("browser_snapshot", "browser", `{"kind":"browser","action":"snapshot"}`, true),
	"click":         ixToolPrompt("browser_click", "browser", `{"kind":"browser","action":"click","ref":"e12"}`, true),
	"type":          ixToolPrompt("browser_type", "browser", `{"kind":"browser","action":"type","ref":"e3","input":{"text":"","bytes":0,"truncated":false},"submit":true}`, true),
	"type text":     ixToolPrompt("browser_type", "browser", `{"kind":"browser","action":"type","ref":"e3","input":{"text":"hello","bytes":5,"truncated":false},"submit":false}`, true),
	"wait text":     ixToolPrompt("browser_wait", "browser", `{"kind":"browser","action":"wait","condition":"text","value":"Done","timeoutSeconds":30}`, true),
	"wait selector": ixToolPrompt("browser_wait", "browser", `{"kind":"browser","action":"wait","condition":"selector","value":"#ok","timeoutSeconds":120}`, true),
	"wait duration": ixToolPrompt("browser_wait", "browser", `{"kind":"browser","action":"wait","condition":"duration","seconds":2.5}`, true),
	"extract":       ixToolPrompt("browser_extract", "browser", `{"kind":"browser","action":"extract","start":0,"selector":""}`, true),
	"extract min":   ixToolPrompt("browser_extract", "browser", `{"kind":"browser","action":"extract","start":40}`, true),
}

// ixValidSnapshots are canonical snapshots in every state.
func ixValidSnapshots() map[string]string {
	m := map[string]string{
		"pending bash":          ixSnapshot(ixBashRequest, ""),
		"pending question":      ixSnapshot(ixQuestionRequest, ""),
		"pending two questions": ixSnapshot(ixQuestionRequest2, ""),
		"pending additional":    ixSnapshot(ixAdditionalRequest, ""),
		"pending sandbox":       ixSnapshot(ixSandboxRequest, ""),
		"pending additional protected": ixSnapshot(strings.NewReplacer(`"protectedMetadata":false`, `"protectedMetadata":true`,
			`"alsoApprovesToolExecution":false`, `"alsoApprovesToolExecution":true`).Replace(ixAdditionalRequest), ""),
		"answered remember":      ixSnapshot(ixBashRequest, ixAllowRemember),
		"answered auto deny":     ixSnapshot(ixBashRequest, ixAutoDeny),
		"answered additional":    ixSnapshot(ixAdditionalRequest, `{"kind":"permission_answer","reviewer":"user","committedAt":0,"decision":"allow","rememberForTurn":false}`),
		"answered sandbox":       ixSnapshot(ixSandboxRequest, `{"kind":"permission_answer","reviewer":"auto_review","committedAt":1,"decision":"allow","rememberForTurn":false,"riskLevel":"critical"}`),
		"answered question":      ixSnapshot(ixQuestionRequest, ixQuestionOut),
		"answered two questions": ixSnapshot(ixQuestionRequest2, `{"kind":"question_answer","answers":[null,"C"],"committedAt":9007199254740991}`),
		"closed timed out":       ixSnapshot(ixBashRequest, ixTimedOut),
		"closed question":        ixSnapshot(ixQuestionRequest, `{"kind":"closure","reason":"turn_stopped","committedAt":1}`),
		"closed terminal":        ixSnapshot(ixSandboxRequest, `{"kind":"closure","reason":"turn_terminal","committedAt":1}`),
		"closed restarted":       ixSnapshot(ixQuestionRequest2, `{"kind":"closure","reason":"host_restarted","committedAt":1}`),
	}
	for name, p := range ixValidPrompts {
		m["pending "+name] = ixSnapshot(ixPermission(p), "")
	}
	return m
}

// ---------------------------------------------------------------------------
// Helpers

func ixParse(t testing.TB, s string) Value {
	t.Helper()
	v, err := Parse([]byte(s))
	if err != nil {
		t.Fatalf("parse %s: %v", s, err)
	}
	return v
}

func ixCodec(t testing.TB, op string, input bool) func(Value) (any, error) {
	t.Helper()
	spec, ok := Lookup(op)
	if !ok || !spec.HasCodecs() {
		t.Fatalf("%s has no codecs", op)
	}
	if input {
		return spec.DecodeInput
	}
	return spec.DecodeOutput
}

// ixRoundTrip asserts that s decodes and re-encodes to want.
func ixRoundTrip(t *testing.T, decode func(Value) (any, error), s, want string) any {
	t.Helper()
	out, err := decode(ixParse(t, s))
	if err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	b, err := Marshal(out)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	if string(b) != want {
		t.Fatalf("round trip\n got %s\nwant %s", b, want)
	}
	return out
}

func ixWantInvalid(t *testing.T, err error) {
	t.Helper()
	var pe *ProtocolError
	if !errors.As(err, &pe) || pe.Code != CodeInvalidFrame {
		t.Fatalf("got %v, want an invalid_frame protocol error", err)
	}
}

// ixEdit is one change to a JSON document: set the value at a dotted path
// ("request.prompt.review.command", "questions.0.options.1") to a JSON text,
// or delete it when del is set.
type ixEdit struct {
	path string
	json string
	del  bool
}

func ixSet(path, jsonText string) ixEdit { return ixEdit{path: path, json: jsonText} }
func ixDel(path string) ixEdit           { return ixEdit{path: path, del: true} }
func ixStr(path, s string) ixEdit {
	b, _ := json.Marshal(s)
	return ixEdit{path: path, json: string(b)}
}

// ixApply applies edits to a JSON document and returns the result.
func ixApply(t testing.TB, doc string, edits ...ixEdit) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		t.Fatalf("bad base document: %v", err)
	}
	for _, e := range edits {
		var val any
		if !e.del {
			val = json.RawMessage(e.json)
		}
		root = ixEditAt(t, root, strings.Split(e.path, "."), val, e.del)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(root); err != nil {
		t.Fatalf("encode: %v", err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

func ixEditAt(t testing.TB, node any, path []string, val any, del bool) any {
	t.Helper()
	key := path[0]
	switch n := node.(type) {
	case map[string]any:
		if len(path) == 1 {
			if del {
				delete(n, key)
			} else {
				n[key] = val
			}
			return n
		}
		n[key] = ixEditAt(t, n[key], path[1:], val, del)
		return n
	case []any:
		i, err := strconv.Atoi(key)
		if err != nil || i < 0 || i > len(n) {
			t.Fatalf("bad index %q", key)
		}
		if len(path) == 1 {
			switch {
			case del:
				return append(n[:i:i], n[i+1:]...)
			case i == len(n):
				return append(n, val)
			default:
				n[i] = val
				return n
			}
		}
		n[i] = ixEditAt(t, n[i], path[1:], val, del)
		return n
	}
	t.Fatalf("cannot descend into %T at %q", node, key)
	return nil
}

// ixInvalidCase is one document that must be rejected.
type ixInvalidCase struct {
	name string
	doc  string
}

func ixCheckInvalid(t *testing.T, decode func(Value) (any, error), cases []ixInvalidCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := Parse([]byte(c.doc))
			if err != nil {
				t.Fatalf("test document does not parse: %v\n%s", err, c.doc)
			}
			out, err := decode(v)
			if err == nil {
				b, _ := Marshal(out)
				t.Fatalf("accepted %s\n-> %s", c.doc, b)
			}
			ixWantInvalid(t, err)
		})
	}
}

// ixCheckCanonical asserts that each canonical document round-trips byte for
// byte.
func ixCheckCanonical(t *testing.T, decode func(Value) (any, error), docs map[string]string) {
	t.Helper()
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			ixRoundTrip(t, decode, doc, doc)
		})
	}
}

// ixCheckValid asserts that each document decodes, that its encoding is
// the same JSON (up to key order), and that the encoding decodes to the
// same value.
func ixCheckValid(t *testing.T, decode func(Value) (any, error), docs map[string]string) {
	t.Helper()
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			out, err := decode(ixParse(t, doc))
			if err != nil {
				t.Fatalf("decode %s: %v", doc, err)
			}
			b, err := Marshal(out)
			if err != nil {
				t.Fatal(err)
			}
			var a, c any
			if json.Unmarshal([]byte(doc), &a) != nil || json.Unmarshal(b, &c) != nil || !reflect.DeepEqual(a, c) {
				t.Fatalf("encoding differs\n got %s\nwant %s", b, doc)
			}
			again, err := decode(ixParse(t, string(b)))
			if err != nil || !reflect.DeepEqual(again, out) {
				t.Fatalf("re-decode: %v", err)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// interaction.query

func TestInteractionQueryInput(t *testing.T) {
	dec := ixCodec(t, "interaction.query", true)
	out := ixRoundTrip(t, dec, `{"sessionId":"s-1","interactionId":"req_9"}`, `{"sessionId":"s-1","interactionId":"req_9"}`)
	if got := out.(InteractionQueryInput); got != (InteractionQueryInput{SessionID: "s-1", InteractionID: "req_9"}) {
		t.Fatalf("decoded %+v", got)
	}
	ixRoundTrip(t, dec, `{"interactionId":"b","sessionId":"a"}`, `{"sessionId":"a","interactionId":"b"}`)
	long := strings.Repeat("x", 128)
	ixRoundTrip(t, dec, `{"sessionId":"`+long+`","interactionId":"b"}`, `{"sessionId":"`+long+`","interactionId":"b"}`)
	ixCheckInvalid(t, dec, []ixInvalidCase{
		{"not an object", `[]`},
		{"null", `null`},
		{"missing interactionId", `{"sessionId":"s"}`},
		{"extra key", `{"sessionId":"s","interactionId":"i","x":1}`},
		{"empty session", `{"sessionId":"","interactionId":"i"}`},
		{"session not entity id", `{"sessionId":"s 1","interactionId":"i"}`},
		{"id too long", `{"sessionId":"s","interactionId":"` + long + `x"}`},
		{"id number", `{"sessionId":"s","interactionId":1}`},
	})
}

func TestInteractionSnapshotValid(t *testing.T) {
	ixCheckCanonical(t, ixCodec(t, "interaction.query", false), ixValidSnapshots())
}

func TestInteractionSnapshotDecodedShape(t *testing.T) {
	out := ixRoundTrip(t, ixCodec(t, "interaction.query", false), ixSnapshot(ixBashRequest, ixAllowRemember),
		ixSnapshot(ixBashRequest, ixAllowRemember))
	s := out.(InteractionSnapshot)
	cwd := "/work"
	want := InteractionSnapshot{
		SchemaVersion: 1, InteractionID: "i1", SessionID: "s1", TurnID: "t1", RunID: "r1", Revision: 2,
		Request: InteractionRequest{Kind: InteractionKindPermission, ToolUseID: "tu1", Prompt: ToolPermissionPrompt{
			ToolName: "Bash", Category: ToolCategoryFSDestructive, Reason: PermissionReasonFSDestructive,
			Review: CommandReview{Command: "rm -rf build", Cwd: &cwd}, RememberForTurnAllowed: true,
		}},
		Status: InteractionStatusAnswered,
		Outcome: &InteractionCanonicalOutcome{Kind: InteractionOutcomePermissionAnswer, Reviewer: InteractionReviewerUser,
			CommittedAt: 1700000000000, Decision: InteractionDecisionAllow, RememberForTurn: true},
	}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("decoded\n%#v\nwant\n%#v", s, want)
	}
	q, err := DecodeInteractionRequest(ixParse(t, ixQuestionRequest))
	if err != nil {
		t.Fatal(err)
	}
	wantQ := InteractionRequest{Kind: InteractionKindQuestion, ToolUseID: "tu2", Questions: []InteractionQuestion{{
		Question: "Which one?", Options: []InteractionOption{{Label: "A", Description: "first"}, {Label: "B"}},
	}}}
	if !reflect.DeepEqual(q, wantQ) {
		t.Fatalf("decoded %#v", q)
	}
}

func TestInteractionSnapshotNormalizes(t *testing.T) {
	dec := ixCodec(t, "interaction.query", false)
	canonical := ixSnapshot(ixBashRequest, ixAllowRemember)
	// Integral doubles, reordered keys, escapes and duplicate keys decode to
	// the canonical form.
	in := strings.Replace(canonical, `"schemaVersion":1`, `"schemaVersion":1.0`, 1)
	in = strings.Replace(in, `"revision":2`, `"revision":2e0`, 1)
	in = strings.Replace(in, `"committedAt":1700000000000`, `"committedAt":1.7e12`, 1)
	in = strings.Replace(in, `"command":"rm -rf build"`, `"command":"rm -rf \u0062uild"`, 1)
	in = strings.Replace(in, `"toolUseId":"tu1"`, `"toolUseId":"zz","toolUseId":"tu1"`, 1)
	ixRoundTrip(t, dec, in, canonical)
	waitIn := ixSnapshot(ixPermission(ixToolPrompt("browser_wait", "browser",
		`{"kind":"browser","timeoutSeconds":1.20e2,"value":"x","condition":"text","action":"wait"}`, true)), "")
	waitOut := ixSnapshot(ixPermission(ixToolPrompt("browser_wait", "browser",
		`{"kind":"browser","action":"wait","condition":"text","value":"x","timeoutSeconds":120}`, true)), "")
	ixRoundTrip(t, dec, waitIn, waitOut)
	negZero := ixSnapshot(ixPermission(ixToolPrompt("browser_extract", "browser",
		`{"kind":"browser","action":"extract","start":-0}`, true)), "")
	ixRoundTrip(t, dec, negZero, strings.Replace(negZero, "-0", "0", 1))
}

func TestInteractionSnapshotInvalid(t *testing.T) {
	pending := ixSnapshot(ixBashRequest, "")
	answered := ixSnapshot(ixBashRequest, ixAllowRemember)
	closed := ixSnapshot(ixQuestionRequest, `{"kind":"closure","reason":"turn_stopped","committedAt":1}`)
	ixCheckInvalid(t, ixCodec(t, "interaction.query", false), []ixInvalidCase{
		{"array", `[]`},
		{"null", `null`},
		{"missing outcome", ixApply(t, pending, ixDel("outcome"))},
		{"missing request", ixApply(t, pending, ixDel("request"))},
		{"extra key", ixApply(t, pending, ixSet("createdAt", "1"))},
		{"schemaVersion 2", ixApply(t, pending, ixSet("schemaVersion", "2"))},
		{"schemaVersion string", ixApply(t, pending, ixSet("schemaVersion", `"1"`))},
		{"interactionId pattern", ixApply(t, pending, ixStr("interactionId", "a/b"))},
		{"interactionId too long", ixApply(t, pending, ixStr("interactionId", strings.Repeat("a", 129)))},
		{"sessionId empty", ixApply(t, pending, ixStr("sessionId", ""))},
		{"turnId number", ixApply(t, pending, ixSet("turnId", "1"))},
		{"runId null", ixApply(t, pending, ixSet("runId", "null"))},
		{"revision 0", ixApply(t, pending, ixSet("revision", "0"))},
		{"revision 3", ixApply(t, pending, ixSet("revision", "3"))},
		{"revision 1.5", ixApply(t, pending, ixSet("revision", "1.5"))},
		{"status unknown", ixApply(t, pending, ixStr("status", "resolved"))},
		{"pending revision 2", ixApply(t, pending, ixSet("revision", "2"))},
		{"pending with outcome", ixApply(t, pending, ixSet("outcome", ixAllowRemember))},
		{"answered revision 1", ixApply(t, answered, ixSet("revision", "1"))},
		{"answered null outcome", ixApply(t, answered, ixSet("outcome", "null"))},
		{"answered closure", ixApply(t, answered, ixSet("outcome", ixTimedOut))},
		{"closed answer outcome", ixApply(t, answered, ixStr("status", "closed"))},
		{"closed revision 1", ixApply(t, closed, ixSet("revision", "1"))},
		{"question answered with permission answer", ixApply(t, closed, ixStr("status", "answered"), ixSet("outcome", ixAllowRemember))},
		{"permission answered with question answer", ixApply(t, answered, ixSet("outcome", ixQuestionOut))},
		{"question closed timed_out", ixApply(t, closed, ixStr("outcome.reason", "timed_out"))},
		{"answer count mismatch", ixSnapshot(ixQuestionRequest2, ixQuestionOut)},
		{"remember not allowed by prompt", ixSnapshot(ixPermission(ixValidPrompts["websearch"]), ixAllowRemember)},
		{"remember on additional permissions", ixSnapshot(ixAdditionalRequest, ixAllowRemember)},
		{"remember on sandbox escalation", ixSnapshot(ixSandboxRequest, ixAllowRemember)},
		{"request invalid", ixApply(t, pending, ixStr("request.kind", "other"))},
	})
}

// ---------------------------------------------------------------------------
// Requests

func TestInteractionRequestInvalid(t *testing.T) {
	q := ixSnapshot(ixQuestionRequest, "")
	p := ixSnapshot(ixBashRequest, "")
	ixCheckInvalid(t, ixCodec(t, "interaction.query", false), []ixInvalidCase{
		{"request array", ixApply(t, p, ixSet("request", "[]"))},
		{"kind missing", ixApply(t, p, ixDel("request.kind"))},
		{"kind unknown", ixApply(t, p, ixStr("request.kind", "approval"))},
		{"permission extra key", ixApply(t, p, ixSet("request.questions", "[]"))},
		{"permission missing prompt", ixApply(t, p, ixDel("request.prompt"))},
		{"prompt null", ixApply(t, p, ixSet("request.prompt", "null"))},
		{"toolUseId empty", ixApply(t, p, ixStr("request.toolUseId", ""))},
		{"toolUseId 257 bytes", ixApply(t, p, ixStr("request.toolUseId", strings.Repeat("é", 128)+"x"))},
		{"toolUseId number", ixApply(t, p, ixSet("request.toolUseId", "5"))},
		{"question extra key", ixApply(t, q, ixSet("request.prompt", "{}"))},
		{"questions missing", ixApply(t, q, ixDel("request.questions"))},
		{"questions empty", ixApply(t, q, ixSet("request.questions", "[]"))},
		{"questions four", ixApply(t, q, ixSet("request.questions.1", `{"question":"b","options":[{"label":"a"},{"label":"b"}]}`),
			ixSet("request.questions.2", `{"question":"c","options":[{"label":"a"},{"label":"b"}]}`),
			ixSet("request.questions.3", `{"question":"d","options":[{"label":"a"},{"label":"b"}]}`))},
		{"question not object", ixApply(t, q, ixSet("request.questions.0", `"q"`))},
		{"question extra key", ixApply(t, q, ixSet("request.questions.0.multiSelect", "true"))},
		{"question empty", ixApply(t, q, ixStr("request.questions.0.question", ""))},
		{"question 1025 bytes", ixApply(t, q, ixStr("request.questions.0.question", strings.Repeat("q", 1025)))},
		{"options one", ixApply(t, q, ixDel("request.questions.0.options.1"))},
		{"options four", ixApply(t, q, ixSet("request.questions.0.options.2", `{"label":"C"}`), ixSet("request.questions.0.options.3", `{"label":"D"}`))},
		{"option missing label", ixApply(t, q, ixDel("request.questions.0.options.1.label"))},
		{"option extra key", ixApply(t, q, ixSet("request.questions.0.options.1.value", `"b"`))},
		{"label empty", ixApply(t, q, ixStr("request.questions.0.options.1.label", ""))},
		{"label 257 bytes", ixApply(t, q, ixStr("request.questions.0.options.1.label", strings.Repeat("l", 257)))},
		{"labels duplicate", ixApply(t, q, ixStr("request.questions.0.options.1.label", "A"))},
		{"description empty", ixApply(t, q, ixStr("request.questions.0.options.0.description", ""))},
		{"description null", ixApply(t, q, ixSet("request.questions.0.options.0.description", "null"))},
		{"description 513 bytes", ixApply(t, q, ixStr("request.questions.0.options.0.description", strings.Repeat("d", 513)))},
	})
	ixCheckValid(t, ixCodec(t, "interaction.query", false), map[string]string{
		"toolUseId 256 bytes":   ixApply(t, p, ixStr("request.toolUseId", strings.Repeat("é", 128))),
		"question 1024 bytes":   ixApply(t, q, ixStr("request.questions.0.question", strings.Repeat("q", 1024))),
		"label 256 bytes":       ixApply(t, q, ixStr("request.questions.0.options.1.label", strings.Repeat("l", 256))),
		"description 512":       ixApply(t, q, ixStr("request.questions.0.options.0.description", strings.Repeat("d", 512))),
		"labels differ in case": ixApply(t, q, ixStr("request.questions.0.options.1.label", "a")),
	})
}

// ixBigQuestionRequest builds a question request whose encoding grows by one
// byte per unit of pad; control characters (6 encoded bytes each) make the
// raw byte bounds allow more than 16 KiB.
func ixBigQuestionRequest(pad int) string {
	ctl := strings.Repeat(`\u0001`, 1024)
	plain := `,"options":[{"label":"A"},{"label":"B"}]}`
	return `{"kind":"question","toolUseId":"t","questions":[` +
		`{"question":"` + ctl + `"` + plain + `,{"question":"` + ctl + `"` + plain + `,` +
		`{"question":"` + strings.Repeat("q", pad) + `","options":[{"label":"A","description":"` +
		strings.Repeat(`\u0002`, 512) + `"},{"label":"B"}]}]}`
}

// ixPadFor returns the pad (1 ≤ pad < maxPad) for which build(pad) encodes
// to exactly size bytes, given that each unit of pad adds one byte.
func ixPadFor(t *testing.T, build func(int) string, size, maxPad int) int {
	t.Helper()
	base, err := EncodedSize(ixParse(t, build(1)))
	if err != nil {
		t.Fatal(err)
	}
	pad := size - base + 1
	if pad < 1 || pad >= maxPad {
		t.Fatalf("pad %d out of range", pad)
	}
	if got, _ := EncodedSize(ixParse(t, build(pad))); got != size {
		t.Fatalf("pad %d encodes to %d bytes, want %d", pad, got, size)
	}
	return pad
}

func TestInteractionRequestEncodedBound(t *testing.T) {
	pad := ixPadFor(t, ixBigQuestionRequest, InteractionRequestMaxBytes, InteractionQuestionMaxBytes)
	inside := ixParse(t, ixBigQuestionRequest(pad))
	r, err := DecodeInteractionRequest(inside)
	if err != nil {
		t.Fatalf("16384 bytes rejected: %v", err)
	}
	if size, _ := EncodedSize(r); size != InteractionRequestMaxBytes {
		t.Fatalf("decoded request encodes to %d bytes", size)
	}
	_, err = DecodeInteractionRequest(ixParse(t, ixBigQuestionRequest(pad+1)))
	ixWantInvalid(t, err)
	// and through the codec
	_, err = ixCodec(t, "interaction.query", false)(ixParse(t, ixSnapshot(ixBigQuestionRequest(pad+1), "")))
	ixWantInvalid(t, err)
}

// ---------------------------------------------------------------------------
// Permission prompts

func TestToolPermissionPromptInvalid(t *testing.T) {
	snap := func(prompt string, edits ...ixEdit) string {
		return ixSnapshot(ixPermission(ixApply(t, prompt, edits...)), "")
	}
	bash := ixValidPrompts["bash fs"]
	tool := ixValidPrompts["tool"]
	ixCheckInvalid(t, ixCodec(t, "interaction.query", false), []ixInvalidCase{
		{"prompt kind unknown", snap(bash, ixStr("kind", "permission"))},
		{"prompt missing kind", snap(bash, ixDel("kind"))},
		{"extra key", snap(bash, ixStr("hint", "x"))},
		{"missing rememberForTurnAllowed", snap(bash, ixDel("rememberForTurnAllowed"))},
		{"rememberForTurnAllowed string", snap(bash, ixStr("rememberForTurnAllowed", "true"))},
		{"toolName empty", snap(tool, ixStr("toolName", ""))},
		{"toolName 257 bytes", snap(tool, ixStr("toolName", strings.Repeat("t", 257)))},
		{"category unknown", snap(tool, ixStr("category", "admin"))},
		{"reason unknown", snap(tool, ixStr("reason", "other"))},
		{"reason does not match category", snap(tool, ixStr("reason", "network"))},
		{"reason additional on tool prompt", snap(tool, ixStr("reason", "additional_permissions"))},
		{"review missing", snap(bash, ixDel("review"))},
		{"review kind unknown", snap(bash, ixStr("review.kind", "shell"))},
		{"Bash category mismatch", snap(bash, ixStr("review.command", "ls"))},
		{"Bash shell_safe", snap(ixValidPrompts["bash unsafe"], ixStr("category", "shell_safe"), ixStr("reason", "custom"))},
		{"Bash path review", snap(bash, ixSet("review", `{"kind":"path","operation":"read","path":"x"}`))},
		{"preview line with a control", snap(ixValidPrompts["write"], ixSet("review", `{"kind":"path","operation":"write","path":"x","content":{"lines":["a\tb"],"bytes":3,"truncated":false}}`))},
		{"preview line with a newline", snap(ixValidPrompts["write"], ixSet("review", `{"kind":"path","operation":"write","path":"x","content":{"lines":["a\nb"],"bytes":3,"truncated":false}}`))},
		{"preview too many lines", snap(ixValidPrompts["write"], ixSet("review", `{"kind":"path","operation":"write","path":"x","content":{"lines":[`+strings.Repeat(`"a",`, ReviewPreviewMaxLines)+`"a"],"bytes":3,"truncated":false}}`))},
		{"preview too long", snap(ixValidPrompts["write"], ixSet("review", `{"kind":"path","operation":"write","path":"x","content":{"lines":["`+strings.Repeat("a", ReviewPreviewMaxBytes/2)+`","`+strings.Repeat("a", ReviewPreviewMaxBytes/2+1)+`"],"bytes":3,"truncated":false}}`))},
		{"preview extra key", snap(ixValidPrompts["write"], ixSet("review", `{"kind":"path","operation":"write","path":"x","content":{"lines":[],"bytes":0,"truncated":false,"x":1}}`))},
		{"Read wrong category", snap(ixValidPrompts["read"], ixStr("category", "file_write"), ixStr("reason", "file_write"))},
		{"Read search review", snap(ixValidPrompts["read"], ixSet("review", `{"kind":"search","operation":"glob","pattern":"*","root":"."}`))},
		{"Write read category", snap(ixValidPrompts["write"], ixStr("category", "read"), ixStr("reason", "custom"))},
		{"Edit command review", snap(ixValidPrompts["edit"], ixSet("review", `{"kind":"command","command":"x"}`))},
		{"Glob path review", snap(ixValidPrompts["glob"], ixSet("review", `{"kind":"path","operation":"read","path":"x"}`))},
		{"Grep web category", snap(ixValidPrompts["grep"], ixStr("category", "web_read"))},
		{"WebSearch network_send", snap(ixValidPrompts["websearch"], ixStr("category", "network_send"), ixStr("reason", "network"))},
		{"WebFetch tool review", snap(ixValidPrompts["webfetch"], ixSet("review", `{"kind":"tool","arguments":{"text":"","bytes":0,"truncated":false}}`))},
		{"WriteStdin remembered", snap(ixValidPrompts["stdin ref"], ixSet("rememberForTurnAllowed", "true"))},
		{"WriteStdin command review", snap(ixValidPrompts["stdin ref"], ixSet("review", `{"kind":"command","command":"ls"}`))},
		{"WriteStdin privileged", snap(ixValidPrompts["stdin ref"], ixStr("category", "privileged"), ixStr("reason", "privileged"))},
		{"browser action mismatch", snap(ixValidPrompts["click"], ixStr("toolName", "browser_navigate"))},
		{"browser wrong category", snap(ixValidPrompts["click"], ixStr("category", "computer_use"), ixStr("reason", "computer_use"))},
		{"browser tool review", snap(ixValidPrompts["click"], ixSet("review", `{"kind":"tool","arguments":{"text":"","bytes":0,"truncated":false}}`))},
		{"browser review on other tool", snap(ixValidPrompts["click"], ixStr("toolName", "browser_hover"))},
		{"computer_use with tool review", snap(tool, ixStr("category", "computer_use"), ixStr("reason", "computer_use"))},
		{"computer_use review without category", snap(ixValidPrompts["computer use"], ixStr("category", "custom_tool"), ixStr("reason", "custom"))},
		{"other tool path review", snap(tool, ixSet("review", `{"kind":"path","operation":"read","path":"x"}`))},
	})
	ixCheckValid(t, ixCodec(t, "interaction.query", false), map[string]string{
		"toolName 256 bytes": snap(tool, ixStr("toolName", strings.Repeat("t", 256))),
	})
}

func TestToolReviewInvalid(t *testing.T) {
	snap := func(name string, edits ...ixEdit) string {
		return ixSnapshot(ixPermission(ixApply(t, ixValidPrompts[name], edits...)), "")
	}
	ixCheckInvalid(t, ixCodec(t, "interaction.query", false), []ixInvalidCase{
		// command
		{"command empty", snap("bash unsafe", ixStr("review.command", ""))},
		{"command 8193 bytes", snap("bash unsafe", ixStr("review.command", strings.Repeat("z", 8193)))},
		{"command number", snap("bash unsafe", ixSet("review.command", "1"))},
		{"command extra key", snap("bash unsafe", ixStr("review.shell", "bash"))},
		{"cwd empty", snap("bash fs", ixStr("review.cwd", ""))},
		{"cwd null", snap("bash fs", ixSet("review.cwd", "null"))},
		{"cwd 4097 bytes", snap("bash fs", ixStr("review.cwd", strings.Repeat("k", 4097)))},
		// path
		{"path operation", snap("read", ixStr("review.operation", "delete"))},
		{"path empty", snap("read", ixStr("review.path", ""))},
		{"path 4097 bytes", snap("read", ixStr("review.path", strings.Repeat("p", 4097)))},
		{"path extra key", snap("read", ixStr("review.cwd", "/"))},
		{"path missing operation", snap("read", ixDel("review.operation"))},
		// search
		{"search operation", snap("glob", ixStr("review.operation", "find"))},
		{"search missing root", snap("glob", ixDel("review.root"))},
		{"search pattern 4097", snap("glob", ixStr("review.pattern", strings.Repeat("*", 4097)))},
		{"search glob empty", snap("grep", ixStr("review.glob", ""))},
		{"search extra key", snap("grep", ixStr("review.path", "x"))},
		// web
		{"web targetKind", snap("webfetch", ixStr("review.targetKind", "uri"))},
		{"web target empty", snap("webfetch", ixStr("review.target", ""))},
		{"web target 4097", snap("webfetch", ixStr("review.target", strings.Repeat("w", 4097)))},
		// tool
		{"tool missing arguments", snap("tool", ixDel("review.arguments"))},
		{"tool arguments extra key", snap("tool", ixSet("review.arguments.json", "{}"))},
		{"tool text 4097", snap("tool", ixStr("review.arguments.text", strings.Repeat("x", 4097)))},
		{"tool text control", snap("tool", ixStr("review.arguments.text", "a\nb"))},
		{"tool bytes negative", snap("tool", ixSet("review.arguments.bytes", "-1"))},
		{"tool bytes fractional", snap("tool", ixSet("review.arguments.bytes", "1.5"))},
		{"tool bytes unsafe", snap("tool", ixSet("review.arguments.bytes", "9007199254740992"))},
		{"tool truncated string", snap("tool", ixStr("review.arguments.truncated", "no"))},
		// stdin
		{"stdin empty", snap("stdin ref", ixDel("review.ref"))},
		{"stdin ref empty", snap("stdin ref", ixStr("review.ref", ""))},
		{"stdin ref 4097", snap("stdin ref", ixStr("review.ref", strings.Repeat("r", 4097)))},
		{"stdin input text empty", snap("stdin full", ixStr("review.input.text", ""))},
		{"stdin input missing bytes", snap("stdin full", ixDel("review.input.bytes"))},
		{"stdin cols 0", snap("stdin size", ixSet("review.size.cols", "0"))},
		{"stdin rows fractional", snap("stdin size", ixSet("review.size.rows", "1.5"))},
		{"stdin size extra key", snap("stdin size", ixSet("review.size.x", "1"))},
		{"stdin extra key", snap("stdin ref", ixStr("review.text", "x"))},
		// computer_use
		{"computer action empty", snap("computer use", ixStr("review.action", ""))},
		{"computer action missing", snap("computer use", ixDel("review.action"))},
		{"computer approvalClass", snap("computer use", ixStr("review.approvalClass", "mutation"))},
		{"computer app empty", snap("computer use", ixStr("review.app", ""))},
		{"computer windowId negative", snap("computer use", ixSet("review.windowId", "-1"))},
		{"computer observationId 4097", snap("computer use", ixStr("review.observationId", strings.Repeat("o", 4097)))},
		{"computer extra key", snap("computer use", ixStr("review.target", "x"))},
		// browser
		{"browser action unknown", snap("click", ixStr("review.action", "hover"))},
		{"browser action missing", snap("click", ixDel("review.action"))},
		{"navigate extra key", snap("navigate", ixStr("review.ref", "x"))},
		{"navigate url empty", snap("navigate", ixStr("review.url", ""))},
		{"snapshot extra key", snap("snapshot", ixStr("review.url", "x"))},
		{"click ref 4097", snap("click", ixStr("review.ref", strings.Repeat("r", 4097)))},
		{"type text 2049", snap("type", ixStr("review.input.text", strings.Repeat("t", 2049)))},
		{"type missing submit", snap("type", ixDel("review.submit"))},
		{"type input extra key", snap("type", ixSet("review.input.x", "1"))},
		{"type ref empty", snap("type", ixStr("review.ref", ""))},
		{"wait condition unknown", snap("wait text", ixStr("review.condition", "url"))},
		{"wait value blank", snap("wait text", ixStr("review.value", "   "))},
		{"wait value ideographic space", snap("wait text", ixStr("review.value", "\u3000"))},
		{"wait value empty", snap("wait text", ixStr("review.value", ""))},
		{"wait timeout 0", snap("wait text", ixSet("review.timeoutSeconds", "0"))},
		{"wait timeout negative zero", snap("wait text", ixSet("review.timeoutSeconds", "-0"))},
		{"wait timeout 120.5", snap("wait text", ixSet("review.timeoutSeconds", "120.5"))},
		{"wait timeout string", snap("wait text", ixStr("review.timeoutSeconds", "30"))},
		{"wait text with seconds", snap("wait text", ixSet("review.seconds", "1"))},
		{"wait duration with value", snap("wait duration", ixStr("review.value", "x"))},
		{"wait duration missing seconds", snap("wait duration", ixDel("review.seconds"))},
		{"wait duration 121", snap("wait duration", ixSet("review.seconds", "121"))},
		{"wait duration negative", snap("wait duration", ixSet("review.seconds", "-1"))},
		{"extract start negative", snap("extract", ixSet("review.start", "-1"))},
		{"extract start fractional", snap("extract", ixSet("review.start", "0.5"))},
		{"extract missing start", snap("extract", ixDel("review.start"))},
		{"extract selector null", snap("extract", ixSet("review.selector", "null"))},
		{"extract selector 4097", snap("extract", ixStr("review.selector", strings.Repeat("s", 4097)))},
	})
	ixCheckValid(t, ixCodec(t, "interaction.query", false), map[string]string{
		"command 8192 bytes":       snap("bash unsafe", ixStr("review.command", strings.Repeat("z", 8192))),
		"cwd 4096 bytes":           snap("bash fs", ixStr("review.cwd", strings.Repeat("k", 4096))),
		"path 4096 bytes":          snap("read", ixStr("review.path", strings.Repeat("é", 2048))),
		"tool text 4096":           snap("tool", ixStr("review.arguments.text", strings.Repeat("x", 4096))),
		"type text 2048":           snap("type", ixStr("review.input.text", strings.Repeat("t", 2048))),
		"wait timeout small":       snap("wait text", ixSet("review.timeoutSeconds", "0.001")),
		"wait duration 120":        snap("wait duration", ixSet("review.seconds", "120")),
		"extract selector 4096":    snap("extract", ixStr("review.selector", strings.Repeat("s", 4096))),
		"window id 0":              snap("computer use", ixSet("review.windowId", "0")),
		"stdin input only":         snap("stdin full", ixDel("review.ref"), ixDel("review.size")),
		"unassigned bidi-adjacent": snap("read", ixStr("review.path", "a\u2065b\u206ac\u202fd\u00a0e")),
	})
}

func TestReviewTextSafety(t *testing.T) {
	unsafe := map[string]string{
		"NUL": "\x00", "tab": "a\tb", "newline": "a\nb", "US": "\x1f", "DEL": "\x7f", "C1 0x80": "\u0080",
		"NEL": "\u0085", "C1 0x9f": "\u009f", "ALM": "\u061c", "LRM": "\u200e", "RLM": "\u200f",
		"LS": "\u2028", "PS": "\u2029", "LRE": "\u202a", "RLO": "\u202e", "LRI": "\u2066", "PDI": "\u2069",
		"openai key":  "key sk-abcdefghijklmnopqrstuv",
		"github":      "ghp_abcdefghijklmnopqrstuvwxyz",
		"aws":         "AKIAABCDEFGHIJKLMNOP",
		"bearer":      "Authorization: Bearer abcdefghijklmnopqrstuvwxyz",
		"private key": "-----BEGIN RSA PRIVATE KEY-----",
		"hex run":     strings.Repeat("ab", 20),
	}
	for name, s := range unsafe {
		t.Run(name, func(t *testing.T) {
			if IsSafeReviewText(s) {
				t.Fatalf("IsSafeReviewText(%q) = true", s)
			}
			doc := ixSnapshot(ixPermission(ixApply(t, ixValidPrompts["read"], ixStr("review.path", "p"+s))), "")
			_, err := ixCodec(t, "interaction.query", false)(ixParse(t, doc))
			ixWantInvalid(t, err)
		})
	}
	for _, s := range []string{"", "plain", "\u00a0", "\u200d", "\u202f", "\u2065", "\u206a", "😀", strings.Repeat("ab", 19) + "x", "sk-short"} {
		if !IsSafeReviewText(s) {
			t.Errorf("IsSafeReviewText(%q) = false", s)
		}
	}
	if IsSafeReviewText("a\xffb") {
		t.Error("invalid UTF-8 accepted")
	}
}

func TestAdditionalPermissionsPromptInvalid(t *testing.T) {
	base := ixSnapshot(ixAdditionalRequest, "")
	p := "request.prompt."
	paths := make([]string, 33)
	for i := range paths {
		paths[i] = fmt.Sprintf(`{"path":"/p%d","access":"read","scope":"exact"}`, i)
	}
	ixCheckInvalid(t, ixCodec(t, "interaction.query", false), []ixInvalidCase{
		{"extra key", ixApply(t, base, ixSet(p+"rememberForTurnAllowed", "false"))},
		{"missing risk", ixApply(t, base, ixDel(p+"risk"))},
		{"reason custom", ixApply(t, base, ixStr(p+"reason", "custom"))},
		{"toolName empty", ixApply(t, base, ixStr(p+"toolName", ""))},
		{"category unknown", ixApply(t, base, ixStr(p+"category", "shell"))},
		{"also approves missing", ixApply(t, base, ixDel(p+"alsoApprovesToolExecution"))},
		{"decisions reversed", ixApply(t, base, ixSet(p+"availableDecisions", `["deny","allow_once"]`))},
		{"decisions one", ixApply(t, base, ixSet(p+"availableDecisions", `["allow_once"]`))},
		{"decisions three", ixApply(t, base, ixSet(p+"availableDecisions", `["allow_once","deny","allow"]`))},
		{"decisions allow", ixApply(t, base, ixSet(p+"availableDecisions", `["allow","deny"]`))},
		{"decisions null", ixApply(t, base, ixSet(p+"availableDecisions", `null`))},
		{"review kind", ixApply(t, base, ixStr(p+"review.kind", "command"))},
		{"review extra key", ixApply(t, base, ixSet(p+"review.readOnly", "true"))},
		{"review cwd empty", ixApply(t, base, ixStr(p+"review.cwd", ""))},
		{"review cwd unsafe", ixApply(t, base, ixStr(p+"review.cwd", "/a\u202eb"))},
		{"review paths 33", ixApply(t, base, ixSet(p+"review.paths", "["+strings.Join(paths, ",")+"]"))},
		{"review path access", ixApply(t, base, ixStr(p+"review.paths.0.access", "exec"))},
		{"review path scope", ixApply(t, base, ixStr(p+"review.paths.0.scope", "tree"))},
		{"review path empty", ixApply(t, base, ixStr(p+"review.paths.0.path", ""))},
		{"review path 4097", ixApply(t, base, ixStr(p+"review.paths.0.path", strings.Repeat("p", 4097)))},
		{"review path extra key", ixApply(t, base, ixSet(p+"review.paths.0.x", "1"))},
		{"review empty", ixApply(t, base, ixSet(p+"review.paths", "[]"), ixSet(p+"review.networkEnabled", "false"),
			ixSet(p+"risk.networkEnabled", "false"))},
		{"risk network mismatch", ixApply(t, base, ixSet(p+"risk.networkEnabled", "false"))},
		{"risk extra key", ixApply(t, base, ixSet(p+"risk.unsandboxed", "true"))},
		{"risk string", ixApply(t, base, ixStr(p+"risk.outsideWorkspace", "yes"))},
	})
	ixCheckValid(t, ixCodec(t, "interaction.query", false), map[string]string{
		"paths 32":     ixApply(t, base, ixSet(p+"review.paths", "["+strings.Join(paths[:32], ",")+"]")),
		"network only": ixApply(t, base, ixSet(p+"review.paths", "[]")),
		"paths only": ixApply(t, base, ixSet(p+"review.networkEnabled", "false"), ixSet(p+"risk.networkEnabled", "false"),
			ixSet(p+"alsoApprovesToolExecution", "true")),
	})
}

func TestSandboxEscalationPromptInvalid(t *testing.T) {
	base := ixSnapshot(ixSandboxRequest, "")
	p := "request.prompt."
	ixCheckInvalid(t, ixCodec(t, "interaction.query", false), []ixInvalidCase{
		{"extra key", ixApply(t, base, ixStr(p+"hint", "x"))},
		{"toolName", ixApply(t, base, ixStr(p+"toolName", "Shell"))},
		{"reason", ixApply(t, base, ixStr(p+"reason", "shell_dangerous"))},
		{"review without cwd", ixApply(t, base, ixDel(p+"review.cwd"))},
		{"review kind path", ixApply(t, base, ixStr(p+"review.kind", "path"))},
		{"review command unsafe", ixApply(t, base, ixStr(p+"review.command", "npm\tinstall"))},
		{"review command secret", ixApply(t, base, ixStr(p+"review.command", "export K=sk-abcdefghijklmnopqrstuvwxyz"))},
		{"category mismatch", ixApply(t, base, ixStr(p+"review.command", "rm -rf node_modules"))},
		{"category unknown", ixApply(t, base, ixStr(p+"category", "bash"))},
		{"trigger", ixApply(t, base, ixStr(p+"trigger", "manual"))},
		{"risk false", ixApply(t, base, ixSet(p+"risk.unrestrictedNetwork", "false"))},
		{"risk missing key", ixApply(t, base, ixDel(p+"risk.protectedMetadataExposed"))},
		{"risk extra key", ixApply(t, base, ixSet(p+"risk.networkEnabled", "true"))},
		{"decisions", ixApply(t, base, ixSet(p+"availableDecisions", `["allow_once","deny","deny"]`))},
		{"also approves null", ixApply(t, base, ixSet(p+"alsoApprovesToolExecution", "null"))},
	})
	ixCheckValid(t, ixCodec(t, "interaction.query", false), map[string]string{
		"fs destructive": ixApply(t, base, ixStr(p+"review.command", "rm -rf node_modules"), ixStr(p+"category", "fs_destructive")),
		"proactive":      ixApply(t, base, ixStr(p+"trigger", "proactive")),
	})
}

// ---------------------------------------------------------------------------
// Outcomes

func TestInteractionOutcomeInvalid(t *testing.T) {
	perm := ixSnapshot(ixBashRequest, ixAllowRemember)
	auto := ixSnapshot(ixBashRequest, ixAutoDeny)
	quest := ixSnapshot(ixQuestionRequest, ixQuestionOut)
	clos := ixSnapshot(ixBashRequest, ixTimedOut)
	ixCheckInvalid(t, ixCodec(t, "interaction.query", false), []ixInvalidCase{
		{"outcome array", ixApply(t, perm, ixSet("outcome", "[]"))},
		{"kind unknown", ixApply(t, perm, ixStr("outcome.kind", "answer"))},
		{"permission missing reviewer", ixApply(t, perm, ixDel("outcome.reviewer"))},
		{"permission extra key", ixApply(t, perm, ixStr("outcome.answers", "x"))},
		{"reviewer unknown", ixApply(t, perm, ixStr("outcome.reviewer", "bot"))},
		{"committedAt negative", ixApply(t, perm, ixSet("outcome.committedAt", "-1"))},
		{"committedAt fractional", ixApply(t, perm, ixSet("outcome.committedAt", "1.5"))},
		{"committedAt unsafe", ixApply(t, perm, ixSet("outcome.committedAt", "9007199254740992"))},
		{"committedAt string", ixApply(t, perm, ixStr("outcome.committedAt", "1"))},
		{"decision unknown", ixApply(t, perm, ixStr("outcome.decision", "allow_once"))},
		{"deny remembered", ixApply(t, perm, ixStr("outcome.decision", "deny"))},
		{"rememberForTurn string", ixApply(t, perm, ixStr("outcome.rememberForTurn", "false"))},
		{"rationale from user", ixApply(t, perm, ixStr("outcome.rationale", "ok"))},
		{"rationale empty", ixApply(t, auto, ixStr("outcome.rationale", ""))},
		{"rationale 1001 units", ixApply(t, auto, ixStr("outcome.rationale", strings.Repeat("😀", 500)+"x"))},
		{"rationale null", ixApply(t, auto, ixSet("outcome.rationale", "null"))},
		{"riskLevel unknown", ixApply(t, auto, ixStr("outcome.riskLevel", "extreme"))},
		{"riskLevel null", ixApply(t, auto, ixSet("outcome.riskLevel", "null"))},
		{"question extra key", ixApply(t, quest, ixStr("outcome.reviewer", "user"))},
		{"question missing committedAt", ixApply(t, quest, ixDel("outcome.committedAt"))},
		{"answers empty", ixApply(t, quest, ixSet("outcome.answers", "[]"))},
		{"answers four", ixApply(t, quest, ixSet("outcome.answers", `["a","b","c","d"]`))},
		{"answer empty string", ixApply(t, quest, ixSet("outcome.answers", `[""]`))},
		{"answer number", ixApply(t, quest, ixSet("outcome.answers", `[1]`))},
		{"answer 2049 bytes", ixApply(t, quest, ixStr("outcome.answers.0", strings.Repeat("a", 2049)))},
		{"closure reason unknown", ixApply(t, clos, ixStr("outcome.reason", "cancelled"))},
		{"closure extra key", ixApply(t, clos, ixStr("outcome.reviewer", "user"))},
		{"closure missing reason", ixApply(t, clos, ixDel("outcome.reason"))},
	})
	ixCheckValid(t, ixCodec(t, "interaction.query", false), map[string]string{
		"rationale 1000 units": ixApply(t, auto, ixStr("outcome.rationale", strings.Repeat("😀", 500))),
		"answer 2048 bytes":    ixApply(t, quest, ixStr("outcome.answers.0", strings.Repeat("a", 2048))),
		"answer null":          ixApply(t, quest, ixSet("outcome.answers", "[null]")),
		"user no risk":         ixApply(t, auto, ixStr("outcome.reviewer", "user"), ixDel("outcome.rationale"), ixDel("outcome.riskLevel")),
		"auto no rationale":    ixApply(t, auto, ixDel("outcome.rationale")),
	})
}

// ixBigAnswers returns an answers array whose encoding grows by one byte per
// unit of pad (pad ≤ 2048); control characters (6 encoded bytes each) let
// it pass 8 KiB within the raw byte bounds.
func ixBigAnswers(pad int) string {
	ctl := `"` + strings.Repeat(`\u0001`, 1300) + `"`
	return `[` + ctl + `,"` + strings.Repeat("a", pad) + `"]`
}

func TestInteractionOutcomeEncodedBound(t *testing.T) {
	req := `{"kind":"question","toolUseId":"t","questions":[{"question":"1","options":[{"label":"A"},{"label":"B"}]},` +
		`{"question":"2","options":[{"label":"A"},{"label":"B"}]}]}`
	outcome := func(pad int) string {
		return `{"kind":"question_answer","answers":` + ixBigAnswers(pad) + `,"committedAt":1}`
	}
	pad := ixPadFor(t, outcome, InteractionOutcomeMaxBytes, InteractionAnswerTextMaxBytes)
	o, err := DecodeInteractionCanonicalOutcome(ixParse(t, outcome(pad)))
	if err != nil {
		t.Fatalf("8192 bytes rejected: %v", err)
	}
	if size, _ := EncodedSize(o); size != InteractionOutcomeMaxBytes {
		t.Fatalf("decoded outcome encodes to %d bytes", size)
	}
	_, err = DecodeInteractionCanonicalOutcome(ixParse(t, outcome(pad+1)))
	ixWantInvalid(t, err)
	dec := ixCodec(t, "interaction.query", false)
	ixRoundTrip(t, dec, ixSnapshot(req, outcome(pad)), ixSnapshot(req, outcome(pad)))
	_, err = dec(ixParse(t, ixSnapshot(req, outcome(pad+1))))
	ixWantInvalid(t, err)
}

// ---------------------------------------------------------------------------
// interaction.answer

// ixValidAnswerInputs are valid interaction.answer inputs, in canonical form.
func ixValidAnswerInputs() map[string]string {
	return map[string]string{
		"allow remember": `{"interactionId":"i1","answer":{"kind":"permission","decision":"allow","rememberForTurn":true}}`,
		"allow":          `{"interactionId":"i1","answer":{"kind":"permission","decision":"allow","rememberForTurn":false}}`,
		"deny":           `{"interactionId":"i1","answer":{"kind":"permission","decision":"deny","rememberForTurn":false}}`,
		"question":       `{"interactionId":"i1","answer":{"kind":"question","answers":["A",null,"free text"]}}`,
		"question null":  `{"interactionId":"i1","answer":{"kind":"question","answers":[null]}}`,
		"answer 2048":    `{"interactionId":"i1","answer":{"kind":"question","answers":["` + strings.Repeat("é", 1024) + `"]}}`,
	}
}

// ixValidAnsweredSnapshots are valid interaction.answer results, in
// canonical form.
func ixValidAnsweredSnapshots() map[string]string {
	return map[string]string{
		"permission": ixSnapshot(ixBashRequest, ixAllowRemember),
		"auto":       ixSnapshot(ixBashRequest, ixAutoDeny),
		"question":   ixSnapshot(ixQuestionRequest, ixQuestionOut),
	}
}

func TestInteractionAnswerInput(t *testing.T) {
	dec := ixCodec(t, "interaction.answer", true)
	valid := ixValidAnswerInputs()
	ixCheckCanonical(t, dec, valid)
	out := ixRoundTrip(t, dec, valid["question"], valid["question"]).(InteractionAnswerInput)
	if out.InteractionID != "i1" || out.Answer.Kind != InteractionKindQuestion || len(out.Answer.Answers) != 3 ||
		*out.Answer.Answers[0] != "A" || out.Answer.Answers[1] != nil || *out.Answer.Answers[2] != "free text" {
		t.Fatalf("decoded %+v", out)
	}
	base := valid["allow"]
	q := valid["question"]
	ixCheckInvalid(t, dec, []ixInvalidCase{
		{"null", `null`},
		{"missing answer", ixApply(t, base, ixDel("answer"))},
		{"missing interactionId", ixApply(t, base, ixDel("interactionId"))},
		{"extra key", ixApply(t, base, ixStr("sessionId", "s1"))},
		{"interactionId invalid", ixApply(t, base, ixStr("interactionId", "i.1"))},
		{"answer null", ixApply(t, base, ixSet("answer", "null"))},
		{"kind unknown", ixApply(t, base, ixStr("answer.kind", "closure"))},
		{"kind missing", ixApply(t, base, ixDel("answer.kind"))},
		{"decision unknown", ixApply(t, base, ixStr("answer.decision", "allow_once"))},
		{"decision missing", ixApply(t, base, ixDel("answer.decision"))},
		{"rememberForTurn missing", ixApply(t, base, ixDel("answer.rememberForTurn"))},
		{"rememberForTurn null", ixApply(t, base, ixSet("answer.rememberForTurn", "null"))},
		{"deny remembered", ixApply(t, base, ixStr("answer.decision", "deny"), ixSet("answer.rememberForTurn", "true"))},
		{"permission extra key", ixApply(t, base, ixSet("answer.answers", "[]"))},
		{"question extra key", ixApply(t, q, ixStr("answer.decision", "allow"))},
		{"answers missing", ixApply(t, q, ixDel("answer.answers"))},
		{"answers empty", ixApply(t, q, ixSet("answer.answers", "[]"))},
		{"answers four", ixApply(t, q, ixSet("answer.answers.3", `"x"`))},
		{"answers object", ixApply(t, q, ixSet("answer.answers", "{}"))},
		{"answer empty", ixApply(t, q, ixStr("answer.answers.0", ""))},
		{"answer 2049 bytes", ixApply(t, q, ixStr("answer.answers.0", strings.Repeat("é", 1024)+"x"))},
		{"answer bool", ixApply(t, q, ixSet("answer.answers.0", "true"))},
	})
}

func TestInteractionAnswerEncodedBound(t *testing.T) {
	answer := func(pad int) string { return `{"kind":"question","answers":` + ixBigAnswers(pad) + `}` }
	pad := ixPadFor(t, answer, InteractionAnswerMaxBytes, InteractionAnswerTextMaxBytes)
	a, err := DecodeInteractionAnswer(ixParse(t, answer(pad)))
	if err != nil {
		t.Fatalf("8192 bytes rejected: %v", err)
	}
	if size, _ := EncodedSize(a); size != InteractionAnswerMaxBytes {
		t.Fatalf("decoded answer encodes to %d bytes", size)
	}
	_, err = DecodeInteractionAnswer(ixParse(t, answer(pad+1)))
	ixWantInvalid(t, err)
	dec := ixCodec(t, "interaction.answer", true)
	_, err = dec(ixParse(t, `{"interactionId":"i","answer":`+answer(pad+1)+`}`))
	ixWantInvalid(t, err)
	if _, err = dec(ixParse(t, `{"interactionId":"i","answer":`+answer(pad)+`}`)); err != nil {
		t.Fatal(err)
	}
}

func TestInteractionAnswerOutput(t *testing.T) {
	dec := ixCodec(t, "interaction.answer", false)
	answered := ixValidAnsweredSnapshots()
	ixCheckCanonical(t, dec, answered)
	out := ixRoundTrip(t, dec, answered["question"], answered["question"])
	if s, ok := out.(InteractionAnsweredSnapshot); !ok || s.Status != InteractionStatusAnswered || s.Outcome == nil {
		t.Fatalf("decoded %#v", out)
	}
	ixCheckInvalid(t, dec, []ixInvalidCase{
		{"pending", ixSnapshot(ixBashRequest, "")},
		{"closed", ixSnapshot(ixBashRequest, ixTimedOut)},
		{"invalid snapshot", ixApply(t, answered["permission"], ixDel("runId"))},
	})
}

// ---------------------------------------------------------------------------
// Session projection

func TestInteractionProjection(t *testing.T) {
	snap := func(id, session string) string {
		s := ixSnapshot(ixBashRequest, "")
		s = strings.Replace(s, `"interactionId":"i1"`, `"interactionId":"`+id+`"`, 1)
		return strings.Replace(s, `"sessionId":"s1"`, `"sessionId":"`+session+`"`, 1)
	}
	decode := func(doc string) (InteractionProjection, error) {
		d := &D{}
		p := decodeInteractionProjection(d, ixParse(t, doc), "interactions", "s1")
		return p, d.Err()
	}
	list := func(items ...string) string { return `{"pending":[` + strings.Join(items, ",") + `]}` }

	for _, n := range []int{0, 1, 2, InteractionMaxPendingPerSession} {
		items := make([]string, n)
		for i := range items {
			items[i] = snap(fmt.Sprintf("i%d", i), "s1")
		}
		doc := list(items...)
		p, err := decode(doc)
		if err != nil {
			t.Fatalf("%d pending: %v", n, err)
		}
		if len(p.Pending) != n {
			t.Fatalf("%d pending decoded as %d", n, len(p.Pending))
		}
		if b, _ := Marshal(p); string(b) != doc {
			t.Fatalf("round trip\n got %s\nwant %s", b, doc)
		}
	}
	if b, _ := Marshal(InteractionProjection{}); string(b) != `{"pending":[]}` {
		t.Fatalf("zero projection encodes as %s", b)
	}

	over := make([]string, InteractionMaxPendingPerSession+1)
	for i := range over {
		over[i] = snap(fmt.Sprintf("i%d", i), "s1")
	}
	for _, c := range []ixInvalidCase{
		{"null", `null`},
		{"missing pending", `{}`},
		{"extra key", `{"pending":[],"answered":[]}`},
		{"pending null", `{"pending":null}`},
		{"pending object", `{"pending":{}}`},
		{"seventeen", list(over...)},
		{"entry not object", list(`1`)},
		{"entry invalid", list(ixApply(t, snap("i1", "s1"), ixDel("turnId")))},
		{"answered entry", list(ixSnapshot(ixBashRequest, ixAllowRemember))},
		{"closed entry", list(ixSnapshot(ixBashRequest, ixTimedOut))},
		{"other session", list(snap("i1", "s1"), snap("i2", "s2"))},
		{"duplicate id", list(snap("i1", "s1"), snap("i2", "s1"), snap("i1", "s1"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := decode(c.doc)
			ixWantInvalid(t, err)
		})
	}
}

// ---------------------------------------------------------------------------
// Rules shared with the host

func ixMustRequest(t *testing.T, s string) InteractionRequest {
	t.Helper()
	r, err := DecodeInteractionRequest(ixParse(t, s))
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return r
}

func ixAnswers(values ...string) []*string {
	out := make([]*string, len(values))
	for i := range values {
		if values[i] != "<nil>" {
			out[i] = &values[i]
		}
	}
	return out
}

func TestAnswerAcceptable(t *testing.T) {
	bash := ixMustRequest(t, ixBashRequest) // rememberForTurnAllowed
	noRemember := ixMustRequest(t, ixPermission(ixValidPrompts["websearch"]))
	additional := ixMustRequest(t, ixAdditionalRequest)
	sandbox := ixMustRequest(t, ixSandboxRequest)
	q1 := ixMustRequest(t, ixQuestionRequest)
	q2 := ixMustRequest(t, ixQuestionRequest2)
	allow := InteractionAnswer{Kind: InteractionKindPermission, Decision: InteractionDecisionAllow}
	allowRemember := InteractionAnswer{Kind: InteractionKindPermission, Decision: InteractionDecisionAllow, RememberForTurn: true}
	deny := InteractionAnswer{Kind: InteractionKindPermission, Decision: InteractionDecisionDeny}
	denyRemember := InteractionAnswer{Kind: InteractionKindPermission, Decision: InteractionDecisionDeny, RememberForTurn: true}
	one := InteractionAnswer{Kind: InteractionKindQuestion, Answers: ixAnswers("A")}
	two := InteractionAnswer{Kind: InteractionKindQuestion, Answers: ixAnswers("<nil>", "B")}
	tests := []struct {
		name string
		req  InteractionRequest
		ans  InteractionAnswer
		want bool
	}{
		{"allow", bash, allow, true},
		{"deny", bash, deny, true},
		{"allow remember", bash, allowRemember, true},
		{"deny remember", bash, denyRemember, false},
		{"remember not allowed", noRemember, allowRemember, false},
		{"allow without remember", noRemember, allow, true},
		{"additional allow", additional, allow, true},
		{"additional remember", additional, allowRemember, false},
		{"sandbox deny", sandbox, deny, true},
		{"sandbox remember", sandbox, allowRemember, false},
		{"question on permission", bash, one, false},
		{"permission on question", q1, allow, false},
		{"one answer", q1, one, true},
		{"one answer for two", q2, one, false},
		{"two answers", q2, two, true},
		{"two answers for one", q1, two, false},
		{"unknown kind", bash, InteractionAnswer{Kind: "closure"}, false},
		{"no decision", bash, InteractionAnswer{Kind: InteractionKindPermission}, false},
	}
	for _, tt := range tests {
		if got := AnswerAcceptable(tt.req, tt.ans); got != tt.want {
			t.Errorf("%s: AnswerAcceptable = %v, want %v", tt.name, got, tt.want)
		}
		// the committed user outcome of an acceptable answer is valid for
		// the request, and equivalent to the answer
		if tt.want {
			out := UserOutcome(tt.ans, 42)
			if !OutcomeValidForRequest(tt.req, out) {
				t.Errorf("%s: user outcome %+v not valid", tt.name, out)
			}
			if !EquivalentAnswer(out, tt.ans) {
				t.Errorf("%s: user outcome not equivalent to its answer", tt.name)
			}
		}
	}
}

func TestOutcomeValidForRequest(t *testing.T) {
	bash := ixMustRequest(t, ixBashRequest)
	q1 := ixMustRequest(t, ixQuestionRequest)
	closure := func(reason string) InteractionCanonicalOutcome {
		return InteractionCanonicalOutcome{Kind: InteractionOutcomeClosure, Reason: reason, CommittedAt: 1}
	}
	for _, reason := range []string{InteractionClosureTurnStopped, InteractionClosureTurnTerminal, InteractionClosureHostRestarted} {
		if !OutcomeValidForRequest(bash, closure(reason)) || !OutcomeValidForRequest(q1, closure(reason)) {
			t.Errorf("closure %s rejected", reason)
		}
	}
	if !OutcomeValidForRequest(bash, closure(InteractionClosureTimedOut)) {
		t.Error("timed_out rejected for a permission request")
	}
	if OutcomeValidForRequest(q1, closure(InteractionClosureTimedOut)) {
		t.Error("timed_out accepted for a question request")
	}
	if OutcomeValidForRequest(InteractionRequest{}, closure(InteractionClosureTurnStopped)) {
		t.Error("closure accepted for an unknown request kind")
	}
	if OutcomeValidForRequest(bash, InteractionCanonicalOutcome{Kind: "other"}) {
		t.Error("unknown outcome kind accepted")
	}
}

func TestEquivalence(t *testing.T) {
	perm := func(decision string, remember bool, reviewer string, at int64) InteractionCanonicalOutcome {
		return InteractionCanonicalOutcome{Kind: InteractionOutcomePermissionAnswer, Decision: decision,
			RememberForTurn: remember, Reviewer: reviewer, CommittedAt: at}
	}
	qa := func(answers ...string) InteractionCanonicalOutcome {
		return InteractionCanonicalOutcome{Kind: InteractionOutcomeQuestionAnswer, Answers: ixAnswers(answers...)}
	}
	allow := InteractionAnswer{Kind: InteractionKindPermission, Decision: InteractionDecisionAllow}
	tests := []struct {
		name string
		out  InteractionCanonicalOutcome
		ans  InteractionAnswer
		want bool
	}{
		{"same permission", perm("allow", false, "auto_review", 1), allow, true},
		{"different remember", perm("allow", true, "user", 1), allow, false},
		{"different decision", perm("deny", false, "user", 1), allow, false},
		{"permission vs question", perm("allow", false, "user", 1), InteractionAnswer{Kind: InteractionKindQuestion, Answers: ixAnswers("a")}, false},
		{"same answers", qa("a", "<nil>"), InteractionAnswer{Kind: InteractionKindQuestion, Answers: ixAnswers("a", "<nil>")}, true},
		{"null vs string", qa("a", "<nil>"), InteractionAnswer{Kind: InteractionKindQuestion, Answers: ixAnswers("a", "")}, false},
		{"different text", qa("a"), InteractionAnswer{Kind: InteractionKindQuestion, Answers: ixAnswers("b")}, false},
		{"different length", qa("a"), InteractionAnswer{Kind: InteractionKindQuestion, Answers: ixAnswers("a", "a")}, false},
		{"closure", InteractionCanonicalOutcome{Kind: InteractionOutcomeClosure, Reason: "turn_stopped"}, allow, false},
	}
	for _, tt := range tests {
		if got := EquivalentAnswer(tt.out, tt.ans); got != tt.want {
			t.Errorf("%s: EquivalentAnswer = %v, want %v", tt.name, got, tt.want)
		}
	}
	if !EquivalentOutcome(perm("allow", true, "user", 1), perm("allow", true, "auto_review", 2)) {
		t.Error("reviewer or commit time compared")
	}
	if EquivalentOutcome(perm("allow", true, "user", 1), perm("allow", false, "user", 1)) {
		t.Error("rememberForTurn ignored")
	}
	if !EquivalentOutcome(qa("x", "<nil>"), qa("x", "<nil>")) || EquivalentOutcome(qa("x"), qa("y")) {
		t.Error("question outcomes compared wrongly")
	}
	c := func(r string) InteractionCanonicalOutcome {
		return InteractionCanonicalOutcome{Kind: InteractionOutcomeClosure, Reason: r}
	}
	if !EquivalentOutcome(c("timed_out"), c("timed_out")) || EquivalentOutcome(c("timed_out"), c("turn_stopped")) {
		t.Error("closures compared wrongly")
	}
	if EquivalentOutcome(c("timed_out"), perm("allow", false, "user", 1)) {
		t.Error("different kinds equivalent")
	}
}

func TestUserOutcome(t *testing.T) {
	got := UserOutcome(InteractionAnswer{Kind: InteractionKindPermission, Decision: InteractionDecisionDeny, RememberForTurn: true}, 7)
	want := InteractionCanonicalOutcome{Kind: InteractionOutcomePermissionAnswer, Reviewer: InteractionReviewerUser,
		CommittedAt: 7, Decision: InteractionDecisionDeny}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v", got)
	}
	b, _ := Marshal(got)
	if string(b) != `{"kind":"permission_answer","reviewer":"user","committedAt":7,"decision":"deny","rememberForTurn":false}` {
		t.Fatalf("encodes as %s", b)
	}
	q := UserOutcome(InteractionAnswer{Kind: InteractionKindQuestion, Answers: ixAnswers("<nil>", "x")}, 8)
	b, _ = Marshal(q)
	if string(b) != `{"kind":"question_answer","answers":[null,"x"],"committedAt":8}` {
		t.Fatalf("encodes as %s", b)
	}
	if _, err := DecodeInteractionCanonicalOutcome(ixParse(t, string(b))); err != nil {
		t.Fatal(err)
	}
}

func TestPermissionReasonForCategory(t *testing.T) {
	want := map[string]string{
		ToolCategoryShellUnsafe: "shell_dangerous", ToolCategoryFileWrite: "file_write",
		ToolCategoryFSDestructive: "fs_destructive", ToolCategoryNetworkSend: "network",
		ToolCategoryGitDestructive: "git_destructive", ToolCategoryPrivileged: "privileged",
		ToolCategoryBrowser: "browser", ToolCategoryComputerUse: "computer_use",
		ToolCategoryRead: "custom", ToolCategoryWebRead: "custom", ToolCategoryShellSafe: "custom",
		ToolCategoryCustomTool: "custom", ToolCategorySubagent: "custom",
	}
	if len(want) != len(ToolCategories) {
		t.Fatalf("%d categories, want %d", len(ToolCategories), len(want))
	}
	for _, c := range ToolCategories {
		if got := PermissionReasonForCategory(c); got != want[c] {
			t.Errorf("%s -> %s, want %s", c, got, want[c])
		}
	}
}

func TestInteractionRequestValidateAndBuild(t *testing.T) {
	cwd := "/w"
	sel := ""
	built := []InteractionRequest{
		{Kind: InteractionKindPermission, ToolUseID: "u", Prompt: ToolPermissionPrompt{ToolName: "Bash",
			Category: bashcategory.Categorize("git push -f"), Reason: PermissionReasonForCategory(bashcategory.Categorize("git push -f")),
			Review: CommandReview{Command: "git push -f", Cwd: &cwd}}},
		{Kind: InteractionKindPermission, ToolUseID: "u", Prompt: ToolPermissionPrompt{ToolName: "browser_extract",
			Category: ToolCategoryBrowser, Reason: PermissionReasonBrowser, Review: BrowserExtractReview{Selector: &sel}}},
		{Kind: InteractionKindPermission, ToolUseID: "u", Prompt: ToolPermissionPrompt{ToolName: "browser_wait",
			Category: ToolCategoryBrowser, Reason: PermissionReasonBrowser, Review: BrowserDurationWaitReview{Seconds: 1e-7}}},
		{Kind: InteractionKindPermission, ToolUseID: "u", Prompt: AdditionalPermissionsPrompt{ToolName: "Bash",
			Category: ToolCategoryShellUnsafe, Review: AdditionalPermissionsReview{Cwd: "/", Paths: []AdditionalPermissionPath{},
				NetworkEnabled: true}, Risk: AdditionalPermissionsRisk{NetworkEnabled: true}}},
		{Kind: InteractionKindPermission, ToolUseID: "u", Prompt: SandboxEscalationPrompt{Category: ToolCategoryShellUnsafe,
			Command: "make", Cwd: "/w", Trigger: SandboxTriggerProactive}},
		{Kind: InteractionKindQuestion, ToolUseID: "u", Questions: []InteractionQuestion{{Question: "?",
			Options: []InteractionOption{{Label: "y"}, {Label: "n", Description: "no"}}}}},
	}
	for i, r := range built {
		if err := r.Validate(); err != nil {
			t.Errorf("request %d: %v", i, err)
			continue
		}
		b, _ := Marshal(r)
		back := ixMustRequest(t, string(b))
		if !reflect.DeepEqual(back, r) {
			t.Errorf("request %d round trip\n got %#v\nwant %#v", i, back, r)
		}
	}
	bad := []InteractionRequest{
		{},
		{Kind: InteractionKindPermission, ToolUseID: "u"},
		{Kind: InteractionKindPermission, ToolUseID: "u", Prompt: ToolPermissionPrompt{ToolName: "Bash",
			Category: ToolCategoryShellUnsafe, Reason: PermissionReasonShellDangerous, Review: CommandReview{Command: "rm x"}}},
		{Kind: InteractionKindPermission, ToolUseID: "u", Prompt: AdditionalPermissionsPrompt{ToolName: "Bash",
			Category: ToolCategoryShellUnsafe, Review: AdditionalPermissionsReview{Cwd: "/"}}},
		{Kind: InteractionKindQuestion, ToolUseID: "u"},
	}
	for i, r := range bad {
		ixWantInvalidErr(t, fmt.Sprintf("bad request %d", i), r.Validate())
	}
}

func ixWantInvalidErr(t *testing.T, name string, err error) {
	t.Helper()
	var pe *ProtocolError
	if !errors.As(err, &pe) || pe.Code != CodeInvalidFrame {
		t.Errorf("%s: got %v, want invalid_frame", name, err)
	}
}

func TestInteractionDecodersNeverPanic(t *testing.T) {
	// Wrong types at every level of a valid snapshot are rejected or
	// accepted, never a panic (the decoders are called without the codec's
	// recover).
	base := ixSnapshot(ixPermission(ixValidPrompts["stdin full"]), "")
	mustFail := map[string]bool{"request": true, "request.prompt": true, "request.prompt.review": true,
		"request.prompt.kind": true, "request.prompt.review.input": true}
	paths := []string{"request", "request.prompt", "request.prompt.review", "request.prompt.review.input",
		"request.prompt.review.size", "request.prompt.review.input.bytes", "outcome", "request.prompt.kind",
		"request.prompt.review.size.cols", "request.kind", "status", "revision"}
	for _, p := range paths {
		for _, v := range []string{"null", "1", `"x"`, "[]", "{}", "[null]", "true", `{"kind":"browser"}`} {
			d := &D{}
			decodeInteractionSnapshot(d, ixParse(t, ixApply(t, base, ixSet(p, v))), "snapshot")
			if mustFail[p] && !d.Failed() {
				t.Errorf("%s=%s accepted", p, v)
			}
			if d.Failed() {
				ixWantInvalidErr(t, p+"="+v, d.Err())
			}
		}
	}
	for _, f := range []func(Value) error{
		func(v Value) error { _, err := DecodeInteractionRequest(v); return err },
		func(v Value) error { _, err := DecodeInteractionAnswer(v); return err },
		func(v Value) error { _, err := DecodeInteractionCanonicalOutcome(v); return err },
		func(v Value) error { _, err := DecodeInteractionSnapshot(v); return err },
	} {
		for _, v := range []string{"null", "[]", "{}", `{"kind":null}`, `{"kind":"question","answers":[[]]}`,
			`{"kind":"permission","prompt":{"kind":"tool_permission","review":{"kind":"browser","action":"wait"}}}`} {
			ixWantInvalidErr(t, v, f(ixParse(t, v)))
		}
	}
}

// The classifier the decoders check prompts with names wire categories.
func TestBashCategoriesAreToolCategories(t *testing.T) {
	for got, want := range map[string]string{
		bashcategory.Privileged:     ToolCategoryPrivileged,
		bashcategory.FSDestructive:  ToolCategoryFSDestructive,
		bashcategory.GitDestructive: ToolCategoryGitDestructive,
		bashcategory.ShellUnsafe:    ToolCategoryShellUnsafe,
	} {
		if got != want {
			t.Errorf("bashcategory names %q where the protocol names %q", got, want)
		}
	}
}
