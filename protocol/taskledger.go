package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"sync"
	"unicode/utf8"

	"github.com/maka-agent/maka/internal/wireredact"
	"golang.org/x/text/unicode/norm"
)

// This file owns the task ledger: the Task shape of protocol v0 and the
// codec of task.ledger.query.

// Task ledger bounds.
const (
	TaskLedgerPageMaxItems    = 128
	TaskLedgerPageMaxBytes    = 48 * 1024
	TaskLedgerCursorMaxBytes  = 512
	TaskSubjectMaxCodePoints  = 200
	TaskEvidenceMaxCodePoints = 1000
	TaskKeyMaxLen             = 64
)

// TaskStatus is the status of a task.
type TaskStatus string

// Task statuses.
const (
	TaskPending    TaskStatus = "pending"
	TaskInProgress TaskStatus = "in_progress"
	TaskBlocked    TaskStatus = "blocked"
	TaskCompleted  TaskStatus = "completed"
	TaskFailed     TaskStatus = "failed"
	TaskCancelled  TaskStatus = "cancelled"
)

var taskStatuses = []string{
	string(TaskPending), string(TaskInProgress), string(TaskBlocked),
	string(TaskCompleted), string(TaskFailed), string(TaskCancelled),
}

// Resume-trust classifications.
const (
	ResumeTrusted           = "trusted"
	ResumeNeedsRevalidation = "needs_revalidation"
	ResumeStale             = "stale"
	ResumeRepaired          = "repaired"
	ResumeUntrusted         = "untrusted"
)

var resumeTrusts = []string{ResumeTrusted, ResumeNeedsRevalidation, ResumeStale, ResumeRepaired, ResumeUntrusted}

// Task owner actors.
const (
	ActorMainAgent  = "main_agent"
	ActorChildAgent = "child_agent"
)

// TaskTime is a task timestamp: any finite number, encoded the way
// JavaScript's JSON.stringify writes numbers (so -0 is written as 0).
type TaskTime float64

// MarshalJSON encodes t like JSON.stringify.
func (t TaskTime) MarshalJSON() ([]byte, error) { return appendNumber(nil, float64(t)), nil }

// Task is one task of a session's ledger, in canonical wire form. Optional
// strings are empty when absent.
type Task struct {
	ID                 string     `json:"id"`
	Key                string     `json:"key"`
	Subject            string     `json:"subject"`
	Status             TaskStatus `json:"status"`
	CreatedAt          TaskTime   `json:"createdAt"`
	UpdatedAt          TaskTime   `json:"updatedAt"`
	ParentID           string     `json:"parentId,omitempty"`
	Owner              *TaskOwner `json:"owner,omitempty"`
	EndedAt            *TaskTime  `json:"endedAt,omitempty"`
	BlockedReason      string     `json:"blockedReason,omitempty"`
	FailureReason      string     `json:"failureReason,omitempty"`
	CompletionEvidence string     `json:"completionEvidence,omitempty"`
	ResumeTrust        string     `json:"resumeTrust,omitempty"`
}

// TaskOwner says who owns a task; the ids are empty when absent.
type TaskOwner struct {
	Actor     string `json:"actor"`
	SessionID string `json:"sessionId,omitempty"`
	AgentID   string `json:"agentId,omitempty"`
	RunID     string `json:"runId,omitempty"`
	TurnID    string `json:"turnId,omitempty"`
}

// MissingEvidence reports whether the task's status lacks the evidence it
// requires: blocked without blockedReason, failed without failureReason, or
// completed without completionEvidence.
func (t Task) MissingEvidence() bool {
	switch t.Status {
	case TaskBlocked:
		return t.BlockedReason == ""
	case TaskFailed:
		return t.FailureReason == ""
	case TaskCompleted:
		return t.CompletionEvidence == ""
	}
	return false
}

// Task ledger query kinds.
const (
	TaskQueryListStart    = "list_start"
	TaskQueryListContinue = "list_continue"
	TaskQueryGet          = "get"
)

// TaskLedgerQueryInput is the input of task.ledger.query (union on Kind):
// list_continue carries Revision and Cursor, get carries TaskRef.
type TaskLedgerQueryInput struct {
	Kind      string `json:"kind"`
	SessionID string `json:"sessionId"`
	Revision  string `json:"revision,omitempty"`
	Cursor    string `json:"cursor,omitempty"`
	TaskRef   string `json:"taskRef,omitempty"`
}

// Task ledger result kinds.
const (
	TaskResultPage            = "page"
	TaskResultRevisionChanged = "revision_changed"
	TaskResultTask            = "task"
)

// TaskLedgerQueryResult is the result of task.ledger.query (union on Kind):
// page carries SessionID, Revision, Tasks and NextCursor (nil encodes null);
// revision_changed carries Expected and Actual; task carries SessionID,
// Revision and Task (nil encodes null).
type TaskLedgerQueryResult struct {
	Kind       string
	SessionID  string
	Revision   string
	Tasks      []Task
	NextCursor *string
	Expected   string
	Actual     string
	Task       *Task
}

