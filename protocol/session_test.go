package protocol

import (
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

const (
	ssSummary = `{"sessionId":"s1","name":"My session","workspace":{"kind":"host_path","path":"/home/u/proj"},` +
		`"labels":["alpha","beta"],"modelTarget":{"kind":"explicit","connectionSlug":"openai-main","model":"gpt-5"},` +
		`"permissionMode":"ask","status":"active","createdAt":1700000000000,"lastUsedAt":1700000001000,"isArchived":false}`
	ssArchived = `{"sessionId":"s2","workspace":{"kind":"host_path","path":"/"},"labels":[],"modelTarget":{"kind":"default"},` +
		`"permissionMode":"explore","status":"archived","createdAt":0,"lastUsedAt":5,"isArchived":true,"archivedAt":6}`
	ssCreate = `{"sessionId":"s1","workspace":{"kind":"host_path","path":"/w"}}`

	ssUser      = `{"messageId":"m1","turnId":"t1","role":"user","createdAt":10,"part":1,"text":"hello"}`
	ssThinking  = `{"messageId":"m2","turnId":"t1","role":"thinking","createdAt":11,"part":1,"text":"hmm"}`
	ssAssistant = `{"messageId":"m2","turnId":"t1","role":"assistant","createdAt":11,"part":1,"text":"part one"}`
	ssAssist2   = `{"messageId":"m2","turnId":"t1","role":"assistant","createdAt":11,"part":2,"text":"part two"}`
	ssTool      = `{"messageId":"m3","turnId":"t1","role":"tool","createdAt":12,"part":1,"toolUseId":"tu-1","toolName":"bash","status":"completed","output":"ok\n","truncated":false}`
	ssToolBare  = `{"messageId":"m4","turnId":"t1","role":"tool","createdAt":13,"part":1,"toolUseId":"tu-2","toolName":"read","status":"unknown"}`
)

// ssSess returns a minimal summary with the given id, lastUsedAt and path.
func ssSess(id string, lastUsed int64, path string) string {
	return `{"sessionId":"` + id + `","workspace":{"kind":"host_path","path":` + shStr(path) + `},"labels":[],` +
		`"modelTarget":{"kind":"default"},"permissionMode":"ask","status":"active","createdAt":1,"lastUsedAt":` +
		strconv.FormatInt(lastUsed, 10) + `,"isArchived":false}`
}

func ssPage(cursor string, sessions ...string) string {
	return `{"kind":"page","revision":7,"sessions":[` + strings.Join(sessions, ",") + `],"nextCursor":` + cursor + `}`
}

func ssTranscript(cursor string, messages ...string) string {
	return `{"sessionId":"s1","messages":[` + strings.Join(messages, ",") + `],"nextCursor":` + cursor + `}`
}

// ssUsers returns n user entries with distinct message ids.
func ssUsers(n int) []string {
	var m []string
	for i := range n {
		m = append(m, strings.Replace(ssUser, `"m1"`, `"m`+strconv.Itoa(i)+`"`, 1))
	}
	return m
}

func ssText(id string, part int, text string) string {
	return `{"messageId":"` + id + `","turnId":"t1","role":"assistant","createdAt":20,"part":` + strconv.Itoa(part) + `,"text":` + shStr(text) + `}`
}

// ssSized returns build(n) for the n at which its encoding is exactly target
// bytes; build must grow by one byte per unit of n.
func ssSized(t testing.TB, target int, build func(n int) string) string {
	t.Helper()
	n := target - len(build(0))
	s := build(n)
	if n < 0 || len(s) != target {
		t.Fatalf("cannot size to %d bytes (n=%d, got %d)", target, n, len(s))
	}
	return s
}

// ssSizedCatalogPage is a page of 12 sessions encoding to exactly target bytes.
func ssSizedCatalogPage(t testing.TB, target int) string {
	return ssSized(t, target, func(n int) string {
		var sessions []string
		for i := range 11 {
			sessions = append(sessions, ssSess("s"+strconv.Itoa(10+i), 1000-int64(i), "/"+shRep("a", WorkspacePathMaxBytes-1)))
		}
		sessions = append(sessions, ssSess("s99", 1, "/"+shRep("b", n)))
		return ssPage("null", sessions...)
	})
}

// ssSizedTranscript is a page of one text split in three parts encoding to
// exactly target bytes.
func ssSizedTranscript(t testing.TB, target int) string {
	return ssSized(t, target, func(n int) string {
		full := shRep("a", TranscriptTextMaxBytes)
		return ssTranscript("null", ssText("m1", 1, full), ssText("m1", 2, full), ssText("m1", 3, "z"+shRep("a", n)))
	})
}

func ssValidCases(t testing.TB) []shCase {
	emoji32 := shRep("\U0001F600", 32) // 64 UTF-16 units
	var sixteen []string
	for i := range SessionLabelsMax {
		sixteen = append(sixteen, shStr(strconv.Itoa(10+i)))
	}
	summaryFull := `{"sessionId":"` + shRep("a", 128) + `","name":"` + shRep("\U0001F600", 128) + `",` +
		`"workspace":{"kind":"host_path","path":"/` + shRep("\u00e9", 2047) + `a"},` +
		`"labels":[` + strings.Join(sixteen, ",") + `],` +
		`"modelTarget":{"kind":"explicit","connectionSlug":"` + shRep("z", 64) + `","model":"` + shRep("\u00e9", 512) + `"},` +
		`"permissionMode":"bypass","status":"waiting_for_user","createdAt":9007199254740991,"lastUsedAt":9007199254740991,"isArchived":true,"archivedAt":9007199254740991}`
	var thirtyTwo []string
	for i := range SessionCatalogPageMaxSessions {
		thirtyTwo = append(thirtyTwo, ssSess("s"+strconv.Itoa(10+i), 100, "/"))
	}
	return []shCase{
		// session.create
		{name: "create minimal", op: OpSessionCreate, in: ssCreate},
		{name: "create full", op: OpSessionCreate,
			in: `{"sessionId":"s1","workspace":{"kind":"host_path","path":"/w"},"name":"n","labels":["a","b"],"modelTarget":{"kind":"explicit","connectionSlug":"ab","model":"m"},"permissionMode":"execute","thinking":"high"}`},
		{name: "create default target, key order canonical", op: OpSessionCreate,
			in:   `{"permissionMode":"explore","modelTarget":{"kind":"default"},"workspace":{"path":"//x/../y","kind":"host_path"},"sessionId":"s_1-A"}`,
			want: `{"sessionId":"s_1-A","workspace":{"kind":"host_path","path":"//x/../y"},"modelTarget":{"kind":"default"},"permissionMode":"explore"}`},
		{name: "create empty labels decode as absent", op: OpSessionCreate,
			in: `{"sessionId":"s1","workspace":{"kind":"host_path","path":"/w"},"labels":[]}`, want: ssCreate},
		{name: "create labels in code point order", op: OpSessionCreate,
			in:   `{"sessionId":"s1","workspace":{"kind":"host_path","path":"/w"},"labels":["B","a","\uff5e","\ud83d\ude00"]}`,
			want: `{"sessionId":"s1","workspace":{"kind":"host_path","path":"/w"},"labels":["B","a","` + "\uff5e\",\"\U0001F600" + `"]}`},
		{name: "create labels and name at their unit bounds", op: OpSessionCreate,
			in: `{"sessionId":"s1","workspace":{"kind":"host_path","path":"/w"},"name":"` + shRep("\u00e9", 256) + `","labels":["` + shRep("x", 64) + `","` + emoji32 + `"]}`},
		{name: "create result", op: OpSessionCreate, out: true, in: ssSummary},
		{name: "summary archived, default target", op: OpSessionCreate, out: true, in: ssArchived},
		{name: "summary at every bound", op: OpSessionCreate, out: true, in: summaryFull},
		{name: "summary archived status without isArchived", op: OpSessionCreate, out: true,
			in: strings.Replace(ssSummary, `"status":"active"`, `"status":"archived"`, 1)},
		{name: "summary integral doubles, canonical order", op: OpSessionCreate, out: true,
			in:   `{"isArchived":true,"archivedAt":1e3,"lastUsedAt":-0,"createdAt":2.0,"status":"done","permissionMode":"ask","modelTarget":{"kind":"default"},"labels":[],"workspace":{"kind":"host_path","path":"/"},"name":"x","sessionId":"s"}`,
			want: `{"sessionId":"s","name":"x","workspace":{"kind":"host_path","path":"/"},"labels":[],"modelTarget":{"kind":"default"},"permissionMode":"ask","status":"done","createdAt":2,"lastUsedAt":0,"isArchived":true,"archivedAt":1000}`},

		// session.catalog.query
		{name: "list_start", op: OpSessionCatalogQuery, in: `{"kind":"list_start","includeArchived":false}`},
		{name: "list_start archived", op: OpSessionCatalogQuery, in: `{"kind":"list_start","includeArchived":true}`},
		{name: "list_continue", op: OpSessionCatalogQuery, in: `{"kind":"list_continue","revision":0,"cursor":"` + shRep("\u00e9", 512) + `"}`},
		{name: "list_continue reordered", op: OpSessionCatalogQuery,
			in: `{"cursor":"c","revision":3.0,"kind":"list_continue"}`, want: `{"kind":"list_continue","revision":3,"cursor":"c"}`},
		{name: "get", op: OpSessionCatalogQuery, in: `{"kind":"get","sessionId":"s1"}`},
		{name: "page", op: OpSessionCatalogQuery, out: true, in: ssPage(`"next-1"`, ssSummary, ssArchived)},
		{name: "page empty", op: OpSessionCatalogQuery, out: true, in: ssPage("null")},
		{name: "page ties by sessionId", op: OpSessionCatalogQuery, out: true,
			in: ssPage("null", ssSess("a", 9, "/"), ssSess("b", 9, "/"), ssSess("A", 8, "/"))},
		{name: "page of 32 sessions, cursor of 512 units", op: OpSessionCatalogQuery, out: true,
			in: ssPage(`"`+shRep("\U0001F600", 256)+`"`, thirtyTwo...)},
		{name: "page at 48 KiB", op: OpSessionCatalogQuery, out: true, in: ssSizedCatalogPage(t, SessionCatalogPageMaxBytes)},
		{name: "revision_changed", op: OpSessionCatalogQuery, out: true, in: `{"kind":"revision_changed","expected":3,"actual":5}`},
		{name: "session", op: OpSessionCatalogQuery, out: true, in: `{"kind":"session","session":` + ssSummary + `}`},
		{name: "session null", op: OpSessionCatalogQuery, out: true, in: `{"kind":"session","session":null}`},

		// session.lifecycle.set
		{name: "archive", op: OpSessionLifecycleSet, in: `{"sessionId":"s1","action":"archive"}`},
		{name: "unarchive", op: OpSessionLifecycleSet, in: `{"action":"unarchive","sessionId":"s1"}`, want: `{"sessionId":"s1","action":"unarchive"}`},
		{name: "lifecycle result", op: OpSessionLifecycleSet, out: true, in: ssArchived},

		// session.transcript.page
		{name: "transcript input minimal", op: OpSessionTranscriptPage, in: `{"sessionId":"s1"}`},
		{name: "transcript input full", op: OpSessionTranscriptPage, in: `{"sessionId":"s1","cursor":"` + shRep("c", 512) + `","limit":64}`},
		{name: "transcript input limit 1", op: OpSessionTranscriptPage, in: `{"limit":1.0,"sessionId":"s1"}`, want: `{"sessionId":"s1","limit":1}`},
		{name: "transcript page", op: OpSessionTranscriptPage, out: true,
			in: ssTranscript(`"c2"`, ssUser, ssThinking, ssAssistant, ssAssist2, ssTool, ssToolBare)},
		{name: "transcript page empty", op: OpSessionTranscriptPage, out: true, in: ssTranscript("null")},
		{name: "transcript page starting inside a split text", op: OpSessionTranscriptPage, out: true,
			in: ssTranscript("null", ssAssist2, ssText("m5", 1, "x"), ssText("m6", 1, "y"))},
		{name: "transcript tool fields canonical order", op: OpSessionTranscriptPage, out: true,
			in:   ssTranscript("null", `{"truncated":true,"output":"o","status":"errored","toolName":"t","toolUseId":"tu","part":1,"createdAt":1,"role":"tool","turnId":"t1","messageId":"m"}`),
			want: ssTranscript("null", `{"messageId":"m","turnId":"t1","role":"tool","createdAt":1,"part":1,"toolUseId":"tu","toolName":"t","status":"errored","output":"o","truncated":true}`)},
		{name: "transcript bounds in bytes", op: OpSessionTranscriptPage, out: true,
			in: ssTranscript("null", ssText("m1", 1, shRep("\u00e9", TranscriptTextMaxBytes/2)),
				`{"messageId":"m2","turnId":"t1","role":"tool","createdAt":1,"part":1,"toolUseId":"`+shRep("\u00e9", 128)+`","toolName":"`+shRep("\u00e9", 128)+`","status":"completed","output":"`+shRep("\u00e9", TranscriptToolOutputMaxBytes/2)+`","truncated":true}`)},
		{name: "transcript page at 48 KiB", op: OpSessionTranscriptPage, out: true, in: ssSizedTranscript(t, SessionTranscriptPageMaxBytes)},
		{name: "transcript page of 64 entries", op: OpSessionTranscriptPage, out: true, in: ssTranscript("null", ssUsers(64)...)},
	}
}

func TestSessionValid(t *testing.T) { shCheckValid(t, ssValidCases(t)) }

func TestSessionInvalid(t *testing.T) {
	sum := func(edits ...string) string { return shEdit(t, ssSummary, edits...) }
	arch := func(edits ...string) string { return shEdit(t, ssArchived, edits...) }
	create := func(edits ...string) string { return shEdit(t, ssCreate, edits...) }
	full := `{"sessionId":"s1","cursor":"c","limit":2}`
	tr := ssTranscript("null", ssUser, ssTool)
	trm := func(edits ...string) string { return shEdit(t, tr, edits...) }
	summaryCases := func(op Operation, out bool, wrap func(string) string) []shCase {
		c := []shCase{
			{name: "summary not an object", in: `[]`},
			{name: "summary missing sessionId", in: sum("-sessionId")},
			{name: "summary missing workspace", in: sum("-workspace")},
			{name: "summary missing labels", in: sum("-labels")},
			{name: "summary missing modelTarget", in: sum("-modelTarget")},
			{name: "summary missing permissionMode", in: sum("-permissionMode")},
			{name: "summary missing status", in: sum("-status")},
			{name: "summary missing createdAt", in: sum("-createdAt")},
			{name: "summary missing lastUsedAt", in: sum("-lastUsedAt")},
			{name: "summary missing isArchived", in: sum("-isArchived")},
			{name: "summary extra key", in: sum("extra=1")},
			{name: "summary sessionId not an entity id", in: sum(`sessionId="s 1"`)},
			{name: "summary sessionId of 129", in: sum(`sessionId="` + shRep("a", 129) + `"`)},
			{name: "summary name empty", in: sum(`name=""`)},
			{name: "summary name of 257 units", in: sum(`name="` + shRep("\u00e9", 257) + `"`)},
			{name: "summary name of 257 units (surrogate pairs)", in: sum(`name="x` + shRep("\U0001F600", 128) + `"`)},
			{name: "summary name null", in: sum(`name=null`)},
			{name: "workspace not an object", in: sum(`workspace="/w"`)},
			{name: "workspace missing kind", in: sum("-workspace/kind")},
			{name: "workspace unknown kind", in: sum(`workspace/kind="remote"`)},
			{name: "workspace extra key", in: sum(`workspace/x=1`)},
			{name: "workspace missing path", in: sum("-workspace/path")},
			{name: "workspace path relative", in: sum(`workspace/path="home/u"`)},
			{name: "workspace path drive", in: sum(`workspace/path="C:\\w"`)},
			{name: "workspace path UNC", in: sum(`workspace/path="\\\\srv\\share"`)},
			{name: "workspace path empty", in: sum(`workspace/path=""`)},
			{name: "workspace path with NUL", in: sum(`workspace/path="/a\u0000b"`)},
			{name: "workspace path of 4097 bytes", in: sum(`workspace/path="/` + shRep("\u00e9", 2048) + `"`)},
			{name: "workspace path not a string", in: sum(`workspace/path=1`)},
			{name: "labels not an array", in: sum(`labels="a"`)},
			{name: "labels of 17", in: sum(`labels=["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]`)},
			{name: "label empty", in: sum(`labels=[""]`)},
			{name: "label of 65 units", in: sum(`labels=["` + shRep("\U0001F600", 32) + `x"]`)},
			{name: "label not a string", in: sum(`labels=[1]`)},
			{name: "labels unsorted", in: sum(`labels=["b","a"]`)},
			{name: "labels in UTF-16 order", in: sum(`labels=["\ud83d\ude00","\uff5e"]`)},
			{name: "labels duplicate", in: sum(`labels=["a","a"]`)},
			{name: "modelTarget null", in: sum(`modelTarget=null`)},
			{name: "modelTarget unknown kind", in: sum(`modelTarget={"kind":"auto"}`)},
			{name: "modelTarget kind not a string", in: sum(`modelTarget={"kind":1}`)},
			{name: "modelTarget default with extra key", in: sum(`modelTarget={"kind":"default","model":"m"}`)},
			{name: "modelTarget explicit missing model", in: sum("-modelTarget/model")},
			{name: "modelTarget explicit missing slug", in: sum("-modelTarget/connectionSlug")},
			{name: "modelTarget explicit extra key", in: sum(`modelTarget/x=1`)},
			{name: "modelTarget slug uppercase", in: sum(`modelTarget/connectionSlug="OpenAI"`)},
			{name: "modelTarget slug of 1", in: sum(`modelTarget/connectionSlug="a"`)},
			{name: "modelTarget slug of 65", in: sum(`modelTarget/connectionSlug="` + shRep("a", 65) + `"`)},
			{name: "modelTarget slug trailing dash", in: sum(`modelTarget/connectionSlug="ab-"`)},
			{name: "modelTarget model empty", in: sum(`modelTarget/model=""`)},
			{name: "modelTarget model of 513 units", in: sum(`modelTarget/model="` + shRep("\u00e9", 513) + `"`)},
			{name: "modelTarget model not a string", in: sum(`modelTarget/model=null`)},
			{name: "permissionMode unknown", in: sum(`permissionMode="plan"`)},
			{name: "permissionMode not a string", in: sum(`permissionMode=true`)},
			{name: "status unknown", in: sum(`status="paused"`)},
			{name: "createdAt negative", in: sum(`createdAt=-1`)},
			{name: "createdAt fractional", in: sum(`createdAt=1.5`)},
			{name: "createdAt a string", in: sum(`createdAt="1"`)},
			{name: "lastUsedAt above MAX_SAFE", in: sum(`lastUsedAt=9007199254740992`)},
			{name: "isArchived not a boolean", in: sum(`isArchived=0`)},
			{name: "archivedAt without isArchived", in: sum(`archivedAt=5`)},
			{name: "isArchived without archivedAt", in: arch("-archivedAt")},
			{name: "archivedAt null", in: arch(`archivedAt=null`)},
			{name: "archivedAt negative", in: arch(`archivedAt=-1`)},
		}
		for i := range c {
			c[i].name = string(op) + ": " + c[i].name
			c[i].op, c[i].out, c[i].in = op, out, wrap(c[i].in)
		}
		return c
	}
	id := func(s string) string { return s }
	var cases []shCase
	cases = append(cases, summaryCases(OpSessionCreate, true, id)...)
	cases = append(cases, summaryCases(OpSessionLifecycleSet, true, id)...)
	cases = append(cases, summaryCases(OpSessionCatalogQuery, true, func(s string) string { return `{"kind":"session","session":` + s + `}` })...)
	cases = append(cases, summaryCases(OpSessionCatalogQuery, true, func(s string) string { return ssPage("null", s) })...)
	cases = append(cases, []shCase{
		// session.create input
		{name: "create not an object", op: OpSessionCreate, in: `null`},
		{name: "create missing sessionId", op: OpSessionCreate, in: create("-sessionId")},
		{name: "create missing workspace", op: OpSessionCreate, in: create("-workspace")},
		{name: "create extra key", op: OpSessionCreate, in: create("status=\"active\"")},
		{name: "create bad sessionId", op: OpSessionCreate, in: create(`sessionId="s/1"`)},
		{name: "create relative workspace", op: OpSessionCreate, in: create(`workspace/path="w"`)},
		{name: "create name empty", op: OpSessionCreate, in: create(`name=""`)},
		{name: "create name of 257", op: OpSessionCreate, in: create(`name="` + shRep("n", 257) + `"`)},
		{name: "create name null", op: OpSessionCreate, in: create(`name=null`)},
		{name: "create labels null", op: OpSessionCreate, in: create(`labels=null`)},
		{name: "create labels unsorted", op: OpSessionCreate, in: create(`labels=["b","a"]`)},
		{name: "create labels duplicate", op: OpSessionCreate, in: create(`labels=["a","a"]`)},
		{name: "create label of 65", op: OpSessionCreate, in: create(`labels=["` + shRep("l", 65) + `"]`)},
		{name: "create modelTarget null", op: OpSessionCreate, in: create(`modelTarget=null`)},
		{name: "create modelTarget bad slug", op: OpSessionCreate, in: create(`modelTarget={"kind":"explicit","connectionSlug":"-a","model":"m"}`)},
		{name: "create permissionMode null", op: OpSessionCreate, in: create(`permissionMode=null`)},
		{name: "create permissionMode unknown", op: OpSessionCreate, in: create(`permissionMode="auto"`)},

		// session.catalog.query input
		{name: "query not an object", op: OpSessionCatalogQuery, in: `"list_start"`},
		{name: "query missing kind", op: OpSessionCatalogQuery, in: `{"includeArchived":true}`},
		{name: "query kind null", op: OpSessionCatalogQuery, in: `{"kind":null}`},
		{name: "query unknown kind", op: OpSessionCatalogQuery, in: `{"kind":"list"}`},
		{name: "list_start missing includeArchived", op: OpSessionCatalogQuery, in: `{"kind":"list_start"}`},
		{name: "list_start includeArchived not a boolean", op: OpSessionCatalogQuery, in: `{"kind":"list_start","includeArchived":"true"}`},
		{name: "list_start extra key", op: OpSessionCatalogQuery, in: `{"kind":"list_start","includeArchived":true,"cursor":"c"}`},
		{name: "list_continue missing cursor", op: OpSessionCatalogQuery, in: `{"kind":"list_continue","revision":1}`},
		{name: "list_continue missing revision", op: OpSessionCatalogQuery, in: `{"kind":"list_continue","cursor":"c"}`},
		{name: "list_continue cursor empty", op: OpSessionCatalogQuery, in: `{"kind":"list_continue","revision":1,"cursor":""}`},
		{name: "list_continue cursor of 513", op: OpSessionCatalogQuery, in: `{"kind":"list_continue","revision":1,"cursor":"` + shRep("\u00e9", 513) + `"}`},
		{name: "list_continue cursor null", op: OpSessionCatalogQuery, in: `{"kind":"list_continue","revision":1,"cursor":null}`},
		{name: "list_continue revision negative", op: OpSessionCatalogQuery, in: `{"kind":"list_continue","revision":-1,"cursor":"c"}`},
		{name: "list_continue revision fractional", op: OpSessionCatalogQuery, in: `{"kind":"list_continue","revision":0.5,"cursor":"c"}`},
		{name: "list_continue extra key", op: OpSessionCatalogQuery, in: `{"kind":"list_continue","revision":1,"cursor":"c","includeArchived":true}`},
		{name: "get bad sessionId", op: OpSessionCatalogQuery, in: `{"kind":"get","sessionId":"a.b"}`},
		{name: "get missing sessionId", op: OpSessionCatalogQuery, in: `{"kind":"get"}`},
		{name: "get extra key", op: OpSessionCatalogQuery, in: `{"kind":"get","sessionId":"s1","includeArchived":true}`},

		// session.catalog.query result
		{name: "result not an object", op: OpSessionCatalogQuery, out: true, in: `[]`},
		{name: "result missing kind", op: OpSessionCatalogQuery, out: true, in: `{"session":null}`},
		{name: "result unknown kind", op: OpSessionCatalogQuery, out: true, in: `{"kind":"sessions","session":null}`},
		{name: "page missing nextCursor", op: OpSessionCatalogQuery, out: true, in: `{"kind":"page","revision":1,"sessions":[]}`},
		{name: "page missing sessions", op: OpSessionCatalogQuery, out: true, in: `{"kind":"page","revision":1,"nextCursor":null}`},
		{name: "page missing revision", op: OpSessionCatalogQuery, out: true, in: `{"kind":"page","sessions":[],"nextCursor":null}`},
		{name: "page extra key", op: OpSessionCatalogQuery, out: true, in: `{"kind":"page","revision":1,"sessions":[],"nextCursor":null,"total":0}`},
		{name: "page revision negative", op: OpSessionCatalogQuery, out: true, in: `{"kind":"page","revision":-1,"sessions":[],"nextCursor":null}`},
		{name: "page sessions not an array", op: OpSessionCatalogQuery, out: true, in: `{"kind":"page","revision":1,"sessions":{},"nextCursor":null}`},
		{name: "page session null", op: OpSessionCatalogQuery, out: true, in: ssPage("null", "null")},
		{name: "page nextCursor empty", op: OpSessionCatalogQuery, out: true, in: ssPage(`""`)},
		{name: "page nextCursor of 513 units", op: OpSessionCatalogQuery, out: true, in: ssPage(`"x` + shRep("\U0001F600", 256) + `"`)},
		{name: "page nextCursor not a string", op: OpSessionCatalogQuery, out: true, in: ssPage(`7`)},
		{name: "page of 33 sessions", op: OpSessionCatalogQuery, out: true, in: ssPage("null", slices.Repeat([]string{ssSess("s", 1, "/")}, 33)...)},
		{name: "page oldest first", op: OpSessionCatalogQuery, out: true, in: ssPage("null", ssSess("a", 1, "/"), ssSess("b", 2, "/"))},
		{name: "page tie in descending id order", op: OpSessionCatalogQuery, out: true, in: ssPage("null", ssSess("b", 2, "/"), ssSess("a", 2, "/"))},
		{name: "page duplicate session", op: OpSessionCatalogQuery, out: true, in: ssPage("null", ssSess("a", 2, "/"), ssSess("a", 2, "/"))},
		{name: "page of 48 KiB + 1", op: OpSessionCatalogQuery, out: true, in: ssSizedCatalogPage(t, SessionCatalogPageMaxBytes+1)},
		{name: "revision_changed missing actual", op: OpSessionCatalogQuery, out: true, in: `{"kind":"revision_changed","expected":1}`},
		{name: "revision_changed extra key", op: OpSessionCatalogQuery, out: true, in: `{"kind":"revision_changed","expected":1,"actual":2,"sessions":[]}`},
		{name: "revision_changed negative", op: OpSessionCatalogQuery, out: true, in: `{"kind":"revision_changed","expected":1,"actual":-2}`},
		{name: "revision_changed old key names", op: OpSessionCatalogQuery, out: true, in: `{"kind":"revision_changed","expectedRevision":1,"actualRevision":2}`},
		{name: "session missing", op: OpSessionCatalogQuery, out: true, in: `{"kind":"session"}`},
		{name: "session extra key", op: OpSessionCatalogQuery, out: true, in: `{"kind":"session","session":null,"revision":1}`},
		{name: "session not an object", op: OpSessionCatalogQuery, out: true, in: `{"kind":"session","session":"s1"}`},

		// session.lifecycle.set input
		{name: "lifecycle not an object", op: OpSessionLifecycleSet, in: `[]`},
		{name: "lifecycle missing action", op: OpSessionLifecycleSet, in: `{"sessionId":"s1"}`},
		{name: "lifecycle missing sessionId", op: OpSessionLifecycleSet, in: `{"action":"archive"}`},
		{name: "lifecycle unknown action", op: OpSessionLifecycleSet, in: `{"sessionId":"s1","action":"delete"}`},
		{name: "lifecycle action not a string", op: OpSessionLifecycleSet, in: `{"sessionId":"s1","action":true}`},
		{name: "lifecycle bad sessionId", op: OpSessionLifecycleSet, in: `{"sessionId":"","action":"archive"}`},
		{name: "lifecycle extra key", op: OpSessionLifecycleSet, in: `{"sessionId":"s1","action":"archive","reason":"x"}`},

		// session.transcript.page input
		{name: "transcript input not an object", op: OpSessionTranscriptPage, in: `1`},
		{name: "transcript input missing sessionId", op: OpSessionTranscriptPage, in: shEdit(t, full, "-sessionId")},
		{name: "transcript input bad sessionId", op: OpSessionTranscriptPage, in: shEdit(t, full, `sessionId="é"`)},
		{name: "transcript input extra key", op: OpSessionTranscriptPage, in: shEdit(t, full, `kind="x"`)},
		{name: "transcript input cursor empty", op: OpSessionTranscriptPage, in: shEdit(t, full, `cursor=""`)},
		{name: "transcript input cursor of 513", op: OpSessionTranscriptPage, in: shEdit(t, full, `cursor="`+shRep("c", 513)+`"`)},
		{name: "transcript input cursor null", op: OpSessionTranscriptPage, in: shEdit(t, full, `cursor=null`)},
		{name: "transcript input limit 0", op: OpSessionTranscriptPage, in: shEdit(t, full, `limit=0`)},
		{name: "transcript input limit 65", op: OpSessionTranscriptPage, in: shEdit(t, full, `limit=65`)},
		{name: "transcript input limit fractional", op: OpSessionTranscriptPage, in: shEdit(t, full, `limit=1.5`)},
		{name: "transcript input limit null", op: OpSessionTranscriptPage, in: shEdit(t, full, `limit=null`)},
		{name: "transcript input limit a string", op: OpSessionTranscriptPage, in: shEdit(t, full, `limit="2"`)},

		// session.transcript.page result
		{name: "transcript not an object", op: OpSessionTranscriptPage, out: true, in: `null`},
		{name: "transcript missing sessionId", op: OpSessionTranscriptPage, out: true, in: trm("-sessionId")},
		{name: "transcript missing messages", op: OpSessionTranscriptPage, out: true, in: trm("-messages")},
		{name: "transcript missing nextCursor", op: OpSessionTranscriptPage, out: true, in: trm("-nextCursor")},
		{name: "transcript extra key", op: OpSessionTranscriptPage, out: true, in: trm("revision=1")},
		{name: "transcript bad sessionId", op: OpSessionTranscriptPage, out: true, in: trm(`sessionId="s 1"`)},
		{name: "transcript messages not an array", op: OpSessionTranscriptPage, out: true, in: trm(`messages=null`)},
		{name: "transcript nextCursor empty", op: OpSessionTranscriptPage, out: true, in: trm(`nextCursor=""`)},
		{name: "transcript nextCursor of 513", op: OpSessionTranscriptPage, out: true, in: trm(`nextCursor="` + shRep("c", 513) + `"`)},
		{name: "transcript message not an object", op: OpSessionTranscriptPage, out: true, in: trm(`messages/0="m"`)},
		{name: "message missing role", op: OpSessionTranscriptPage, out: true, in: trm("-messages/0/role")},
		{name: "message unknown role", op: OpSessionTranscriptPage, out: true, in: trm(`messages/0/role="system"`)},
		{name: "message missing messageId", op: OpSessionTranscriptPage, out: true, in: trm("-messages/0/messageId")},
		{name: "message missing turnId", op: OpSessionTranscriptPage, out: true, in: trm("-messages/1/turnId")},
		{name: "message missing createdAt", op: OpSessionTranscriptPage, out: true, in: trm("-messages/0/createdAt")},
		{name: "message missing part", op: OpSessionTranscriptPage, out: true, in: trm("-messages/0/part")},
		{name: "message bad messageId", op: OpSessionTranscriptPage, out: true, in: trm(`messages/0/messageId="m:1"`)},
		{name: "message bad turnId", op: OpSessionTranscriptPage, out: true, in: trm(`messages/1/turnId=""`)},
		{name: "message createdAt negative", op: OpSessionTranscriptPage, out: true, in: trm(`messages/0/createdAt=-5`)},
		{name: "message part 0", op: OpSessionTranscriptPage, out: true, in: trm(`messages/0/part=0`)},
		{name: "message part fractional", op: OpSessionTranscriptPage, out: true, in: trm(`messages/0/part=1.5`)},
		{name: "text message missing text", op: OpSessionTranscriptPage, out: true, in: trm("-messages/0/text")},
		{name: "text message with tool fields", op: OpSessionTranscriptPage, out: true, in: trm(`messages/0/toolUseId="tu"`)},
		{name: "text message with output", op: OpSessionTranscriptPage, out: true, in: trm(`messages/0/output="o"`, `messages/0/truncated=false`)},
		{name: "text empty", op: OpSessionTranscriptPage, out: true, in: trm(`messages/0/text=""`)},
		{name: "text of 16385 bytes", op: OpSessionTranscriptPage, out: true, in: trm(`messages/0/text="x` + shRep("\u00e9", TranscriptTextMaxBytes/2) + `"`)},
		{name: "text not a string", op: OpSessionTranscriptPage, out: true, in: trm(`messages/0/text=["a"]`)},
		{name: "tool message with text", op: OpSessionTranscriptPage, out: true, in: trm(`messages/1/text="t"`)},
		{name: "tool missing toolUseId", op: OpSessionTranscriptPage, out: true, in: trm("-messages/1/toolUseId")},
		{name: "tool missing toolName", op: OpSessionTranscriptPage, out: true, in: trm("-messages/1/toolName")},
		{name: "tool missing status", op: OpSessionTranscriptPage, out: true, in: trm("-messages/1/status")},
		{name: "tool extra key", op: OpSessionTranscriptPage, out: true, in: trm(`messages/1/durationMs=3`)},
		{name: "tool toolUseId empty", op: OpSessionTranscriptPage, out: true, in: trm(`messages/1/toolUseId=""`)},
		{name: "tool toolUseId of 129", op: OpSessionTranscriptPage, out: true, in: trm(`messages/1/toolUseId="` + shRep("\u00e9", 129) + `"`)},
		{name: "tool toolName empty", op: OpSessionTranscriptPage, out: true, in: trm(`messages/1/toolName=""`)},
		{name: "tool toolName of 257 bytes", op: OpSessionTranscriptPage, out: true, in: trm(`messages/1/toolName="x` + shRep("\u00e9", 128) + `"`)},
		{name: "tool unknown status", op: OpSessionTranscriptPage, out: true, in: trm(`messages/1/status="running"`)},
		{name: "tool output without truncated", op: OpSessionTranscriptPage, out: true, in: trm("-messages/1/truncated")},
		{name: "tool truncated without output", op: OpSessionTranscriptPage, out: true, in: trm("-messages/1/output")},
		{name: "tool output empty", op: OpSessionTranscriptPage, out: true, in: trm(`messages/1/output=""`)},
		{name: "tool output of 8193 bytes", op: OpSessionTranscriptPage, out: true, in: trm(`messages/1/output="x` + shRep("\u00e9", TranscriptToolOutputMaxBytes/2) + `"`)},
		{name: "tool output null", op: OpSessionTranscriptPage, out: true, in: trm(`messages/1/output=null`)},
		{name: "tool truncated not a boolean", op: OpSessionTranscriptPage, out: true, in: trm(`messages/1/truncated="no"`)},
		{name: "tool part 2", op: OpSessionTranscriptPage, out: true, in: ssTranscript("null", strings.Replace(ssToolBare, `"part":1`, `"part":2`, 1))},
		{name: "part 2 not continuing", op: OpSessionTranscriptPage, out: true, in: ssTranscript("null", ssUser, ssAssist2)},
		{name: "part 2 after another role", op: OpSessionTranscriptPage, out: true, in: ssTranscript("null", ssThinking, ssAssist2)},
		{name: "continuation skips a part", op: OpSessionTranscriptPage, out: true, in: ssTranscript("null", ssText("m", 1, "a"), ssText("m", 3, "b"))},
		{name: "same text message restarts at part 1", op: OpSessionTranscriptPage, out: true, in: ssTranscript("null", ssText("m", 1, "a"), ssText("m", 1, "b"))},
		{name: "continuation changes turnId", op: OpSessionTranscriptPage, out: true,
			in: ssTranscript("null", ssAssistant, strings.Replace(ssAssist2, `"turnId":"t1"`, `"turnId":"t2"`, 1))},
		{name: "continuation changes createdAt", op: OpSessionTranscriptPage, out: true,
			in: ssTranscript("null", ssAssistant, strings.Replace(ssAssist2, `"createdAt":11`, `"createdAt":12`, 1))},
		{name: "transcript of 65 entries", op: OpSessionTranscriptPage, out: true, in: ssTranscript("null", ssUsers(65)...)},
		{name: "transcript of 48 KiB + 1", op: OpSessionTranscriptPage, out: true, in: ssSizedTranscript(t, SessionTranscriptPageMaxBytes+1)},
	}...)
	for _, c := range cases {
		_, err := shDecode(t, c, c.in)
		shWantInvalidFrame(t, c.name, err)
		t.Logf("%s: %v", c.name, err)
	}
}

// The extension rows of docs/protocol.md, written out independently.
func TestSessionOperationTable(t *testing.T) {
	nr, dr, un, in := ErrHostNotReady, ErrHostDraining, ErrOperationUnavailable, ErrInternalFailure
	want := []struct {
		key   string
		mode  Mode
		avail Availability
		errs  []ErrorCode
	}{
		{"session.create", ModeCommand, AvailabilityReady, []ErrorCode{nr, dr, un, ErrOperationConflict, ErrInvalidRequest, ErrPersistenceFailed, ErrCommitOutcomeUnknown, in}},
		{"session.catalog.query", ModeQuery, AvailabilityReady, []ErrorCode{nr, dr, un, ErrInvalidRequest, ErrPersistenceFailed, in}},
		{"session.lifecycle.set", ModeCommand, AvailabilityReady, []ErrorCode{nr, dr, un, ErrNotFound, ErrSessionBusy, ErrPersistenceFailed, ErrCommitOutcomeUnknown, in}},
		{"session.transcript.page", ModeQuery, AvailabilityReady, []ErrorCode{nr, dr, un, ErrNotFound, ErrInvalidRequest, ErrPersistenceFailed, in}},
	}
	for _, w := range want {
		spec, ok := Lookup(w.key)
		if !ok {
			t.Fatalf("%s is not defined", w.key)
		}
		if spec.Mode != w.mode || spec.Availability != w.avail {
			t.Errorf("%s: %s/%s, want %s/%s", w.key, spec.Mode, spec.Availability, w.mode, w.avail)
		}
		if !slices.Equal(spec.Errors, w.errs) {
			t.Errorf("%s: errors %v, want %v", w.key, spec.Errors, w.errs)
		}
		if !spec.HasCodecs() {
			t.Errorf("%s has no codecs", w.key)
		}
	}
	keys := []Operation{OpSessionCreate, OpSessionCatalogQuery, OpSessionLifecycleSet, OpSessionTranscriptPage}
	for i, k := range keys {
		if string(k) != want[i].key {
			t.Errorf("constant %q, want %q", k, want[i].key)
		}
	}
	ops := Operations()
	if len(ops) < V0Operations+len(keys) {
		t.Fatalf("%d operations", len(ops))
	}
	for _, s := range ops[:V0Operations] {
		if strings.HasPrefix(string(s.Key), "session.") {
			t.Errorf("extension %s listed among the v0 operations", s.Key)
		}
	}
}

func TestSessionDecodedTypes(t *testing.T) {
	spec, _ := Lookup(string(OpSessionCreate))
	got, err := spec.DecodeOutput(mustParse(t, ssSummary))
	if err != nil {
		t.Fatal(err)
	}
	s, ok := got.(SessionSummary)
	if !ok || s.SessionID != "s1" || s.Name != "My session" || s.Workspace != HostPathWorkspace("/home/u/proj") ||
		!slices.Equal(s.Labels, []string{"alpha", "beta"}) || s.ModelTarget != (ModelTarget{ModelTargetExplicit, "openai-main", "gpt-5"}) ||
		s.PermissionMode != PermissionModeAsk || s.Status != SessionActive || s.LastUsedAt != 1700000001000 || s.ArchivedAt != nil {
		t.Fatalf("%#v", got)
	}

	in, err := spec.DecodeInput(mustParse(t, ssCreate))
	if err != nil {
		t.Fatal(err)
	}
	if c := in.(SessionCreateInput); c.ModelTarget != nil || c.PermissionMode != "" || c.Labels != nil || c.Name != "" {
		t.Fatalf("absent optional fields decoded as %#v", c)
	}

	spec, _ = Lookup(string(OpSessionCatalogQuery))
	q, err := spec.DecodeInput(mustParse(t, `{"kind":"list_continue","revision":4,"cursor":"c"}`))
	if err != nil {
		t.Fatal(err)
	}
	if q != (SessionCatalogQueryInput{Kind: SessionCatalogListContinue, Revision: 4, Cursor: "c"}) {
		t.Fatalf("%#v", q)
	}
	r, err := spec.DecodeOutput(mustParse(t, ssPage(`"n"`, ssSummary)))
	if err != nil {
		t.Fatal(err)
	}
	if p := r.(SessionCatalogQueryResult); p.Kind != SessionCatalogKindPage || p.Revision != 7 || len(p.Sessions) != 1 || p.NextCursor == nil || *p.NextCursor != "n" {
		t.Fatalf("%#v", r)
	}

	spec, _ = Lookup(string(OpSessionTranscriptPage))
	ti, err := spec.DecodeInput(mustParse(t, `{"sessionId":"s1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if l := ti.(SessionTranscriptPageInput).PageLimit(); l != 64 {
		t.Fatalf("default limit %d", l)
	}
	if l := (SessionTranscriptPageInput{Limit: 3}).PageLimit(); l != 3 {
		t.Fatalf("limit %d", l)
	}
	tp, err := spec.DecodeOutput(mustParse(t, ssTranscript("null", ssUser, ssTool)))
	if err != nil {
		t.Fatal(err)
	}
	page := tp.(SessionTranscriptPage)
	if len(page.Messages) != 2 || page.Messages[0].Text != "hello" || page.Messages[1].Output != "ok\n" ||
		page.Messages[1].Status != TranscriptToolCompleted || page.Messages[1].Role != TranscriptRoleTool {
		t.Fatalf("%#v", page)
	}

	if _, err := DecodeSessionSummary(mustParse(t, ssArchived)); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeSessionSummary(mustParse(t, `{}`)); err == nil {
		t.Fatal("DecodeSessionSummary accepted {}")
	}
	if mt, err := DecodeModelTarget(mustParse(t, `{"kind":"default"}`)); err != nil || mt.Kind != ModelTargetDefault {
		t.Fatalf("%#v %v", mt, err)
	}
	if _, err := DecodeModelTarget(mustParse(t, `{"kind":"explicit"}`)); err == nil {
		t.Fatal("DecodeModelTarget accepted an explicit target without slug")
	}
}

// Values built by host code encode nil lists as [] and nil cursors as null,
// and an invalid discriminator fails to encode.
func TestSessionEncodeHostValues(t *testing.T) {
	at := int64(3)
	cases := []struct {
		v    any
		want string
	}{
		{SessionSummary{SessionID: "s", Workspace: HostPathWorkspace("/"), ModelTarget: ModelTarget{Kind: ModelTargetDefault},
			PermissionMode: PermissionModeExplore, Status: SessionArchived, IsArchived: true, ArchivedAt: &at},
			`{"sessionId":"s","workspace":{"kind":"host_path","path":"/"},"labels":[],"modelTarget":{"kind":"default"},"permissionMode":"explore","status":"archived","createdAt":0,"lastUsedAt":0,"isArchived":true,"archivedAt":3}`},
		{SessionCatalogQueryResult{Kind: SessionCatalogKindPage, Revision: 2}, `{"kind":"page","revision":2,"sessions":[],"nextCursor":null}`},
		{SessionCatalogQueryResult{Kind: SessionCatalogKindSession}, `{"kind":"session","session":null}`},
		{SessionCatalogQueryResult{Kind: SessionCatalogKindRevisionChanged, Expected: 1, Actual: 2}, `{"kind":"revision_changed","expected":1,"actual":2}`},
		{SessionCatalogQueryInput{Kind: SessionCatalogListStart}, `{"kind":"list_start","includeArchived":false}`},
		{SessionCatalogQueryInput{Kind: SessionCatalogGet, SessionID: "s"}, `{"kind":"get","sessionId":"s"}`},
		{SessionTranscriptPage{SessionID: "s"}, `{"sessionId":"s","messages":[],"nextCursor":null}`},
		{TranscriptMessage{MessageID: "m", TurnID: "t", Role: TranscriptRoleTool, Part: 1, ToolUseID: "u", ToolName: "n", Status: TranscriptToolErrored, Truncated: true},
			`{"messageId":"m","turnId":"t","role":"tool","createdAt":0,"part":1,"toolUseId":"u","toolName":"n","status":"errored"}`},
		{SessionLifecycleSetInput{SessionID: "s", Action: SessionActionArchive}, `{"sessionId":"s","action":"archive"}`},
		{SessionCreateInput{SessionID: "s", Workspace: HostPathWorkspace("/<&>\u2028")}, `{"sessionId":"s","workspace":{"kind":"host_path","path":"/<&>` + "\u2028" + `"}}`},
	}
	for _, c := range cases {
		b, err := Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("Marshal(%#v)\n got %s (%v)\nwant %s", c.v, b, err, c.want)
		}
	}
	for _, v := range []any{ModelTarget{}, SessionCatalogQueryInput{}, SessionCatalogQueryResult{Kind: "x"}, TranscriptMessage{Role: "system"}} {
		if b, err := Marshal(v); err == nil {
			t.Errorf("Marshal(%#v) = %s, want an error", v, b)
		}
	}
}

func ssCheckChunks(t *testing.T, text string, chunks []string) {
	t.Helper()
	if strings.Join(chunks, "") != text {
		t.Fatal("chunks do not rebuild the text")
	}
	for _, c := range chunks {
		if c == "" || len(c) > TranscriptTextMaxBytes {
			t.Fatalf("chunk of %d bytes", len(c))
		}
		if utf8.ValidString(text) && !utf8.ValidString(c) {
			t.Fatal("chunk splits a character")
		}
	}
}

func TestSplitTranscriptText(t *testing.T) {
	lens := func(chunks []string) []int {
		var n []int
		for _, c := range chunks {
			n = append(n, len(c))
		}
		return n
	}
	cases := []struct {
		text string
		want []int
	}{
		{"", nil},
		{"a", []int{1}},
		{shRep("a", TranscriptTextMaxBytes), []int{TranscriptTextMaxBytes}},
		{shRep("a", TranscriptTextMaxBytes+1), []int{TranscriptTextMaxBytes, 1}},
		{shRep("\u00e9", TranscriptTextMaxBytes/2+1), []int{TranscriptTextMaxBytes, 2}},
		{"a" + shRep("\U0001F600", TranscriptTextMaxBytes/4), []int{TranscriptTextMaxBytes - 3, 4}},
		{"ab" + shRep("\u20ac", TranscriptTextMaxBytes/3), []int{TranscriptTextMaxBytes - 2, 3}},
		// Control characters escape to six bytes each: a chunk is cut at
		// 44 KiB escaped.
		{shRep("\x01", TranscriptTextMaxBytes), []int{7509, 7509, 1366}},
		// An invalid byte counts as U+FFFD: three bytes, six escaped.
		{shRep("\xff", 6000), []int{5461, 539}},
	}
	for _, c := range cases {
		got := SplitTranscriptText(c.text)
		if !slices.Equal(lens(got), c.want) {
			t.Errorf("split of %d bytes: chunk lengths %v, want %v", len(c.text), lens(got), c.want)
		}
		ssCheckChunks(t, c.text, got)
	}

	rng := rand.New(rand.NewSource(1))
	alphabet := []string{"a", "\"", "\x00", "\n", "\u00e9", "\u20ac", "\U0001F600", "\u2028", "\x7f", "\xff"}
	for range 50 {
		var b strings.Builder
		for n := rng.Intn(60000); b.Len() < n; {
			b.WriteString(alphabet[rng.Intn(len(alphabet))])
		}
		ssCheckChunks(t, b.String(), SplitTranscriptText(b.String()))
	}
}

// Every chunk of SplitTranscriptText fits a transcript page on its own, with
// every other field at its largest.
func TestSplitTranscriptTextChunksFitWorstCasePage(t *testing.T) {
	spec, _ := Lookup(string(OpSessionTranscriptPage))
	cursor := shRep("\x01", SessionCursorMaxLen)
	id := shRep("a", 128)
	for _, text := range []string{shRep("\x01", 3*TranscriptTextMaxBytes), shRep("\xff", 3*TranscriptTextMaxBytes), shRep("\"", 3*TranscriptTextMaxBytes)} {
		for _, c := range SplitTranscriptText(text) {
			p := SessionTranscriptPage{SessionID: id, NextCursor: &cursor, Messages: []TranscriptMessage{{
				MessageID: id, TurnID: id, Role: TranscriptRoleAssistant, CreatedAt: MaxSafeInteger, Part: MaxSafeInteger, Text: c}}}
			b, err := Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > SessionTranscriptPageMaxBytes {
				t.Fatalf("page of %d bytes", len(b))
			}
			v, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := spec.DecodeOutput(v); err != nil {
				t.Fatalf("page does not decode: %v", err)
			}
		}
	}
}
