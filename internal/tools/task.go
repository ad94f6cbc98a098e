package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/maka-agent/maka/internal/tasks"
	"github.com/maka-agent/maka/protocol"
)

// Names of the task tools.
const (
	NameTaskCreate = "task_create"
	NameTaskUpdate = "task_update"
	NameTaskList   = "task_list"
	NameTaskGet    = "task_get"
)

// NewTaskTools returns the task tools (task_create, task_update, task_list,
// task_get): the model keeps its session's task ledger in l, with the
// ledger's statuses, transitions and evidence rules. They touch nothing but
// the host's own ledger of the calling session (Env.SessionID), so they
// need no approval in any mode; permission rules still apply to them.
func NewTaskTools(l *tasks.Ledger) []Tool {
	return []Tool{
		taskTool{l: l, name: NameTaskCreate, run: taskCreate},
		taskTool{l: l, name: NameTaskUpdate, run: taskUpdate},
		taskTool{l: l, name: NameTaskList, run: taskList},
		taskTool{l: l, name: NameTaskGet, run: taskGet},
	}
}

type taskTool struct {
	l    *tasks.Ledger
	name string
	run  func(ctx context.Context, l *tasks.Ledger, env Env, raw json.RawMessage) (Result, error)
}

func (t taskTool) Name() string { return t.name }

// PermissionRequired is false: the engine still applies the rules, then
// allows (docs/security.md).
func (taskTool) PermissionRequired() bool { return false }
func (taskTool) ActivityKind() string     { return ActivityTool }

func (t taskTool) Description() string {
	switch t.name {
	case NameTaskCreate:
		return "Add a task to this session's task ledger, to plan and track multi-step work. " +
			"A new task is pending and gets a key (T1, T2, …; a child of T1 gets T1.1, …). " +
			"Open tasks are shown to you at the end of every request."
	case NameTaskUpdate:
		return "Change a task of this session's ledger, by id or key: its subject or its status. " +
			"Transitions: pending → in_progress | cancelled; in_progress → blocked | completed | failed | cancelled; " +
			"blocked → in_progress | failed | cancelled; failed → pending | cancelled; " +
			"completed → in_progress and cancelled → pending only with explicitReopen. " +
			"blocked needs blockedReason, failed needs failureReason, completed needs completionEvidence " +
			"(what shows the work is done: a test that passed, a command's output, a file written)."
	case NameTaskList:
		return "List the tasks of this session's ledger (completed, failed and cancelled ones included, " +
			"until they are archived a week after they ended)."
	default:
		return "Show one task of this session's ledger, by id or key."
	}
}

func (t taskTool) Parameters() json.RawMessage {
	ref := `"taskRef":{"type":"string","description":"The task's key (T1, T1.2, …) or id."}`
	switch t.name {
	case NameTaskCreate:
		return json.RawMessage(`{"type":"object","properties":{` +
			`"subject":{"type":"string","description":"What the task is, in one line (at most 200 characters)."},` +
			`"parentRef":{"type":"string","description":"Key or id of the parent task, for a subtask."}},` +
			`"required":["subject"],"additionalProperties":false}`)
	case NameTaskUpdate:
		return json.RawMessage(`{"type":"object","properties":{` + ref + `,` +
			`"status":{"type":"string","enum":["pending","in_progress","blocked","completed","failed","cancelled"]},` +
			`"subject":{"type":"string","description":"A new subject."},` +
			`"blockedReason":{"type":"string","description":"Why the task is blocked (required for blocked)."},` +
			`"failureReason":{"type":"string","description":"Why the task failed (required for failed)."},` +
			`"completionEvidence":{"type":"string","description":"What shows the task is done (required for completed)."},` +
			`"explicitReopen":{"type":"boolean","description":"Reopen a completed or cancelled task."}},` +
			`"required":["taskRef"],"additionalProperties":false}`)
	case NameTaskList:
		return json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)
	default:
		return json.RawMessage(`{"type":"object","properties":{` + ref + `},"required":["taskRef"],"additionalProperties":false}`)
	}
}

func (t taskTool) Run(ctx context.Context, env Env, raw json.RawMessage) (Result, error) {
	if t.l == nil {
		return ErrorResult("The task ledger is not available in this session"), nil
	}
	if !protocol.IsEntityID(env.SessionID) {
		return ErrorResult("The task ledger is not available: the call has no session"), nil
	}
	return t.run(ctx, t.l, env, raw)
}

// meta records the call that made a change.
func meta(env Env) tasks.Meta {
	return tasks.Meta{Source: tasks.SourceTool, Actor: protocol.ActorMainAgent,
		RunID: env.RunID, TurnID: env.TurnID, ToolCallID: env.ToolUseID}
}

type taskCreateArgs struct {
	Subject   *string `json:"subject"`
	ParentRef string  `json:"parentRef"`
}

func taskCreate(ctx context.Context, l *tasks.Ledger, env Env, raw json.RawMessage) (Result, error) {
	var a taskCreateArgs
	if err := decodeArgs(raw, &a); err != nil {
		return invalidArgs(NameTaskCreate, err), nil
	}
	if err := requireString("subject", a.Subject); err != nil {
		return invalidArgs(NameTaskCreate, err), nil
	}
	task, err := l.Create(ctx, env.SessionID, tasks.Draft{Subject: *a.Subject, ParentRef: a.ParentRef, Meta: meta(env)})
	if err != nil {
		return ledgerError(NameTaskCreate, err)
	}
	return taskResult("Created "+describe(task), task), nil
}

