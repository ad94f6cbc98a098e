package tasks

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/wireredact"
	"github.com/maka-agent/maka/protocol"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// failAfter bounds every wait so that a broken ledger fails the test
// instead of hanging it.
const failAfter = 20 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	t.Cleanup(cancel)
	return ctx
}

// otherMigration stands in for schema version 2, which belongs to another
// package: the ledger must not need any of its tables.
var otherMigration = store.Migration{Version: 2, Up: func(*sql.Tx) error { return nil }}

// clock is a manual clock, safe for concurrent use.
type clock struct{ ms atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ms.Store(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli())
	return c
}

func (c *clock) Now() time.Time            { return time.UnixMilli(c.ms.Load()) }
func (c *clock) Advance(d time.Duration)   { c.ms.Add(d.Milliseconds()) }
func (c *clock) millis() protocol.TaskTime { return protocol.TaskTime(c.ms.Load()) }

// env is a ledger on a store in a temporary directory.
type env struct {
	t     *testing.T
	path  string
	st    *store.Store
	l     *Ledger
	clock *clock
	gate  *lane.Gate
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, path: filepath.Join(t.TempDir(), "host.db"), clock: newClock()}
	e.open()
	t.Cleanup(func() { e.close() })
	return e
}

func (e *env) open() {
	e.t.Helper()
	st, err := store.Open(testCtx(e.t), e.path, store.Options{Migrations: []store.Migration{otherMigration, Migration}})
	if err != nil {
		e.t.Fatalf("store.Open: %v", err)
	}
	if v := st.SchemaVersion(); v != SchemaVersion {
		e.t.Fatalf("schema version %d, want %d", v, SchemaVersion)
	}
	e.st = st
	e.l = New(st, Options{Now: e.clock.Now, Lane: e.gate})
}

func (e *env) close() {
	e.t.Helper()
	if e.st == nil {
		return
	}
	if err := e.st.Close(context.Background()); err != nil {
		e.t.Errorf("store.Close: %v", err)
	}
	e.st = nil
}

// restart closes the store and opens it again, as a host restart does.
func (e *env) restart() {
	e.t.Helper()
	e.close()
	e.open()
}

func (e *env) create(session, subject string) protocol.Task {
	e.t.Helper()
	task, err := e.l.Create(testCtx(e.t), session, Draft{Subject: subject})
	if err != nil {
		e.t.Fatalf("Create(%q): %v", subject, err)
	}
	return task
}

func (e *env) update(session, ref string, c Change) protocol.Task {
	e.t.Helper()
	task, err := e.l.Update(testCtx(e.t), session, ref, c)
	if err != nil {
		e.t.Fatalf("Update(%s, %+v): %v", ref, c, err)
	}
	return task
}

func (e *env) list(session string) ([]protocol.Task, string) {
	e.t.Helper()
	tasks, rev, err := e.l.List(testCtx(e.t), session)
	if err != nil {
		e.t.Fatalf("List: %v", err)
	}
	return tasks, rev
}

func (e *env) events(session string) []Event {
	e.t.Helper()
	evs, err := e.l.Events(testCtx(e.t), session)
	if err != nil {
		e.t.Fatalf("Events: %v", err)
	}
	return evs
}

// fill creates n tasks concurrently (so that the store commits them in a
// few batches) and returns them.
func (e *env) fill(session string, n int, draft func(i int) Draft) []protocol.Task {
	e.t.Helper()
	out := make([]protocol.Task, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			d := Draft{Subject: "task " + strconv.Itoa(i)}
			if draft != nil {
				d = draft(i)
			}
			out[i], errs[i] = e.l.Create(testCtx(e.t), session, d)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.t.Fatalf("fill: %v", err)
	}
	return out
}

// rawInsert stores a task document written by hand, bypassing the write
// API, as an older or damaged ledger could hold it.
func (e *env) rawInsert(session, taskID, key string, ordinal int, doc string) {
	e.t.Helper()
	err := e.st.Write(testCtx(e.t), func(tx *store.Tx) error {
		_, err := tx.Exec(`INSERT INTO tasks (session_id, task_id, key, ordinal, document, created_at, updated_at, archived)
			VALUES (?, ?, ?, ?, ?, 0, 0, 0)`, session, taskID, key, ordinal, doc)
		return err
	})
	if err != nil {
		e.t.Fatalf("raw insert: %v", err)
	}
}

var taskLedgerSpec = func() *protocol.OperationSpec {
	s, ok := protocol.Lookup(string(protocol.OpTaskLedgerQuery))
	if !ok {
		panic("task.ledger.query is not defined")
	}
	return s
}()

// query runs the task.ledger.query handler. It checks that the input is
// one the input codec accepts, that a result passes the output codec and
// is already in canonical form, and that an error code is declared. It
// returns the outcome and the encoded result.
func (e *env) query(in protocol.TaskLedgerQueryInput) (host.Outcome, []byte) {
	e.t.Helper()
	inJSON, err := protocol.Marshal(in)
	if err != nil {
		e.t.Fatal(err)
	}
	inV, err := protocol.Parse(inJSON)
	if err != nil {
		e.t.Fatal(err)
	}
	decodedIn, err := taskLedgerSpec.DecodeInput(inV)
	if err != nil {
		e.t.Fatalf("test input %s is not valid: %v", inJSON, err)
	}
	out := e.l.Handlers()[protocol.OpTaskLedgerQuery](testCtx(e.t), &host.Call{Operation: taskLedgerSpec, Input: decodedIn})
	if out.Err != nil {
		if out.Result != nil {
			e.t.Errorf("outcome has both a result and an error")
		}
		if !taskLedgerSpec.Declares(out.Err.Code) {
			e.t.Errorf("undeclared error code %q", out.Err.Code)
		}
		if n := utf8.RuneCountInString(out.Err.Message); n == 0 || n > 1024 {
			e.t.Errorf("error message of %d characters", n)
		}
		return out, nil
	}
	b := checkOutput(e.t, out.Result)
	return out, b
}

// checkOutput encodes a result, decodes it with the output codec and checks
// that encoding the decoded value gives the same bytes.
func checkOutput(t *testing.T, result any) []byte {
	t.Helper()
	b, err := protocol.Marshal(result)
	if err != nil {
		t.Fatalf("Marshal(result): %v", err)
	}
	v, err := protocol.Parse(b)
	if err != nil {
		t.Fatalf("Parse(result): %v", err)
	}
	decoded, err := taskLedgerSpec.DecodeOutput(v)
	if err != nil {
		t.Fatalf("result rejected by the output codec: %v\n%s", err, b)
	}
	again, err := protocol.Marshal(decoded)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, b) {
		t.Fatalf("result is not canonical:\n got %s\nwant %s", b, again)
	}
	return b
}

func result(t *testing.T, out host.Outcome) protocol.TaskLedgerQueryResult {
	t.Helper()
	if out.Err != nil {
		t.Fatalf("query failed: %v", out.Err)
	}
	r, ok := out.Result.(protocol.TaskLedgerQueryResult)
	if !ok {
		t.Fatalf("result is a %T", out.Result)
	}
	return r
}

func listStart(session string) protocol.TaskLedgerQueryInput {
	return protocol.TaskLedgerQueryInput{Kind: protocol.TaskQueryListStart, SessionID: session}
}

func listContinue(session, revision, cursor string) protocol.TaskLedgerQueryInput {
	return protocol.TaskLedgerQueryInput{Kind: protocol.TaskQueryListContinue, SessionID: session, Revision: revision, Cursor: cursor}
}

func get(session, ref string) protocol.TaskLedgerQueryInput {
	return protocol.TaskLedgerQueryInput{Kind: protocol.TaskQueryGet, SessionID: session, TaskRef: ref}
}

