package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"testing"
)

const (
	shRev      = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	shRev2     = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	shTaskMin  = `{"id":"task-1","key":"T1","subject":"Write the parser","status":"pending","createdAt":1700000000000,"updatedAt":1700000000000}`
	shTaskFull = `{"id":"c0ffee00-1111-4222-8333-444455556666","key":"T3.2","subject":"Ship it","status":"completed","createdAt":1.5,"updatedAt":2,` +
		`"parentId":"task-1","owner":{"actor":"child_agent","sessionId":"s1","agentId":"agent:7","runId":"run.1","turnId":"t_1"},` +
		`"endedAt":3,"completionEvidence":"go test passes","resumeTrust":"trusted"}`
	shGetInput = `{"kind":"get","sessionId":"s1","taskRef":"T3.2"}`
)

func shPage(tasks, nextCursor string) string {
	return `{"kind":"page","sessionId":"s1","revision":"` + shRev + `","tasks":[` + tasks + `],"nextCursor":` + nextCursor + `}`
}

func shTaskResult(task string) string {
	return `{"kind":"task","sessionId":"s1","revision":"` + shRev + `","task":` + task + `}`
}

// shTaskWith returns a minimal pending task with the given subject.
func shTaskWith(id, subject string) string {
	return `{"id":"` + id + `","key":"T1","subject":` + shStr(subject) + `,"status":"pending","createdAt":0,"updatedAt":0}`
}

// shSizedPage returns a page whose encoding is exactly size bytes: k tasks
// with 300-byte subjects and one task whose subject fills the rest.
func shSizedPage(t testing.TB, size int) string {
	t.Helper()
	fixed := strings.Repeat("\u20ac", 100)
	var tasks []string
	for k := 0; k < TaskLedgerPageMaxItems; k++ {
		need := size - len(shPage(strings.Join(append(tasks, shTaskWith("tune", "")), ","), "null"))
		if b := need % 3; need > 0 && need/3+b <= TaskSubjectMaxCodePoints {
			subject := strings.Repeat("\u20ac", need/3) + strings.Repeat("a", b)
			return shPage(strings.Join(append(tasks, shTaskWith("tune", subject)), ","), "null")
		}
		tasks = append(tasks, shTaskWith("t"+strconv.Itoa(k), fixed))
	}
	t.Fatalf("cannot build a page of %d bytes", size)
	return ""
}