// MarshalJSON encodes the variant named by Kind.
func (r TaskLedgerQueryResult) MarshalJSON() ([]byte, error) {
	switch r.Kind {
	case TaskResultRevisionChanged:
		return Marshal(struct {
			Kind     string `json:"kind"`
			Expected string `json:"expected"`
			Actual   string `json:"actual"`
		}{r.Kind, r.Expected, r.Actual})
	case TaskResultTask:
		return Marshal(struct {
			Kind      string `json:"kind"`
			SessionID string `json:"sessionId"`
			Revision  string `json:"revision"`
			Task      *Task  `json:"task"`
		}{r.Kind, r.SessionID, r.Revision, r.Task})
	default:
		return Marshal(struct {
			Kind       string  `json:"kind"`
			SessionID  string  `json:"sessionId"`
			Revision   string  `json:"revision"`
			Tasks      []Task  `json:"tasks"`
			NextCursor *string `json:"nextCursor"`
		}{r.Kind, r.SessionID, r.Revision, nonNil(r.Tasks), r.NextCursor})
	}
}

// TaskLedgerRevision returns the revision of a projected task list:
// "sha256:" and the lowercase hex SHA-256 of its Marshal encoding.
func TaskLedgerRevision(tasks []Task) string {
	// Tasks hold only strings, numbers encoded by TaskTime and booleans, so
	// encoding cannot fail.
	b, _ := Marshal(nonNil(tasks))
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func init() {
	registerCodec(OpTaskLedgerQuery,
		func(d *D, v Value) any {
			in := TaskLedgerQueryInput{Kind: discriminator(d, v, "input", "kind",
				TaskQueryListStart, TaskQueryListContinue, TaskQueryGet)}
			var o Obj
			switch in.Kind {
			case TaskQueryListStart:
				o = d.Exact(v, "input", "kind", "sessionId")
			case TaskQueryListContinue:
				o = d.Exact(v, "input", "kind", "sessionId", "revision", "cursor")
				in.Revision = decodeTaskRevision(o, "revision")
				in.Cursor = o.StringBytes("cursor", 1, TaskLedgerCursorMaxBytes)
			default:
				o = d.Exact(v, "input", "kind", "sessionId", "taskRef")
				in.TaskRef = o.String("taskRef", 1, 128)
				if !d.Failed() && !IsSafeTaskID(in.TaskRef) && !IsTaskKey(in.TaskRef) {
					d.Fail("input.taskRef", "neither a task id nor a task key")
				}
			}
			in.SessionID = o.EntityID("sessionId")
			return in
		},
		func(d *D, v Value) any {
			r := TaskLedgerQueryResult{Kind: discriminator(d, v, "result", "kind",
				TaskResultPage, TaskResultRevisionChanged, TaskResultTask)}
			switch r.Kind {
			case TaskResultRevisionChanged:
				o := d.Exact(v, "result", "kind", "expected", "actual")
				r.Expected = decodeTaskRevision(o, "expected")
				r.Actual = decodeTaskRevision(o, "actual")
			case TaskResultTask:
				o := d.Exact(v, "result", "kind", "sessionId", "revision", "task")
				r.SessionID = o.EntityID("sessionId")
				r.Revision = decodeTaskRevision(o, "revision")
				if tv, tp := o.Get("task"); tv.Kind() != KindNull {
					t := decodeTask(d, tv, tp)
					r.Task = &t
				}
			default:
				o := d.Exact(v, "result", "kind", "sessionId", "revision", "tasks", "nextCursor")
				r.SessionID = o.EntityID("sessionId")
				r.Revision = decodeTaskRevision(o, "revision")
				items, p := o.Array("tasks", 0, TaskLedgerPageMaxItems)
				r.Tasks = make([]Task, 0, len(items))
				for i, item := range items {
					r.Tasks = append(r.Tasks, decodeTask(d, item, Index(p, i)))
				}
				if !o.IsNull("nextCursor") {
					c := o.StringBytes("nextCursor", 1, TaskLedgerCursorMaxBytes)
					r.NextCursor = &c
				}
				d.EncodedWithin(r, "result", TaskLedgerPageMaxBytes)
			}
			return r
		})
}

// DecodeTask strictly decodes a task in canonical wire form.
func DecodeTask(v Value) (Task, error) {
	d := &D{}
	t := decodeTask(d, v, "task")
	return t, d.Err()
}

var (
	taskRevisionPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^sha256:[a-f0-9]{64}$`) })
	safeTaskIDPattern   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`) })
	taskKeyPattern      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^T[1-9][0-9]*(?:\.[1-9][0-9]*)*$`) })
	// taskLedgerTag matches the ledger markup the projection strips; the
	// letters are folded by hand because only ASCII case folds in the
	// original's (non-Unicode) regular expression.
	taskLedgerTag = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`</?[Tt][Aa][Ss][Kk]-[Ll][Ee][Dd][Gg][Ee][Rr][^\n>]*>`)
	})
)

// IsSafeTaskID reports whether s is a safe task id: a stable token that
// internal/wireredact finds no secret in.
func IsSafeTaskID(s string) bool {
	return safeTaskIDPattern().MatchString(s) && !wireredact.Contains(s)
}

// IsTaskKey reports whether s is a task key such as T1 or T3.2.
func IsTaskKey(s string) bool {
	return len(s) <= TaskKeyMaxLen && taskKeyPattern().MatchString(s)
}

// IsCanonicalTaskText reports whether the task projection would leave s
// unchanged: NFC, no whitespace other than single inner spaces, no ledger
// tags, and no secret internal/wireredact would replace.
func IsCanonicalTaskText(s string) bool {
	prevSpace := true // rejects a leading space
	for _, r := range s {
		if isJSWhitespace(r) {
			if r != ' ' || prevSpace {
				return false
			}
			prevSpace = true
			continue
		}
		prevSpace = false
	}
	if prevSpace && s != "" {
		return false // trailing space
	}
	return norm.NFC.IsNormalString(s) && !taskLedgerTag().MatchString(s) && !wireredact.Contains(s)
}

func decodeTaskRevision(o Obj, key string) string {
	v, p := o.Get(key)
	return o.d.Pattern(v, p, taskRevisionPattern())
}

func decodeSafeTaskID(o Obj, key string) string {
	v, p := o.Get(key)
	s := o.d.String(v, p, 1, 64)
	if !o.d.Failed() && !IsSafeTaskID(s) {
		o.d.Fail(p, "not a safe task id")
	}
	return s
}

func decodeTaskText(o Obj, key string, maxCodePoints int) string {
	v, p := o.Get(key)
	s := o.d.String(v, p, 1, 2*maxCodePoints) // a code point is at most two UTF-16 units
	if o.d.Failed() {
		return ""
	}
	if n := utf8.RuneCountInString(s); n > maxCodePoints {
		o.d.Fail(p, "%d code points, more than %d", n, maxCodePoints)
	} else if !IsCanonicalTaskText(s) {
		o.d.Fail(p, "not canonical task text")
	}
	return s
}

func decodeTaskTime(o Obj, key string) TaskTime {
	return TaskTime(o.Number(key) + 0) // + 0 turns -0 into 0
}

// optionalString is an optional string member and where its value goes.
type optionalString struct {
	key string
	dst *string
}

func decodeTask(d *D, v Value, path string) Task {
	o := d.Closed(v, path,
		[]string{"id", "key", "subject", "status", "createdAt", "updatedAt"},
		[]string{"parentId", "owner", "endedAt", "blockedReason", "failureReason", "completionEvidence", "resumeTrust"})
	t := Task{
		ID:        decodeSafeTaskID(o, "id"),
		Key:       o.String("key", 1, TaskKeyMaxLen),
		Subject:   decodeTaskText(o, "subject", TaskSubjectMaxCodePoints),
		Status:    TaskStatus(o.Enum("status", taskStatuses...)),
		CreatedAt: decodeTaskTime(o, "createdAt"),
		UpdatedAt: decodeTaskTime(o, "updatedAt"),
	}
	if !d.Failed() && !IsTaskKey(t.Key) {
		d.Fail(path+".key", "not a task key")
	}
	if o.Has("parentId") {
		t.ParentID = decodeSafeTaskID(o, "parentId")
	}
	if o.Has("owner") {
		oo := o.Object("owner", []string{"actor"}, []string{"sessionId", "agentId", "runId", "turnId"})
		owner := TaskOwner{Actor: oo.Enum("actor", ActorMainAgent, ActorChildAgent)}
		for _, f := range []optionalString{{"sessionId", &owner.SessionID}, {"agentId", &owner.AgentID}, {"runId", &owner.RunID}, {"turnId", &owner.TurnID}} {
			if oo.Has(f.key) {
				*f.dst = decodeSafeTaskID(oo, f.key)
			}
		}
		t.Owner = &owner
	}
	if o.Has("endedAt") {
		at := decodeTaskTime(o, "endedAt")
		t.EndedAt = &at
	}
	for _, f := range []optionalString{{"blockedReason", &t.BlockedReason}, {"failureReason", &t.FailureReason}, {"completionEvidence", &t.CompletionEvidence}} {
		if o.Has(f.key) {
			*f.dst = decodeTaskText(o, f.key, TaskEvidenceMaxCodePoints)
		}
	}
	if o.Has("resumeTrust") {
		t.ResumeTrust = o.Enum("resumeTrust", resumeTrusts...)
	}
	if !d.Failed() && t.MissingEvidence() && (t.ResumeTrust == "" || t.ResumeTrust == ResumeTrusted) {
		d.Fail(path+".resumeTrust", "a %s task without its evidence must carry a resumeTrust other than trusted", t.Status)
	}
	return t
}