type taskUpdateArgs struct {
	TaskRef            *string `json:"taskRef"`
	Status             string  `json:"status"`
	Subject            string  `json:"subject"`
	BlockedReason      string  `json:"blockedReason"`
	FailureReason      string  `json:"failureReason"`
	CompletionEvidence string  `json:"completionEvidence"`
	ExplicitReopen     bool    `json:"explicitReopen"`
}

func taskUpdate(ctx context.Context, l *tasks.Ledger, env Env, raw json.RawMessage) (Result, error) {
	var a taskUpdateArgs
	if err := decodeArgs(raw, &a); err != nil {
		return invalidArgs(NameTaskUpdate, err), nil
	}
	if err := requireString("taskRef", a.TaskRef); err != nil {
		return invalidArgs(NameTaskUpdate, err), nil
	}
	task, err := l.Update(ctx, env.SessionID, *a.TaskRef, tasks.Change{
		Subject: a.Subject, Status: protocol.TaskStatus(a.Status),
		BlockedReason: a.BlockedReason, FailureReason: a.FailureReason, CompletionEvidence: a.CompletionEvidence,
		ExplicitReopen: a.ExplicitReopen, Meta: meta(env),
	})
	if err != nil {
		return ledgerError(NameTaskUpdate, err)
	}
	return taskResult("Updated "+describe(task), task), nil
}

func taskList(ctx context.Context, l *tasks.Ledger, env Env, raw json.RawMessage) (Result, error) {
	var a struct{}
	if err := decodeArgs(raw, &a); err != nil {
		return invalidArgs(NameTaskList, err), nil
	}
	list, _, err := l.List(ctx, env.SessionID)
	if err != nil {
		return Result{}, fmt.Errorf("the task ledger could not be read: %w", err)
	}
	// The tasks shown are those whose lines fit maxTaskListBytes; the
	// result holds the same ones.
	var b strings.Builder
	shown := list[:0:0]
	for _, t := range list {
		line := describe(t)
		if b.Len()+len(line)+1 > maxTaskListBytes {
			break
		}
		b.WriteString("\n" + line)
		shown = append(shown, t)
	}
	text := fmt.Sprintf("%d tasks:", len(list)) + b.String()
	switch omitted := len(list) - len(shown); {
	case len(list) == 0:
		text = "The task ledger is empty."
	case omitted > 0:
		text += fmt.Sprintf("\n… %d more tasks not shown (task_get shows one by key)", omitted)
	}
	res := JSONResult(struct {
		Tasks   []protocol.Task `json:"tasks"`
		Omitted int             `json:"omitted,omitempty"`
	}{shown, len(list) - len(shown)})
	if !res.IsError {
		res.ModelText = text
	}
	return res, nil
}

// maxTaskListBytes bounds what task_list shows (200 tasks with their
// longest subjects and evidence would be far more).
const maxTaskListBytes = 32 * 1024

type taskGetArgs struct {
	TaskRef *string `json:"taskRef"`
}

func taskGet(ctx context.Context, l *tasks.Ledger, env Env, raw json.RawMessage) (Result, error) {
	var a taskGetArgs
	if err := decodeArgs(raw, &a); err != nil {
		return invalidArgs(NameTaskGet, err), nil
	}
	if err := requireString("taskRef", a.TaskRef); err != nil {
		return invalidArgs(NameTaskGet, err), nil
	}
	task, _, err := l.Get(ctx, env.SessionID, *a.TaskRef)
	if err != nil {
		return Result{}, fmt.Errorf("the task ledger could not be read: %w", err)
	}
	if task == nil {
		return ErrorResult(fmt.Sprintf("%s: no task %q in this session's ledger", NameTaskGet, *a.TaskRef)), nil
	}
	return taskResult(describe(*task), *task), nil
}

// taskResult is a result holding one task; the model reads text.
func taskResult(text string, task protocol.Task) Result {
	res := JSONResult(struct {
		Task protocol.Task `json:"task"`
	}{task})
	if !res.IsError {
		res.ModelText = text
	}
	return res
}

// describe is one task as the model reads it.
func describe(t protocol.Task) string {
	s := fmt.Sprintf("%s [%s] %s (id %s)", t.Key, t.Status, t.Subject, t.ID)
	if t.ParentID != "" {
		s += ", parent " + t.ParentID
	}
	for _, f := range []struct{ label, v string }{
		{"blocked", t.BlockedReason}, {"failed", t.FailureReason}, {"evidence", t.CompletionEvidence},
	} {
		if f.v != "" {
			s += "; " + f.label + ": " + f.v
		}
	}
	return s
}

// ledgerError is the result of a refused change: the ledger's rule, in
// words the model can act on, as an error result. Storage failures are Go
// errors (the call could not be settled).
func ledgerError(tool string, err error) (Result, error) {
	for _, rule := range []error{
		tasks.ErrInvalidRef, tasks.ErrNotFound, tasks.ErrParentNotFound, tasks.ErrInvalidText,
		tasks.ErrInvalidStatus, tasks.ErrEmptyChange, tasks.ErrInvalidTransition, tasks.ErrMissingEvidence,
		tasks.ErrLimitExceeded, tasks.ErrKeyExhausted,
	} {
		if errors.Is(err, rule) {
			return ErrorResult(tool + " refused: " + strings.TrimPrefix(err.Error(), "tasks: ")), nil
		}
	}
	return Result{}, fmt.Errorf("the task ledger could not be written: %w", err)
}