// pages reads the whole list through list_start and list_continue and
// returns the tasks, the encoded pages and the revision.
func (e *env) pages(session string) ([]protocol.Task, [][]byte, string) {
	e.t.Helper()
	out, b := e.query(listStart(session))
	page := result(e.t, out)
	if page.Kind != protocol.TaskResultPage {
		e.t.Fatalf("list_start answered %s", page.Kind)
	}
	revision := page.Revision
	tasks := append([]protocol.Task(nil), page.Tasks...)
	encoded := [][]byte{b}
	for page.NextCursor != nil {
		if len(encoded) > MaxTasksPerSession {
			e.t.Fatal("pages do not end")
		}
		if want := strconv.Itoa(len(tasks)); *page.NextCursor != want {
			e.t.Fatalf("nextCursor %q, want %q", *page.NextCursor, want)
		}
		out, b = e.query(listContinue(session, revision, *page.NextCursor))
		page = result(e.t, out)
		if page.Kind != protocol.TaskResultPage || page.Revision != revision {
			e.t.Fatalf("list_continue answered %+v", page)
		}
		if len(page.Tasks) == 0 {
			e.t.Fatal("list_continue returned an empty page before the end")
		}
		tasks = append(tasks, page.Tasks...)
		encoded = append(encoded, b)
	}
	return tasks, encoded, revision
}

var allStatuses = []protocol.TaskStatus{
	protocol.TaskPending, protocol.TaskInProgress, protocol.TaskBlocked,
	protocol.TaskCompleted, protocol.TaskFailed, protocol.TaskCancelled,
}

// allowed is the transition table of the ledger, written out from the
// specification: from → to → needs an explicit reopen.
var allowed = map[protocol.TaskStatus]map[protocol.TaskStatus]bool{
	protocol.TaskPending:    {protocol.TaskInProgress: false, protocol.TaskCancelled: false},
	protocol.TaskInProgress: {protocol.TaskBlocked: false, protocol.TaskCompleted: false, protocol.TaskFailed: false, protocol.TaskCancelled: false},
	protocol.TaskBlocked:    {protocol.TaskInProgress: false, protocol.TaskCancelled: false, protocol.TaskFailed: false},
	protocol.TaskFailed:     {protocol.TaskPending: false, protocol.TaskCancelled: false},
	protocol.TaskCompleted:  {protocol.TaskInProgress: true},
	protocol.TaskCancelled:  {protocol.TaskPending: true},
}

// withEvidence returns a change to status carrying the evidence it needs.
func withEvidence(status protocol.TaskStatus) Change {
	c := Change{Status: status}
	switch status {
	case protocol.TaskBlocked:
		c.BlockedReason = "waiting for review"
	case protocol.TaskFailed:
		c.FailureReason = "tests fail"
	case protocol.TaskCompleted:
		c.CompletionEvidence = "go test passes"
	}
	return c
}

// driveTo creates a task and moves it to status along allowed transitions.
func (e *env) driveTo(session string, status protocol.TaskStatus) protocol.Task {
	e.t.Helper()
	task := e.create(session, "drive to "+string(status))
	var path []protocol.TaskStatus
	switch status {
	case protocol.TaskInProgress:
		path = []protocol.TaskStatus{protocol.TaskInProgress}
	case protocol.TaskBlocked, protocol.TaskCompleted, protocol.TaskFailed:
		path = []protocol.TaskStatus{protocol.TaskInProgress, status}
	case protocol.TaskCancelled:
		path = []protocol.TaskStatus{protocol.TaskCancelled}
	}
	for _, s := range path {
		task = e.update(session, task.Key, withEvidence(s))
	}
	if task.Status != status {
		e.t.Fatalf("drove the task to %s, want %s", task.Status, status)
	}
	return task
}

func TestCanTransition(t *testing.T) {
	for _, from := range allStatuses {
		for _, to := range allStatuses {
			for _, reopen := range []bool{false, true} {
				needsReopen, listed := allowed[from][to]
				want := from == to || listed && (!needsReopen || reopen)
				if got := CanTransition(from, to, reopen); got != want {
					t.Errorf("CanTransition(%s, %s, reopen=%v) = %v, want %v", from, to, reopen, got, want)
				}
			}
		}
	}
	if CanTransition("done", "done", true) || CanTransition(protocol.TaskPending, "done", true) {
		t.Error("unknown statuses are allowed")
	}
}