func taskValidCases(t testing.TB) []shCase {
	cases := []shCase{
		{name: "list_start", op: OpTaskLedgerQuery, in: `{"kind":"list_start","sessionId":"s1"}`},
		{name: "list_continue", op: OpTaskLedgerQuery, in: `{"kind":"list_continue","sessionId":"s1","revision":"` + shRev + `","cursor":"128"}`},
		{name: "list_continue cursor of 512 bytes", op: OpTaskLedgerQuery, in: `{"kind":"list_continue","sessionId":"s1","revision":"` + shRev + `","cursor":"` + shRep("\u00e9", 256) + `"}`},
		{name: "get by key", op: OpTaskLedgerQuery, in: shGetInput},
		{name: "get by id", op: OpTaskLedgerQuery, in: `{"kind":"get","sessionId":"s1","taskRef":"c0ffee00-1111:x.y_z"}`},
		{name: "page", op: OpTaskLedgerQuery, out: true, in: shPage(shTaskMin+","+shTaskFull, `"2"`)},
		{name: "page empty", op: OpTaskLedgerQuery, out: true, in: shPage("", "null")},
		{name: "page of 128 tasks", op: OpTaskLedgerQuery, out: true, in: shPage(strings.TrimSuffix(shRep(shTaskMin+",", TaskLedgerPageMaxItems), ","), "null")},
		{name: "page of 48 KiB", op: OpTaskLedgerQuery, out: true, in: shSizedPage(t, TaskLedgerPageMaxBytes)},
		{name: "revision_changed", op: OpTaskLedgerQuery, out: true, in: `{"kind":"revision_changed","expected":"` + shRev + `","actual":"` + shRev2 + `"}`},
		{name: "task", op: OpTaskLedgerQuery, out: true, in: shTaskResult(shTaskFull)},
		{name: "task null", op: OpTaskLedgerQuery, out: true, in: shTaskResult("null")},
		{name: "task timestamps written like JavaScript", op: OpTaskLedgerQuery, out: true,
			in:   shTaskResult(`{"id":"a","key":"T1","subject":"s","status":"pending","createdAt":-0,"updatedAt":1e21,"endedAt":1E-7}`),
			want: shTaskResult(`{"id":"a","key":"T1","subject":"s","status":"pending","createdAt":0,"updatedAt":1e+21,"endedAt":1e-7}`)},
		{name: "task keys reordered", op: OpTaskLedgerQuery, out: true,
			in:   shTaskResult(`{"status":"pending","owner":{"turnId":"t","actor":"main_agent"},"updatedAt":-1.25,"subject":"s","key":"T1","id":"a","createdAt":0.1}`),
			want: shTaskResult(`{"id":"a","key":"T1","subject":"s","status":"pending","createdAt":0.1,"updatedAt":-1.25,"owner":{"actor":"main_agent","turnId":"t"}}`)},
		{name: "task key of 64", op: OpTaskLedgerQuery, out: true, in: shTaskResult(strings.Replace(shTaskMin, `"T1"`, `"T1`+shRep(".1", 31)+`"`, 1))},
		{name: "task id of 64", op: OpTaskLedgerQuery, out: true, in: shTaskResult(strings.Replace(shTaskMin, `"task-1"`, `"`+shRep("x", 64)+`"`, 1))},
		{name: "task blocked without reason, needs revalidation", op: OpTaskLedgerQuery, out: true,
			in: shTaskResult(`{"id":"a","key":"T1","subject":"s","status":"blocked","createdAt":0,"updatedAt":0,"resumeTrust":"needs_revalidation"}`)},
		{name: "task failed without reason, untrusted", op: OpTaskLedgerQuery, out: true,
			in: shTaskResult(`{"id":"a","key":"T1","subject":"s","status":"failed","createdAt":0,"updatedAt":0,"resumeTrust":"untrusted"}`)},
		{name: "task blocked with reason", op: OpTaskLedgerQuery, out: true,
			in: shTaskResult(`{"id":"a","key":"T1","subject":"s","status":"blocked","createdAt":0,"updatedAt":0,"blockedReason":"waits for review"}`)},
		{name: "task failed with reason", op: OpTaskLedgerQuery, out: true,
			in: shTaskResult(`{"id":"a","key":"T1","subject":"s","status":"failed","createdAt":0,"updatedAt":0,"failureReason":"[REDACTED] rejected","resumeTrust":"stale"}`)},
		{name: "task reason of 1000 code points", op: OpTaskLedgerQuery, out: true,
			in: shTaskResult(`{"id":"a","key":"T1","subject":"s","status":"blocked","createdAt":0,"updatedAt":0,"blockedReason":"` + shRep("\U0001F600", TaskEvidenceMaxCodePoints) + `"}`)},
	}
	for _, subject := range []string{
		shRep("\U0001F600", TaskSubjectMaxCodePoints), // 200 code points, 400 UTF-16 units
		"caf\u00e9 au lait",
		"a\u200bb",           // a zero-width space is not whitespace
		"a < b > c",          // other angle brackets stay
		"<task-ledger open",  // not a complete tag
		"<ta\u017fk-ledger>", // only ASCII letters fold
		"[REDACTED] key",
	} {
		cases = append(cases, shCase{name: "task subject " + strconv.Quote(subject[:min(len(subject), 20)]), op: OpTaskLedgerQuery, out: true,
			in: shTaskResult(shTaskWith("a", subject))})
	}
	return cases
}

func TestTaskLedgerValid(t *testing.T) { shCheckValid(t, taskValidCases(t)) }