func TestEveryTransition(t *testing.T) {
	e := newEnv(t)
	for _, from := range allStatuses {
		session := "from-" + strings.ReplaceAll(string(from), "_", "-")
		for _, to := range allStatuses {
			if to == from {
				continue
			}
			for _, reopen := range []bool{false, true} {
				needsReopen, listed := allowed[from][to]
				want := listed && (!needsReopen || reopen)
				task := e.driveTo(session, from)
				before := len(e.events(session))
				change := withEvidence(to)
				change.ExplicitReopen = reopen
				got, err := e.l.Update(testCtx(t), session, task.Key, change)
				name := fmt.Sprintf("%s→%s reopen=%v", from, to, reopen)
				if !want {
					var te *TransitionError
					if !errors.Is(err, ErrInvalidTransition) || !errors.As(err, &te) || te.From != from || te.To != to || te.Key != task.Key {
						t.Errorf("%s: err = %v, want a TransitionError", name, err)
					}
					if n := len(e.events(session)); n != before {
						t.Errorf("%s: refused change appended %d events", name, n-before)
					}
					stored, _, err := e.l.Get(testCtx(t), session, task.ID)
					if err != nil || stored == nil || stored.Status != from || stored.UpdatedAt != task.UpdatedAt {
						t.Errorf("%s: task changed after a refused transition: %+v, %v", name, stored, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				if got.Status != to {
					t.Errorf("%s: status %s", name, got.Status)
				}
				evs := e.events(session)
				if len(evs) != before+1 {
					t.Fatalf("%s: %d events appended, want 1", name, len(evs)-before)
				}
				last := evs[len(evs)-1]
				wantType := map[protocol.TaskStatus]string{
					protocol.TaskInProgress: EventStarted, protocol.TaskBlocked: EventBlocked,
					protocol.TaskCompleted: EventCompleted, protocol.TaskFailed: EventFailed,
					protocol.TaskCancelled: EventCancelled,
				}[to]
				if to == protocol.TaskPending || from == protocol.TaskCompleted {
					wantType = EventReopened
				}
				if last.Type != wantType || last.PreviousStatus != from || last.NextStatus != to || last.TaskID != task.ID {
					t.Errorf("%s: event %+v, want type %s", name, last, wantType)
				}
				if !reflect.DeepEqual(last.Task, got) {
					t.Errorf("%s: event snapshot %+v differs from the task %+v", name, last.Task, got)
				}
			}
		}
		// Keeping the status is allowed in every status.
		task := e.driveTo(session, from)
		kept := withEvidence(from)
		kept.Subject = "renamed in " + string(from)
		got, err := e.l.Update(testCtx(t), session, task.ID, kept)
		if err != nil || got.Status != from || got.Subject != kept.Subject {
			t.Errorf("keeping %s: %+v, %v", from, got, err)
		}
		if evs := e.events(session); evs[len(evs)-1].Type != EventUpdated {
			t.Errorf("keeping %s: event %s, want %s", from, evs[len(evs)-1].Type, EventUpdated)
		}
	}
}

func TestEvidence(t *testing.T) {
	e := newEnv(t)
	const s = "evidence"
	ctx := testCtx(t)

	for _, status := range []protocol.TaskStatus{protocol.TaskBlocked, protocol.TaskFailed, protocol.TaskCompleted} {
		task := e.driveTo(s, protocol.TaskInProgress)
		_, err := e.l.Update(ctx, s, task.Key, Change{Status: status})
		var ee *EvidenceError
		if !errors.Is(err, ErrMissingEvidence) || !errors.As(err, &ee) || ee.Status != status || ee.Field != evidenceField(status) {
			t.Errorf("%s without evidence: %v", status, err)
		}
		// Blank evidence is refused as text, before the transition.
		blank := withEvidence(status)
		blank.BlockedReason, blank.FailureReason, blank.CompletionEvidence = " \t", "\n", "<task-ledger>"
		if _, err := e.l.Update(ctx, s, task.Key, blank); !errors.Is(err, ErrInvalidText) {
			t.Errorf("%s with blank evidence: %v", status, err)
		}
		// Evidence of another status does not count.
		other := Change{Status: status, BlockedReason: "x", FailureReason: "y", CompletionEvidence: "z"}
		switch status {
		case protocol.TaskBlocked:
			other.BlockedReason = ""
		case protocol.TaskFailed:
			other.FailureReason = ""
		default:
			other.CompletionEvidence = ""
		}
		if _, err := e.l.Update(ctx, s, task.Key, other); !errors.Is(err, ErrMissingEvidence) {
			t.Errorf("%s with only other evidence: %v", status, err)
		}
		got := e.update(s, task.Key, withEvidence(status))
		if got.MissingEvidence() {
			t.Errorf("%s: evidence not stored: %+v", status, got)
		}
	}

	// Evidence belongs to its status: it is dropped when the status changes
	// and evidence for another status is not stored.
	task := e.driveTo(s, protocol.TaskInProgress)
	blocked := e.update(s, task.ID, Change{Status: protocol.TaskBlocked, BlockedReason: "  needs   a key  ", FailureReason: "ignored"})
	if blocked.BlockedReason != "needs a key" || blocked.FailureReason != "" || blocked.EndedAt != nil {
		t.Errorf("blocked: %+v", blocked)
	}
	// Editing the reason while blocked.
	blocked = e.update(s, task.ID, Change{BlockedReason: "needs two keys"})
	if blocked.BlockedReason != "needs two keys" || blocked.Status != protocol.TaskBlocked {
		t.Errorf("blocked edit: %+v", blocked)
	}
	resumed := e.update(s, task.ID, Change{Status: protocol.TaskInProgress})
	if resumed.BlockedReason != "" {
		t.Errorf("in_progress kept blockedReason: %+v", resumed)
	}
	e.clock.Advance(time.Second)
	failed := e.update(s, task.ID, Change{Status: protocol.TaskFailed, FailureReason: "the key is lost"})
	if failed.EndedAt == nil || *failed.EndedAt != e.clock.millis() || failed.UpdatedAt != e.clock.millis() {
		t.Errorf("failed: endedAt %v updatedAt %v, want %v", failed.EndedAt, failed.UpdatedAt, e.clock.millis())
	}
	reopened := e.update(s, task.ID, Change{Status: protocol.TaskPending})
	if reopened.EndedAt != nil || reopened.FailureReason != "" {
		t.Errorf("reopened failed task: %+v", reopened)
	}
	// A completed task keeps its evidence while its subject is edited.
	done := e.driveTo(s, protocol.TaskCompleted)
	edited := e.update(s, done.Key, Change{Subject: "new subject"})
	if edited.CompletionEvidence != done.CompletionEvidence || edited.EndedAt == nil || *edited.EndedAt != *done.EndedAt {
		t.Errorf("edited completed task: %+v, was %+v", edited, done)
	}
}

func TestOwner(t *testing.T) {
	e := newEnv(t)
	const s = "owner"
	ctx := testCtx(t)
	owner := &protocol.TaskOwner{Actor: protocol.ActorMainAgent, RunID: "run-1", TurnID: "turn-1"}
	task, err := e.l.Create(ctx, s, Draft{Subject: "owned", Owner: owner})
	if err != nil || task.Owner == nil || *task.Owner != *owner || task.Owner == owner {
		t.Fatalf("Create with owner: %+v, %v", task, err)
	}
	child := &protocol.TaskOwner{Actor: protocol.ActorChildAgent, AgentID: "agent:7", TurnID: "t_2"}
	task = e.update(s, task.Key, Change{Status: protocol.TaskInProgress, Owner: child})
	if *task.Owner != *child {
		t.Errorf("owner %+v, want %+v", task.Owner, child)
	}
	task = e.update(s, task.Key, Change{Status: protocol.TaskCancelled})
	if task.Owner == nil {
		t.Error("cancelled task lost its owner")
	}
	task = e.update(s, task.Key, Change{Status: protocol.TaskPending, ExplicitReopen: true})
	if task.Owner != nil {
		t.Errorf("pending task kept its owner %+v", task.Owner)
	}
	for _, bad := range []*protocol.TaskOwner{
		{Actor: "user"},
		{Actor: protocol.ActorMainAgent, RunID: "has space"},
		{Actor: protocol.ActorChildAgent, AgentID: "sk-abcdefghijklmnopqrstuvwxyz"},
	} {
		if _, err := e.l.Create(ctx, s, Draft{Subject: "x", Owner: bad}); !errors.Is(err, ErrInvalidOwner) {
			t.Errorf("owner %+v: %v", bad, err)
		}
		if _, err := e.l.Update(ctx, s, task.Key, Change{Owner: bad}); !errors.Is(err, ErrInvalidOwner) {
			t.Errorf("update owner %+v: %v", bad, err)
		}
	}
}

func TestInvalidRequests(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	task := e.create("s", "one")
	cases := []struct {
		name string
		err  error
		call func() error
	}{
		{"create in invalid session", ErrInvalidSession, func() error { _, err := e.l.Create(ctx, "bad id", Draft{Subject: "x"}); return err }},
		{"update in invalid session", ErrInvalidSession, func() error { _, err := e.l.Update(ctx, "", "T1", Change{Subject: "x"}); return err }},
		{"blank subject", ErrInvalidText, func() error { _, err := e.l.Create(ctx, "s", Draft{Subject: " \n\t "}); return err }},
		{"invalid parent ref", ErrInvalidRef, func() error { _, err := e.l.Create(ctx, "s", Draft{Subject: "x", ParentRef: "no/slash"}); return err }},
		{"unknown parent", ErrParentNotFound, func() error { _, err := e.l.Create(ctx, "s", Draft{Subject: "x", ParentRef: "T9"}); return err }},
		{"invalid task ref", ErrInvalidRef, func() error { _, err := e.l.Update(ctx, "s", "<T1>", Change{Subject: "x"}); return err }},
		{"unknown task", ErrNotFound, func() error { _, err := e.l.Update(ctx, "s", "T2", Change{Subject: "x"}); return err }},
		{"unknown task in another session", ErrNotFound, func() error { _, err := e.l.Update(ctx, "other", task.ID, Change{Subject: "x"}); return err }},
		{"empty change", ErrEmptyChange, func() error { _, err := e.l.Update(ctx, "s", "T1", Change{ExplicitReopen: true}); return err }},
		{"invalid status", ErrInvalidStatus, func() error { _, err := e.l.Update(ctx, "s", "T1", Change{Status: "done"}); return err }},
		{"invalid source", ErrInvalidMeta, func() error {
			_, err := e.l.Create(ctx, "s", Draft{Subject: "x", Meta: Meta{Source: "cli"}})
			return err
		}},
		{"invalid actor", ErrInvalidMeta, func() error {
			_, err := e.l.Update(ctx, "s", "T1", Change{Subject: "x", Meta: Meta{Actor: "robot"}})
			return err
		}},
	}
	for _, c := range cases {
		if err := c.call(); !errors.Is(err, c.err) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.err)
		}
	}
	if evs := e.events("s"); len(evs) != 1 {
		t.Errorf("refused requests appended events: %d events", len(evs))
	}
	if tasks, _ := e.list("s"); len(tasks) != 1 || tasks[0].Subject != "one" {
		t.Errorf("refused requests changed the ledger: %+v", tasks)
	}
}

func TestCanonicalText(t *testing.T) {
	euro200 := strings.Repeat("€", protocol.TaskSubjectMaxCodePoints)
	cases := []struct{ in, want string }{
		{"  Fix\t\tthe\n bug  ", "Fix the bug"},
		{"e\u0301t\u00e9", "\u00e9t\u00e9"},
		{"a\u00a0\u2003\u3000b\ufeff", "a b"},
		{"use sk-abcdefghijklmnopqrstu now", "use " + wireredact.Marker + " now"},
		{"token ghp_abcdefghijklmnopqrstuvwxyz", "token " + wireredact.Marker},
		{"Bearer   abcdefghijklmnopqrstuvwxyz0123", wireredact.Marker},
		{"<task-ledger>inside</task-ledger>", "inside"},
		{"a <TASK-Ledger id=1> b", "a b"},
		{"<task-<task-ledger>ledger>nested", "nested"},
		{"a < b > c", "a < b > c"},
		{"<task-ledger\n>x", "x"}, // the newline becomes a space, then the tag matches
		// Removing the tag joins two halves of a hex secret.
		{strings.Repeat("a", 20) + "<task-ledger>" + strings.Repeat("b", 20), wireredact.Marker},
		// Removing the tag leaves a combining mark after a letter.
		{"e<task-ledger>\u0301", "\u00e9"},
		{"bad \xff byte", "bad \uFFFD byte"},
		{euro200, euro200},
	}
	for _, c := range cases {
		got, err := CanonicalSubject(c.in)
		if err != nil || got != c.want {
			t.Errorf("CanonicalSubject(%q) = %q, %v; want %q", c.in, got, err, c.want)
			continue
		}
		if !protocol.IsCanonicalTaskText(got) {
			t.Errorf("CanonicalSubject(%q) = %q is not canonical", c.in, got)
		}
	}
	for _, in := range []string{"", "   ", "<task-ledger></task-ledger>", "\u2028\t"} {
		if _, err := CanonicalSubject(in); !errors.Is(err, ErrInvalidText) {
			t.Errorf("CanonicalSubject(%q): err = %v, want ErrInvalidText", in, err)
		}
	}
	var te *TextError
	if _, err := CanonicalSubject(euro200 + "a"); !errors.As(err, &te) || te.Field != FieldSubject {
		t.Errorf("subject of 201 code points: %v", err)
	}
	// The limit counts code points after canonicalisation.
	if _, err := CanonicalSubject("  " + strings.Repeat("a  ", 100) + "  "); err != nil {
		t.Errorf("subject that shrinks to 199 code points: %v", err)
	}
	reason := strings.Repeat("\U0001F600", protocol.TaskEvidenceMaxCodePoints)
	if got, err := CanonicalReason(FieldFailureReason, reason); err != nil || got != reason {
		t.Errorf("reason of 1000 code points: %v", err)
	}
	if _, err := CanonicalReason(FieldFailureReason, reason+"x"); !errors.As(err, &te) || te.Field != FieldFailureReason {
		t.Errorf("reason of 1001 code points: %v", err)
	}

	// The write path stores canonical text.
	e := newEnv(t)
	task, err := e.l.Create(testCtx(t), "s", Draft{Subject: "  ship\n<task-ledger>it sk-abcdefghijklmnopqrstu "})
	if err != nil || task.Subject != "ship it "+wireredact.Marker {
		t.Fatalf("Create: %q, %v", task.Subject, err)
	}
	task = e.update("s", task.Key, Change{Status: protocol.TaskInProgress})
	task = e.update("s", task.Key, Change{Status: protocol.TaskBlocked, BlockedReason: "waits\n\nfor  AKIAABCDEFGHIJKLMNOP"})
	if task.BlockedReason != "waits for "+wireredact.Marker {
		t.Errorf("blocked reason %q", task.BlockedReason)
	}
	tasks, _ := e.list("s")
	if tasks[0].Subject != "ship it "+wireredact.Marker || tasks[0].BlockedReason != task.BlockedReason {
		t.Errorf("listed %+v", tasks[0])
	}
}

func FuzzCanonicalText(f *testing.F) {
	for _, s := range []string{"", " a ", "<task-ledger>", "e\u0301", strings.Repeat("ab", 150), "sk-<task-ledger>abcdefghijklmnopqrstu", "\u0958\u0301"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, err := CanonicalSubject(s); err == nil {
			if !protocol.IsCanonicalTaskText(got) || utf8.RuneCountInString(got) > protocol.TaskSubjectMaxCodePoints || got == "" {
				t.Fatalf("CanonicalSubject(%q) = %q", s, got)
			}
			if again, err := CanonicalSubject(got); err != nil || again != got {
				t.Fatalf("CanonicalSubject is not idempotent on %q: %q, %v", got, again, err)
			}
		} else if !errors.Is(err, ErrInvalidText) {
			t.Fatalf("CanonicalSubject(%q): %v", s, err)
		}
		if p := projectText(s, protocol.TaskSubjectMaxCodePoints); p != "" &&
			(!protocol.IsCanonicalTaskText(p) || utf8.RuneCountInString(p) > protocol.TaskSubjectMaxCodePoints) {
			t.Fatalf("projectText(%q) = %q", s, p)
		}
	})
}