func TestTaskLedgerInvalid(t *testing.T) {
	cases := []shCase{
		{name: "input kind missing", in: `{"sessionId":"s1"}`},
		{name: "input kind unknown", in: `{"kind":"list","sessionId":"s1"}`},
		{name: "input not an object", in: `null`},
		{name: "list_start extra key", in: `{"kind":"list_start","sessionId":"s1","cursor":"0"}`},
		{name: "list_start sessionId invalid", in: `{"kind":"list_start","sessionId":"s:1"}`},
		{name: "list_continue missing cursor", in: `{"kind":"list_continue","sessionId":"s1","revision":"` + shRev + `"}`},
		{name: "list_continue revision uppercase", in: `{"kind":"list_continue","sessionId":"s1","revision":"sha256:` + strings.ToUpper(shRev[7:]) + `","cursor":"1"}`},
		{name: "list_continue revision 63 hex", in: `{"kind":"list_continue","sessionId":"s1","revision":"` + shRev[:len(shRev)-1] + `","cursor":"1"}`},
		{name: "list_continue revision sha1", in: `{"kind":"list_continue","sessionId":"s1","revision":"sha1:` + shRev[7:] + `","cursor":"1"}`},
		{name: "list_continue revision a number", in: `{"kind":"list_continue","sessionId":"s1","revision":1,"cursor":"1"}`},
		{name: "list_continue cursor empty", in: `{"kind":"list_continue","sessionId":"s1","revision":"` + shRev + `","cursor":""}`},
		{name: "list_continue cursor 513 bytes", in: `{"kind":"list_continue","sessionId":"s1","revision":"` + shRev + `","cursor":"` + shRep("\u00e9", 256) + `a"}`},
		{name: "get missing taskRef", in: `{"kind":"get","sessionId":"s1"}`},
		{name: "get with cursor", in: shEdit(t, shGetInput, `cursor="1"`)},
	}
	for _, ref := range []string{``, `bad ref`, `-a`, `.T1`, `T1/2`, `sk-aaaaaaaaaaaaaaaaaaaa`, shRep("x", 65)} {
		cases = append(cases, shCase{name: "get taskRef " + strconv.Quote(ref), in: shEdit(t, shGetInput, `taskRef=`+shStr(ref))})
	}
	cases = append(cases, shCase{name: "get taskRef a number", in: shEdit(t, shGetInput, `taskRef=1`)})
	for i := range cases {
		cases[i].op = OpTaskLedgerQuery
	}

	result := func(name, text string) shCase {
		return shCase{name: name, op: OpTaskLedgerQuery, out: true, in: text}
	}
	task := func(name string, edits ...string) shCase {
		return result("task "+name, shTaskResult(shEdit(t, shTaskFull, edits...)))
	}
	results := []shCase{
		result("result kind unknown", `{"kind":"pages","sessionId":"s1"}`),
		result("page missing nextCursor", `{"kind":"page","sessionId":"s1","revision":"`+shRev+`","tasks":[]}`),
		result("page nextCursor empty", shPage("", `""`)),
		result("page nextCursor 513 bytes", shPage("", `"`+shRep("1", 513)+`"`)),
		result("page nextCursor a number", shPage("", `2`)),
		result("page tasks null", `{"kind":"page","sessionId":"s1","revision":"`+shRev+`","tasks":null,"nextCursor":null}`),
		result("page tasks of numbers", shPage("1", "null")),
		result("page of 129 tasks", shPage(strings.TrimSuffix(shRep(shTaskMin+",", TaskLedgerPageMaxItems+1), ","), "null")),
		result("page over 48 KiB", shSizedPage(t, TaskLedgerPageMaxBytes+1)),
		result("page revision invalid", strings.Replace(shPage("", "null"), shRev, "sha256:x", 1)),
		result("page extra key", shEdit(t, shPage("", "null"), `expected="x"`)),
		result("page sessionId invalid", shEdit(t, shPage("", "null"), `sessionId="s 1"`)),
		result("revision_changed missing actual", `{"kind":"revision_changed","expected":"`+shRev+`"}`),
		result("revision_changed with sessionId", `{"kind":"revision_changed","sessionId":"s1","expected":"`+shRev+`","actual":"`+shRev+`"}`),
		result("revision_changed actual invalid", `{"kind":"revision_changed","expected":"`+shRev+`","actual":"sha256:"}`),
		result("task result missing task", `{"kind":"task","sessionId":"s1","revision":"`+shRev+`"}`),
		result("task result with tasks", shEdit(t, shTaskResult("null"), `tasks=[]`)),
		result("task result task a string", shTaskResult(`"task-1"`)),
		task("missing id", `-id`),
		task("missing key", `-key`),
		task("missing subject", `-subject`),
		task("missing status", `-status`),
		task("missing createdAt", `-createdAt`),
		task("missing updatedAt", `-updatedAt`),
		task("extra key", `priority=1`),
		task("id starting with a dot", `id=".a"`),
		task("id with a space", `id="a b"`),
		task("id of 65", `id="`+shRep("a", 65)+`"`),
		task("id a secret hex run", `id="0123456789abcdef0123456789abcdef01234567"`),
		task("id a GitHub token", `id="ghp_aaaaaaaaaaaaaaaaaaaaaaaa"`),
		task("parentId invalid", `parentId="a/b"`),
		task("parentId a secret", `parentId="sk-aaaaaaaaaaaaaaaaaaaa"`),
		task("key of 66", `key="T1`+shRep(".1", 32)+`"`),
		task("status unknown", `status="archived"`),
		task("createdAt a string", `createdAt="1"`),
		task("createdAt null", `createdAt=null`),
		task("updatedAt infinite", `updatedAt=1e400`),
		task("endedAt null", `endedAt=null`),
		task("owner null", `owner=null`),
		task("owner missing actor", `-owner/actor`),
		task("owner actor unknown", `owner/actor="user"`),
		task("owner extra key", `owner/name="x"`),
		task("owner runId invalid", `owner/runId="r 1"`),
		task("owner agentId a secret", `owner/agentId="AKIAABCDEFGHIJKLMNOP"`),
		task("resumeTrust unknown", `resumeTrust="maybe"`),
		task("resumeTrust null", `resumeTrust=null`),
		task("completed without evidence", `-completionEvidence`, `-resumeTrust`),
		task("completed without evidence, trusted", `-completionEvidence`),
		task("blocked without reason", `status="blocked"`, `-resumeTrust`),
		task("failed without reason, trusted", `status="failed"`),
		task("evidence empty", `completionEvidence=""`),
		task("evidence of 1001 code points", `completionEvidence="`+shRep("\U0001F600", TaskEvidenceMaxCodePoints+1)+`"`),
		task("blockedReason not canonical", `blockedReason="a  b"`),
		task("failureReason a secret", `failureReason="token sk-abcdefghijklmnopqrstuvwx"`),
		task("subject of 201 code points", `subject="`+shRep("\U0001F600", TaskSubjectMaxCodePoints)+`a"`),
	}
	for _, subject := range []string{
		"", " a", "a ", "a  b", "a\tb", "a\nb", "a\u00a0b", "a\u3000b", "\ufeffa", "a\u2028b",
		"e\u0301",
		"see <task-ledger>", "x </TASK-LEDGER id=1> y", "<Task-Ledger\u00e9>",
		"token ghp_abcdefghijklmnopqrstuvwxyz", "key AKIAABCDEFGHIJKLMNOP",
	} {
		results = append(results, task("subject "+strconv.Quote(subject), `subject=`+shStr(subject)))
	}
	shCheckInvalid(t, append(cases, results...))
}