func TestKeys(t *testing.T) {
	e := newEnv(t)
	const s = "keys"
	ctx := testCtx(t)
	t1 := e.create(s, "one")
	t2 := e.create(s, "two")
	if t1.Key != "T1" || t2.Key != "T2" || t1.ParentID != "" {
		t.Fatalf("keys %s %s", t1.Key, t2.Key)
	}
	if !protocol.IsSafeTaskID(t1.ID) || t1.ID == t2.ID {
		t.Fatalf("ids %q %q", t1.ID, t2.ID)
	}
	c11, err := e.l.Create(ctx, s, Draft{Subject: "child", ParentRef: "T1"})
	if err != nil || c11.Key != "T1.1" || c11.ParentID != t1.ID {
		t.Fatalf("child by key: %+v, %v", c11, err)
	}
	c12, err := e.l.Create(ctx, s, Draft{Subject: "child", ParentRef: t1.ID})
	if err != nil || c12.Key != "T1.2" {
		t.Fatalf("child by id: %+v, %v", c12, err)
	}
	c111, err := e.l.Create(ctx, s, Draft{Subject: "grandchild", ParentRef: "T1.1"})
	if err != nil || c111.Key != "T1.1.1" || c111.ParentID != c11.ID {
		t.Fatalf("grandchild: %+v, %v", c111, err)
	}
	if t3 := e.create(s, "three"); t3.Key != "T3" {
		t.Fatalf("root key after children: %s", t3.Key)
	}
	c21, err := e.l.Create(ctx, s, Draft{Subject: "child", ParentRef: "T2"})
	if err != nil || c21.Key != "T2.1" {
		t.Fatalf("child of T2: %+v, %v", c21, err)
	}
	// Keys are unique per Session, not globally.
	if other := e.create("other", "first"); other.Key != "T1" {
		t.Fatalf("other session key %s", other.Key)
	}
	// Updates find tasks by key and by id.
	if got := e.update(s, "T1.1.1", Change{Subject: "by key"}); got.ID != c111.ID {
		t.Errorf("update by key hit %s", got.Key)
	}
	// The list is in creation order.
	tasks, _ := e.list(s)
	var keys []string
	for _, task := range tasks {
		keys = append(keys, task.Key)
	}
	if want := "T1 T2 T1.1 T1.2 T1.1.1 T3 T2.1"; strings.Join(keys, " ") != want {
		t.Errorf("list order %v, want %s", keys, want)
	}

	// A chain deep enough to exhaust the 64-character key.
	parent := "T3"
	for depth := 2; ; depth++ {
		task, err := e.l.Create(ctx, s, Draft{Subject: "deep", ParentRef: parent})
		if errors.Is(err, ErrKeyExhausted) {
			if len(parent)+2 <= protocol.TaskKeyMaxLen {
				t.Fatalf("key exhausted under %s (%d characters)", parent, len(parent))
			}
			break
		}
		if err != nil || len(task.Key) > protocol.TaskKeyMaxLen || !protocol.IsTaskKey(task.Key) {
			t.Fatalf("depth %d: %+v, %v", depth, task, err)
		}
		parent = task.Key
	}
}

func TestTaskLimit(t *testing.T) {
	e := newEnv(t)
	const s = "limit"
	const extra = 10
	ctx := testCtx(t)
	results := make([]error, MaxTasksPerSession+extra)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			_, results[i] = e.l.Create(ctx, s, Draft{Subject: "task " + strconv.Itoa(i)})
		})
	}
	wg.Wait()
	refused := 0
	for _, err := range results {
		var le *LimitError
		switch {
		case err == nil:
		case errors.As(err, &le) && errors.Is(err, ErrLimitExceeded) && le.Limit == MaxTasksPerSession && le.Count == MaxTasksPerSession:
			refused++
		default:
			t.Fatalf("Create: %v", err)
		}
	}
	if refused != extra {
		t.Fatalf("%d creates refused, want %d", refused, extra)
	}
	tasks, _ := e.list(s)
	if len(tasks) != MaxTasksPerSession {
		t.Fatalf("%d tasks listed", len(tasks))
	}
	keys := map[string]bool{}
	for _, task := range tasks {
		keys[task.Key] = true
	}
	for i := 1; i <= MaxTasksPerSession; i++ {
		if !keys["T"+strconv.Itoa(i)] {
			t.Fatalf("key T%d missing", i)
		}
	}
	if n := len(e.events(s)); n != MaxTasksPerSession {
		t.Fatalf("%d events, want %d", n, MaxTasksPerSession)
	}
	// Terminal tasks count, and so do archived ones.
	e.update(s, "T1", Change{Status: protocol.TaskCancelled})
	e.clock.Advance(DefaultArchiveAfter + time.Hour)
	if tasks, _ := e.list(s); len(tasks) != MaxTasksPerSession-1 {
		t.Fatalf("%d tasks listed after archival", len(tasks))
	}
	if _, err := e.l.Create(ctx, s, Draft{Subject: "one more"}); !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("create after archival: %v", err)
	}
	if _, err := e.l.Create(ctx, s, Draft{Subject: "child", ParentRef: "T2"}); !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("child create at the limit: %v", err)
	}
	// Updates are still possible at the limit, and other Sessions are
	// unaffected.
	e.update(s, "T2", Change{Subject: "still editable"})
	e.create("another", "fine")
}

func TestPages(t *testing.T) {
	for _, n := range []int{0, 1, protocol.TaskLedgerPageMaxItems, protocol.TaskLedgerPageMaxItems + 1} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			e := newEnv(t)
			const s = "pages"
			e.fill(s, n, nil)
			listed, revision := e.list(s)
			if len(listed) != n {
				t.Fatalf("%d tasks listed", len(listed))
			}
			if revision != protocol.TaskLedgerRevision(listed) {
				t.Fatalf("revision %s is not the revision of the list", revision)
			}

			out, _ := e.query(listStart(s))
			first := result(t, out)
			if first.Kind != protocol.TaskResultPage || first.SessionID != s || first.Revision != revision {
				t.Fatalf("first page %+v", first)
			}
			if want := min(n, protocol.TaskLedgerPageMaxItems); len(first.Tasks) != want {
				t.Fatalf("first page has %d tasks, want %d", len(first.Tasks), want)
			}
			if n <= protocol.TaskLedgerPageMaxItems {
				if first.NextCursor != nil {
					t.Fatalf("nextCursor %q, want null", *first.NextCursor)
				}
			} else {
				if first.NextCursor == nil || *first.NextCursor != "128" {
					t.Fatalf("nextCursor %v, want 128", first.NextCursor)
				}
				out, _ := e.query(listContinue(s, revision, "128"))
				second := result(t, out)
				if len(second.Tasks) != 1 || second.NextCursor != nil || !reflect.DeepEqual(second.Tasks[0], listed[128]) {
					t.Fatalf("second page %+v", second)
				}
			}
			all, _, _ := e.pages(s)
			if len(all) != len(listed) || n > 0 && !reflect.DeepEqual(all, listed) {
				t.Fatalf("pages do not add up to the list")
			}
			if n == 0 {
				// An empty ledger has one empty page; there is nothing to
				// continue from.
				out, _ := e.query(listContinue(s, revision, "0"))
				if out.Err == nil || out.Err.Code != protocol.ErrInvalidRequest {
					t.Fatalf("continue on an empty ledger: %+v", out)
				}
			}
		})
	}
}