func TestTaskLedgerRevision(t *testing.T) {
	empty := sha256.Sum256([]byte("[]"))
	if got, want := TaskLedgerRevision(nil), "sha256:"+hex.EncodeToString(empty[:]); got != want {
		t.Fatalf("TaskLedgerRevision(nil) = %s, want %s", got, want)
	}
	if TaskLedgerRevision([]Task{}) != TaskLedgerRevision(nil) {
		t.Fatal("nil and empty lists differ")
	}
	ended := TaskTime(math.Copysign(0, -1))
	tasks := []Task{
		{ID: "task-1", Key: "T1", Subject: "Write <it>", Status: TaskPending, CreatedAt: 1.5, UpdatedAt: 2},
		{ID: "b", Key: "T1.1", Subject: "s", Status: TaskBlocked, CreatedAt: 0, UpdatedAt: 0, ParentID: "task-1",
			Owner: &TaskOwner{Actor: ActorMainAgent}, EndedAt: &ended, ResumeTrust: ResumeNeedsRevalidation},
	}
	canonical := `[{"id":"task-1","key":"T1","subject":"Write <it>","status":"pending","createdAt":1.5,"updatedAt":2},` +
		`{"id":"b","key":"T1.1","subject":"s","status":"blocked","createdAt":0,"updatedAt":0,"parentId":"task-1","owner":{"actor":"main_agent"},"endedAt":0,"resumeTrust":"needs_revalidation"}]`
	sum := sha256.Sum256([]byte(canonical))
	got := TaskLedgerRevision(tasks)
	if want := "sha256:" + hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("TaskLedgerRevision = %s, want %s", got, want)
	}
	if !taskRevisionPattern().MatchString(got) {
		t.Fatalf("%s is not a TaskLedgerRevision", got)
	}
	tasks[0].Subject = "Write it"
	if TaskLedgerRevision(tasks) == got {
		t.Fatal("revision ignores a subject change")
	}
}

func TestDecodeTask(t *testing.T) {
	v, _ := Parse([]byte(shTaskFull))
	task, err := DecodeTask(v)
	if err != nil {
		t.Fatal(err)
	}
	if task.Owner == nil || task.Owner.AgentID != "agent:7" || task.EndedAt == nil || *task.EndedAt != 3 || task.MissingEvidence() {
		t.Fatalf("unexpected task %#v", task)
	}
	task.CompletionEvidence = ""
	if !task.MissingEvidence() {
		t.Fatal("completed task without evidence is not flagged")
	}
	if _, err := DecodeTask(NullValue()); err == nil {
		t.Fatal("null decoded as a task")
	}
}

func TestIsCanonicalTaskText(t *testing.T) {
	for s, want := range map[string]bool{
		"a b":             true,
		"\u00e9":          true,
		"a\u2009b":        false, // thin space
		"a\u000bb":        false, // vertical tab
		"<task-ledger/>":  false,
		"<task-ledgers x": true,
	} {
		if got := IsCanonicalTaskText(s); got != want {
			t.Errorf("IsCanonicalTaskText(%q) = %v, want %v", s, got, want)
		}
	}
}