func TestPageByteBound(t *testing.T) {
	e := newEnv(t)
	const s = "bytes"
	const n = 40
	// Large tasks: a 200-code-point subject of three-byte characters and a
	// 1000-code-point completion evidence, about 3.8 KB each.
	tasks := e.fill(s, n, func(i int) Draft {
		return Draft{Subject: fmt.Sprintf("%03d ", i) + strings.Repeat("€", protocol.TaskSubjectMaxCodePoints-4)}
	})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, task := range tasks {
		wg.Go(func() {
			ctx := testCtx(t)
			if _, errs[i] = e.l.Update(ctx, s, task.ID, Change{Status: protocol.TaskInProgress}); errs[i] != nil {
				return
			}
			_, errs[i] = e.l.Update(ctx, s, task.ID, Change{Status: protocol.TaskCompleted,
				CompletionEvidence: strings.Repeat("✓", protocol.TaskEvidenceMaxCodePoints-len(task.Key)) + task.Key})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	listed, revision := e.list(s)
	all, encoded, _ := e.pages(s)
	if !reflect.DeepEqual(all, listed) {
		t.Fatal("pages do not add up to the list")
	}
	if len(encoded) < 3 {
		t.Fatalf("%d pages; the byte bound should split the list", len(encoded))
	}
	offset := 0
	for i, b := range encoded {
		if len(b) > protocol.TaskLedgerPageMaxBytes {
			t.Fatalf("page %d is %d bytes", i, len(b))
		}
		var page protocol.TaskLedgerQueryResult
		if i == 0 {
			page = result(t, must(e.query(listStart(s))))
		} else {
			page = result(t, must(e.query(listContinue(s, revision, strconv.Itoa(offset)))))
		}
		offset += len(page.Tasks)
		if page.NextCursor == nil {
			continue
		}
		// Greedy: one more task would not have fit.
		bigger := page
		bigger.Tasks = listed[offset-len(page.Tasks) : offset+1]
		bigger.NextCursor = nextCursor(offset+1, len(listed))
		size, err := protocol.EncodedSize(bigger)
		if err != nil {
			t.Fatal(err)
		}
		if size <= protocol.TaskLedgerPageMaxBytes && len(bigger.Tasks) <= protocol.TaskLedgerPageMaxItems {
			t.Fatalf("page %d stops at %d tasks although %d tasks encode to %d bytes", i, len(page.Tasks), len(bigger.Tasks), size)
		}
	}
}

func must(out host.Outcome, _ []byte) host.Outcome { return out }

func TestBuildPageExactBound(t *testing.T) {
	// A page that is exactly 48 KiB is allowed; one byte more is split.
	task := func(i int, subject string) protocol.Task {
		return protocol.Task{ID: "t" + strconv.Itoa(i), Key: "T" + strconv.Itoa(i+1), Subject: subject,
			Status: protocol.TaskPending, ResumeTrust: protocol.ResumeTrusted}
	}
	const rev = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
	size := func(ts []protocol.Task) int {
		n, err := protocol.EncodedSize(protocol.TaskLedgerQueryResult{Kind: protocol.TaskResultPage, SessionID: "s", Revision: rev, Tasks: ts})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Tasks with 450-byte subjects (each adds less than the 597 bytes the
	// last subject can vary by), then one whose subject fills the page
	// exactly.
	var base []protocol.Task
	fill := 0
	for {
		fill = protocol.TaskLedgerPageMaxBytes - size(append(base, task(len(base), "")))
		if fill <= 3*protocol.TaskSubjectMaxCodePoints-2 {
			break
		}
		base = append(base, task(len(base), strings.Repeat("€", 150)))
	}
	if fill < 2 || len(base) >= protocol.TaskLedgerPageMaxItems {
		t.Fatalf("cannot build the page: %d tasks, %d bytes left", len(base), fill)
	}
	subject := strings.Repeat("€", fill/3) + strings.Repeat("a", fill%3)
	exact := append(append([]protocol.Task(nil), base...), task(len(base), subject))
	if size(exact) != protocol.TaskLedgerPageMaxBytes {
		t.Fatalf("built %d bytes", size(exact))
	}
	page, err := buildPage("s", rev, exact, 0)
	if err != nil || len(page.Tasks) != len(exact) || page.NextCursor != nil {
		t.Fatalf("exact page: %d tasks, %v", len(page.Tasks), err)
	}
	checkOutput(t, page)
	over := append(append([]protocol.Task(nil), base...), task(len(base), subject+"a"))
	page, err = buildPage("s", rev, over, 0)
	if err != nil || len(page.Tasks) != len(base) || page.NextCursor == nil || *page.NextCursor != strconv.Itoa(len(base)) {
		t.Fatalf("page one byte over: %d tasks, cursor %v, %v", len(page.Tasks), page.NextCursor, err)
	}
	checkOutput(t, page)
}

func TestTwoReadersGetIdenticalPages(t *testing.T) {
	e := newEnv(t)
	const s = "readers"
	e.fill(s, 150, nil)
	_, rev := e.list(s)
	for _, in := range []protocol.TaskLedgerQueryInput{listStart(s), listContinue(s, rev, "128"), get(s, "T7")} {
		var got [2][]byte
		var wg sync.WaitGroup
		for i := range got {
			wg.Go(func() {
				out := e.l.Handlers()[protocol.OpTaskLedgerQuery](testCtx(t), &host.Call{Input: in})
				if out.Err != nil {
					t.Errorf("reader %d: %v", i, out.Err)
					return
				}
				got[i], _ = protocol.Marshal(out.Result)
			})
		}
		wg.Wait()
		if got[0] == nil || !bytes.Equal(got[0], got[1]) {
			t.Fatalf("%s: readers got different pages", in.Kind)
		}
		_, b := e.query(in)
		if !bytes.Equal(b, got[0]) {
			t.Fatalf("%s: a later reader got a different page", in.Kind)
		}
	}
}

func TestContinuationAfterChange(t *testing.T) {
	e := newEnv(t)
	const s = "changes"
	e.fill(s, 130, nil)
	out, _ := e.query(listStart(s))
	rev := result(t, out).Revision

	expectChanged := func(name, expected string) string {
		t.Helper()
		_, actual := e.list(s)
		if actual == expected {
			t.Fatalf("%s: the revision did not change", name)
		}
		out, _ := e.query(listContinue(s, expected, "128"))
		r := result(t, out)
		if r.Kind != protocol.TaskResultRevisionChanged || r.Expected != expected || r.Actual != actual {
			t.Fatalf("%s: %+v", name, r)
		}
		return actual
	}

	rev = func() string { e.update(s, "T5", Change{Subject: "renamed"}); return expectChanged("subject", rev) }()
	rev = func() string {
		e.update(s, "T5", Change{Status: protocol.TaskInProgress})
		return expectChanged("status", rev)
	}()
	rev = func() string { e.create(s, "new"); return expectChanged("create", rev) }()
	// A stale revision wins over a malformed cursor.
	out, _ = e.query(listContinue(s, protocol.TaskLedgerRevision(nil), "x"))
	if r := result(t, out); r.Kind != protocol.TaskResultRevisionChanged || r.Actual != rev {
		t.Fatalf("stale revision with a malformed cursor: %+v", r)
	}

	// Without a change the continuation survives a restart, byte for byte.
	_, before := e.query(listContinue(s, rev, "128"))
	e.restart()
	_, after := e.query(listContinue(s, rev, "128"))
	if before == nil || !bytes.Equal(before, after) {
		t.Fatalf("page changed across a restart:\n%s\n%s", before, after)
	}
	// A change after the restart is seen by a continuation of a revision
	// read before it.
	e.update(s, "T6", Change{Status: protocol.TaskCancelled})
	rev = expectChanged("after restart", rev)
	// And archival is a change too.
	e.clock.Advance(DefaultArchiveAfter)
	expectChanged("archival", rev)
}

func TestCursors(t *testing.T) {
	e := newEnv(t)
	const s = "cursors"
	e.fill(s, 3, nil)
	listed, rev := e.list(s)
	for _, c := range []string{"abc", "01", "00", "-1", "+1", "1.0", " 1", "1 ", "0x1", "3", "4", "99999999999999999999999", "9007199254740992"} {
		out, _ := e.query(listContinue(s, rev, c))
		if out.Err == nil || out.Err.Code != protocol.ErrInvalidRequest || out.Err.Message != MessageInvalidCursor {
			t.Errorf("cursor %q: %+v", c, out)
		}
	}
	for i := range listed {
		out, _ := e.query(listContinue(s, rev, strconv.Itoa(i)))
		page := result(t, out)
		if !reflect.DeepEqual(page.Tasks, listed[i:]) || page.NextCursor != nil {
			t.Errorf("cursor %d: %+v", i, page)
		}
	}
}

func TestGet(t *testing.T) {
	e := newEnv(t)
	const s = "get"
	e.fill(s, 5, nil)
	e.update(s, "T2", Change{Status: protocol.TaskInProgress})
	e.update(s, "T3", Change{Status: protocol.TaskInProgress})
	e.update(s, "T3", withEvidence(protocol.TaskCompleted))
	child, err := e.l.Create(testCtx(t), s, Draft{Subject: "child", ParentRef: "T1", Owner: &protocol.TaskOwner{Actor: protocol.ActorMainAgent, RunID: "r1"}})
	if err != nil {
		t.Fatal(err)
	}
	listed, rev := e.list(s)
	for _, task := range listed {
		for _, ref := range []string{task.Key, task.ID} {
			out, b := e.query(get(s, ref))
			r := result(t, out)
			if r.Kind != protocol.TaskResultTask || r.SessionID != s || r.Revision != rev || r.Task == nil {
				t.Fatalf("get %s: %+v", ref, r)
			}
			if !reflect.DeepEqual(*r.Task, task) {
				t.Fatalf("get %s: %+v, listed %+v", ref, *r.Task, task)
			}
			want, _ := protocol.Marshal(task)
			if !bytes.Contains(b, want) {
				t.Fatalf("get %s encodes the task differently from the list", ref)
			}
		}
	}
	if got := findRef(listed, child.Key); got == nil || got.ParentID == "" || got.Owner == nil || got.Owner.RunID != "r1" {
		t.Fatalf("child DTO %+v", got)
	}
	for _, ref := range []string{"T99", "T1.9", "no-such-task"} {
		out, b := e.query(get(s, ref))
		if r := result(t, out); r.Kind != protocol.TaskResultTask || r.Task != nil || r.Revision != rev {
			t.Fatalf("get %s: %+v", ref, r)
		}
		if !bytes.Contains(b, []byte(`"task":null`)) {
			t.Fatalf("get %s: %s", ref, b)
		}
	}
	// The same task from another Session is not found.
	out, _ := e.query(get("elsewhere", listed[0].ID))
	if r := result(t, out); r.Task != nil {
		t.Fatalf("task found in another session: %+v", r)
	}
}

func TestArchival(t *testing.T) {
	e := newEnv(t)
	const s = "archive"
	done := e.driveTo(s, protocol.TaskCompleted)
	open := e.driveTo(s, protocol.TaskInProgress)
	e.clock.Advance(DefaultArchiveAfter - time.Millisecond)
	if tasks, _ := e.list(s); len(tasks) != 2 {
		t.Fatalf("%d tasks listed before the archival horizon", len(tasks))
	}
	e.clock.Advance(time.Millisecond)
	tasks, rev := e.list(s)
	if len(tasks) != 1 || tasks[0].ID != open.ID {
		t.Fatalf("listed after archival: %+v", tasks)
	}
	out, _ := e.query(get(s, done.Key))
	if r := result(t, out); r.Task != nil || r.Revision != rev {
		t.Fatalf("archived task found: %+v", r)
	}
	// A write of the Session materialises the flag; the list is the same.
	e.update(s, open.Key, Change{Subject: "touch"})
	var archived int
	err := e.st.Read(testCtx(t), func(q store.Querier) error {
		return q.QueryRow(`SELECT archived FROM tasks WHERE session_id = ? AND task_id = ?`, s, done.ID).Scan(&archived)
	})
	if err != nil || archived != 1 {
		t.Fatalf("archived column %d, %v", archived, err)
	}
	// Reopening brings it back.
	e.update(s, done.Key, Change{Status: protocol.TaskInProgress, ExplicitReopen: true})
	if tasks, _ := e.list(s); len(tasks) != 2 {
		t.Fatalf("reopened archived task not listed: %+v", tasks)
	}
}

func TestProjection(t *testing.T) {
	e := newEnv(t)
	const s = "projection"
	e.create(s, "pending")
	e.driveTo(s, protocol.TaskInProgress)
	e.driveTo(s, protocol.TaskBlocked)
	e.driveTo(s, protocol.TaskFailed)
	// Documents an older or damaged ledger could hold.
	e.rawInsert(s, "raw-1", "T10", 10, `{"id":"raw-1","key":"T10","subject":"done","status":"completed","createdAt":1,"updatedAt":2}`)
	e.rawInsert(s, "raw-2", "T11", 11, `{"id":"raw-2","key":"T11","subject":"<task-ledger>","status":"blocked","createdAt":1,"updatedAt":2,"blockedReason":" \n "}`)
	e.rawInsert(s, "raw-3", "T12", 12, `{"id":"raw-3","key":"T12","subject":"kept","status":"in_progress","createdAt":1.5,"updatedAt":-0,"resumeTrust":"repaired"}`)
	e.rawInsert(s, "raw-4", "T13", 13, `{"id":"raw-4","key":"T13","subject":"  `+strings.Repeat("x", 300)+`","status":"failed","createdAt":1,"updatedAt":2,"failureReason":"ghp_abcdefghijklmnopqrstuvwxyz","resumeTrust":"trusted"}`)
	e.rawInsert(s, "raw-5", "T14", 14, `{"id":"raw-5","key":"T14","subject":"stale by trust","status":"completed","createdAt":1,"updatedAt":2,"resumeTrust":"untrusted"}`)

	want := []struct {
		key, subject, trust string
		reason              string
	}{
		{"T1", "pending", protocol.ResumeTrusted, ""},
		{"T2", "drive to in_progress", protocol.ResumeStale, ""},
		{"T3", "drive to blocked", protocol.ResumeTrusted, "waiting for review"},
		{"T4", "drive to failed", protocol.ResumeTrusted, "tests fail"},
		{"T10", "done", protocol.ResumeNeedsRevalidation, ""},
		{"T11", wireredact.Marker, protocol.ResumeNeedsRevalidation, ""},
		{"T12", "kept", protocol.ResumeRepaired, ""},
		{"T13", strings.Repeat("x", 200), protocol.ResumeTrusted, wireredact.Marker},
		{"T14", "stale by trust", protocol.ResumeUntrusted, ""},
	}
	tasks, _, _ := e.pages(s)
	if len(tasks) != len(want) {
		t.Fatalf("%d tasks listed, want %d", len(tasks), len(want))
	}
	for i, w := range want {
		got := tasks[i]
		reason := got.BlockedReason + got.FailureReason
		if got.Key != w.key || got.Subject != w.subject || got.ResumeTrust != w.trust || reason != w.reason {
			t.Errorf("task %d: key %s subject %q trust %s reason %q; want %+v", i, got.Key, got.Subject, got.ResumeTrust, reason, w)
		}
	}
	// Stored documents are not touched by reads.
	var doc string
	err := e.st.Read(testCtx(t), func(q store.Querier) error {
		return q.QueryRow(`SELECT document FROM tasks WHERE task_id = 'raw-2'`).Scan(&doc)
	})
	if err != nil || !strings.Contains(doc, "<task-ledger>") {
		t.Fatalf("stored document %q, %v", doc, err)
	}
	// Tasks returned by the write API carry no classification.
	if task := e.create(s, "fresh"); task.ResumeTrust != "" {
		t.Errorf("created task has resumeTrust %q", task.ResumeTrust)
	}
}

func TestQueryFailures(t *testing.T) {
	e := newEnv(t)
	const s = "failures"
	e.create(s, "fine")
	// A corrupt document is an internal failure, not a partial list.
	e.rawInsert(s, "bad", "T2", 2, `{"id":"bad","key":"T2","subject":"x","status":"done","createdAt":0,"updatedAt":0}`)
	for _, in := range []protocol.TaskLedgerQueryInput{listStart(s), get(s, "T1")} {
		out, _ := e.query(in)
		if out.Err == nil || out.Err.Code != protocol.ErrInternalFailure || out.Err.Message != protocol.MessageOperationFailed {
			t.Errorf("%s on a corrupt ledger: %+v", in.Kind, out)
		}
	}
	e.rawInsert(s, "worse", "T3", 3, `not json`)
	if _, _, err := e.l.List(testCtx(t), s); err == nil {
		t.Error("List of a corrupt ledger succeeded")
	}
	// Other Sessions are unaffected.
	if out, _ := e.query(listStart("healthy")); out.Err != nil {
		t.Errorf("healthy session: %v", out.Err)
	}
	// A closed store.
	e.close()
	out, _ := e.query(listStart(s))
	if out.Err == nil || out.Err.Code != protocol.ErrInternalFailure {
		t.Errorf("query on a closed store: %+v", out)
	}
	if _, err := e.l.Create(testCtx(t), s, Draft{Subject: "x"}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Create on a closed store: %v", err)
	}
	// An input of the wrong type.
	out = e.l.Handlers()[protocol.OpTaskLedgerQuery](testCtx(t), &host.Call{Input: "list"})
	if out.Err == nil || out.Err.Code != protocol.ErrInternalFailure {
		t.Errorf("input of the wrong type: %+v", out)
	}
}

func TestUnknownSession(t *testing.T) {
	e := newEnv(t)
	out, b := e.query(listStart("never-seen"))
	r := result(t, out)
	if r.Kind != protocol.TaskResultPage || len(r.Tasks) != 0 || r.NextCursor != nil || r.Revision != protocol.TaskLedgerRevision(nil) {
		t.Fatalf("unknown session: %s", b)
	}
	if !bytes.Contains(b, []byte(`"tasks":[]`)) || !bytes.Contains(b, []byte(`"nextCursor":null`)) {
		t.Fatalf("unknown session: %s", b)
	}
	out, _ = e.query(get("never-seen", "T1"))
	if r := result(t, out); r.Task != nil || r.Revision != protocol.TaskLedgerRevision(nil) {
		t.Fatalf("get in unknown session: %+v", r)
	}
}

func TestDurability(t *testing.T) {
	e := newEnv(t)
	const s = "durable"
	task, err := e.l.Create(testCtx(t), s, Draft{Subject: "survive", Meta: Meta{Source: SourceTool, Actor: protocol.ActorMainAgent, RunID: "run-1", TurnID: "turn-1", ToolCallID: "call-1"}})
	if err != nil {
		t.Fatal(err)
	}
	e.restart()
	got, _, err := e.l.Get(testCtx(t), s, task.ID)
	if err != nil || got == nil || got.Subject != "survive" || got.Key != task.Key || got.CreatedAt != task.CreatedAt {
		t.Fatalf("after restart: %+v, %v", got, err)
	}
	evs := e.events(s)
	if len(evs) != 1 {
		t.Fatalf("%d events", len(evs))
	}
	ev := evs[0]
	if ev.Type != EventCreated || ev.PreviousStatus != "" || ev.NextStatus != protocol.TaskPending || ev.TaskID != task.ID ||
		ev.SessionID != s || ev.Seq != 1 || ev.TS != int64(task.CreatedAt) || !reflect.DeepEqual(ev.Task, task) ||
		ev.Source != SourceTool || ev.Actor != protocol.ActorMainAgent ||
		ev.Refs == nil || *ev.Refs != (EventRefs{RunID: "run-1", TurnID: "turn-1", ToolCallID: "call-1"}) {
		t.Fatalf("event %+v", ev)
	}
	// The next key continues after the restart.
	if next := e.create(s, "next"); next.Key != "T2" {
		t.Fatalf("key after restart %s", next.Key)
	}
}

// TestEventsMatchProjection replays the event log and checks that the last
// snapshot of every task is the projection row, and that the log is
// append-only.
func TestEventsMatchProjection(t *testing.T) {
	e := newEnv(t)
	const s = "replay"
	tasks := e.fill(s, 20, nil)
	var wg sync.WaitGroup
	for i, task := range tasks {
		wg.Go(func() {
			ctx := testCtx(t)
			steps := []Change{withEvidence(protocol.TaskInProgress), withEvidence(protocol.TaskBlocked), withEvidence(protocol.TaskFailed), {Status: protocol.TaskPending}}
			for _, c := range steps[:i%len(steps)+1] {
				if _, err := e.l.Update(ctx, s, task.ID, c); err != nil {
					t.Error(err)
					return
				}
			}
			// A refused change in the middle of concurrent writes.
			if _, err := e.l.Update(ctx, s, task.ID, Change{Status: protocol.TaskCompleted}); err == nil {
				t.Errorf("%s: completed without evidence", task.Key)
			}
		})
	}
	wg.Wait()
	evs := e.events(s)
	last := map[string]protocol.Task{}
	status := map[string]protocol.TaskStatus{}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
		if ev.PreviousStatus != status[ev.TaskID] {
			t.Fatalf("event %d: previous status %q, the log says %q", i, ev.PreviousStatus, status[ev.TaskID])
		}
		if ev.Type != EventCreated && !CanTransition(ev.PreviousStatus, ev.NextStatus, ev.Type == EventReopened) {
			t.Fatalf("event %d: %s → %s", i, ev.PreviousStatus, ev.NextStatus)
		}
		last[ev.TaskID], status[ev.TaskID] = ev.Task, ev.NextStatus
	}
	err := e.st.Read(testCtx(t), func(q store.Querier) error {
		rows, err := q.Query(`SELECT task_id, document FROM tasks WHERE session_id = ?`, s)
		if err != nil {
			return err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var id, doc string
			if err := rows.Scan(&id, &doc); err != nil {
				return err
			}
			row, err := decodeDocument(doc)
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(row, last[id]) {
				return fmt.Errorf("task %s: row %+v, last event %+v", id, row, last[id])
			}
			n++
		}
		if n != len(last) {
			return fmt.Errorf("%d rows for %d tasks in the log", n, len(last))
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`UPDATE task_events SET type = 'x'`, `DELETE FROM task_events`} {
		err := e.st.Write(testCtx(t), func(tx *store.Tx) error { _, err := tx.Exec(q); return err })
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v", q, err)
		}
	}
	if n := len(e.events(s)); n != len(evs) {
		t.Fatalf("event log changed: %d events, was %d", n, len(evs))
	}
}

func TestLane(t *testing.T) {
	e := &env{t: t, path: filepath.Join(t.TempDir(), "host.db"), clock: newClock(), gate: lane.New()}
	e.open()
	t.Cleanup(func() { e.close() })
	e.create("laned", "in the lane")
	out, _ := e.query(listStart("laned"))
	if r := result(t, out); len(r.Tasks) != 1 {
		t.Fatalf("page %+v", r)
	}
	// Writes do not enter the lane: they work from inside a lane op of
	// the same Session.
	err := e.gate.Run(testCtx(t), "laned", func(ctx context.Context, _ *lane.Lease) error {
		_, err := e.l.Create(ctx, "laned", Draft{Subject: "from a lane op"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.gate.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	out, _ = e.query(listStart("laned"))
	if out.Err == nil || out.Err.Code != protocol.ErrInternalFailure {
		t.Fatalf("query through a closed lane: %+v", out)
	}
}

func TestNextKey(t *testing.T) {
	cases := []struct {
		keys   []string
		prefix string
		want   string
	}{
		{nil, "T", "T1"},
		{[]string{"T1", "T2", "T1.1"}, "T", "T3"},
		{[]string{"T2"}, "T", "T1"},
		{[]string{"T1", "T1.1", "T1.1.1", "T10"}, "T1.", "T1.2"},
		{[]string{"T1", "T11"}, "T1.", "T1.1"},
	}
	for _, c := range cases {
		if got := nextKey(c.keys, c.prefix); got != c.want {
			t.Errorf("nextKey(%v, %q) = %q, want %q", c.keys, c.prefix, got, c.want)
		}
	}
	ids := map[string]bool{}
	for range 100 {
		id, err := newID()
		if err != nil || !protocol.IsSafeTaskID(id) || len(id) != 36 || ids[id] {
			t.Fatalf("newID() = %q, %v", id, err)
		}
		ids[id] = true
	}
	sorted := make([]string, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Strings(sorted)
	if sorted[0][14] != '4' {
		t.Fatalf("not a version 4 UUID: %s", sorted[0])
	}
}
