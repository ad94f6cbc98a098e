// Package tasks is the task ledger of the Runtime Host: a per-Session list of
// tasks that the agent's task tools write and clients read with
// task.ledger.query.
//
// # Storage
//
// The ledger lives in the host's store (Migration, schema version 3). The
// table task_events is the append-only truth: one row per change, carrying
// the task's full snapshot. The table tasks is the projection: one row per
// task holding its current document. Every change is one store.Write that
// reads the current state, validates the change, appends the event and
// updates the projection row, so both are committed together or not at all,
// and concurrent changes are linearised by the store's single writer.
//
// # Rules
//
// Statuses and transitions (a status may always be kept, e.g. to edit the
// subject):
//
//	pending     → in_progress | cancelled
//	in_progress → blocked | completed | failed | cancelled
//	blocked     → in_progress | cancelled | failed
//	failed      → pending | cancelled
//	completed   → in_progress  (explicit reopen only)
//	cancelled   → pending      (explicit reopen only)
//
// A blocked task needs a blockedReason, a failed one a failureReason and a
// completed one a completionEvidence; a field that does not belong to the
// task's status is dropped. Root tasks get the keys T1, T2, …; the children
// of a task with key K get K.1, K.2, …. A Session holds at most
// MaxTasksPerSession tasks; terminal and archived tasks count, so finishing
// a task does not free room. Subjects, reasons and evidence are canonical
// (see CanonicalSubject).
//
// # Archival
//
// A task that has been completed, failed or cancelled for longer than
// Options.ArchiveAfter (seven days by default) is archived: it is no longer
// listed, but it keeps its key, still counts towards the limit and can still
// be updated (reopening it brings it back). The tasks.archived column
// materialises this; every write of a Session refreshes it for that Session,
// and reads apply the same age rule, so the result never depends on whether
// a write happened.
package tasks

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// MaxTasksPerSession bounds the number of tasks of one Session, whatever
// their status.
const MaxTasksPerSession = 200

// DefaultArchiveAfter is the default Options.ArchiveAfter.
const DefaultArchiveAfter = 7 * 24 * time.Hour

// SchemaVersion is the store schema version of Migration.
const SchemaVersion = 3

// Migration creates the ledger's tables. It needs no table of another
// migration.
var Migration = store.Migration{Version: SchemaVersion, Up: migrate}

func migrate(tx *sql.Tx) error {
	for _, q := range []string{
		`CREATE TABLE tasks (
			session_id TEXT NOT NULL,
			task_id    TEXT NOT NULL,
			key        TEXT NOT NULL,
			ordinal    INTEGER NOT NULL,
			document   TEXT NOT NULL,
			created_at INTEGER NOT NULL,
			updated_at INTEGER NOT NULL,
			ended_at   INTEGER NULL,
			archived   INTEGER NOT NULL DEFAULT 0,
			PRIMARY KEY (session_id, task_id),
			UNIQUE (session_id, key),
			UNIQUE (session_id, ordinal)
		)`,
		`CREATE TABLE task_events (
			session_id      TEXT NOT NULL,
			event_id        TEXT NOT NULL UNIQUE,
			seq             INTEGER NOT NULL,
			type            TEXT NOT NULL,
			ts              INTEGER NOT NULL,
			task_id         TEXT NOT NULL,
			previous_status TEXT NULL,
			next_status     TEXT NOT NULL,
			payload         TEXT NOT NULL,
			PRIMARY KEY (session_id, seq)
		)`,
		`CREATE INDEX task_events_by_task ON task_events (session_id, task_id)`,
		`CREATE TRIGGER task_events_no_update BEFORE UPDATE ON task_events
			BEGIN SELECT RAISE(ABORT, 'task_events is append-only'); END`,
		`CREATE TRIGGER task_events_no_delete BEFORE DELETE ON task_events
			BEGIN SELECT RAISE(ABORT, 'task_events is append-only'); END`,
	} {
		if _, err := tx.Exec(q); err != nil {
			return err
		}
	}
	return nil
}

// Options configures New. The zero value is valid.
type Options struct {
	// Lane, when set, serialises task.ledger.query in the Session's lane
	// like the other domain operations. The write API never enters the
	// lane: its atomicity comes from the store transaction, and the agent's
	// tools call it from inside Turns that other lane ops may wait for.
	Lane *lane.Gate
	// Logger receives store failures of task.ledger.query (discarded when
	// nil).
	Logger *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// ArchiveAfter is how long a terminal task stays listed
	// (DefaultArchiveAfter when zero).
	ArchiveAfter time.Duration
}

// Ledger is the task ledger of every Session of one store. It keeps no state
// of its own and is safe for concurrent use.
type Ledger struct {
	st           *store.Store
	gate         *lane.Gate
	log          *slog.Logger
	now          func() time.Time
	archiveAfter time.Duration
}

// New returns the ledger kept in st, which must have been opened with
// Migration.
func New(st *store.Store, opts Options) *Ledger {
	l := &Ledger{st: st, gate: opts.Lane, log: opts.Logger, now: opts.Now, archiveAfter: opts.ArchiveAfter}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.archiveAfter <= 0 {
		l.archiveAfter = DefaultArchiveAfter
	}
	return l
}

// Event sources and actors recorded in Meta.
const (
	SourceTool     = "tool"
	SourceSystem   = "system"
	SourceRecovery = "recovery"
	SourceImport   = "import"

	ActorUser   = "user"
	ActorSystem = "system"
)

// Meta describes who made a change; it is recorded in the task event only.
// Every field is optional.
type Meta struct {
	Source     string // SourceTool, SourceSystem, SourceRecovery or SourceImport
	Actor      string // protocol.ActorMainAgent, protocol.ActorChildAgent, ActorUser or ActorSystem
	RunID      string
	TurnID     string
	ToolCallID string
	// Reason is a free-text reason, canonicalised like a blocked reason.
	Reason string
}

// Draft is a task to create.
type Draft struct {
	Subject string
	// ParentRef is the id or key of the parent task; empty for a root task.
	ParentRef string
	Owner     *protocol.TaskOwner
	Meta      Meta
}

// Change is an update of a task; zero fields are left unchanged.
type Change struct {
	Subject string
	Status  protocol.TaskStatus
	// BlockedReason, FailureReason and CompletionEvidence set the evidence
	// of the resulting status; evidence of another status is dropped.
	BlockedReason      string
	FailureReason      string
	CompletionEvidence string
	// ExplicitReopen allows completed → in_progress and cancelled → pending.
	ExplicitReopen bool
	// Owner replaces the owner (a task moved back to pending loses its
	// owner).
	Owner *protocol.TaskOwner
	Meta  Meta
}

func (c Change) empty() bool {
	return c.Subject == "" && c.Status == "" && c.BlockedReason == "" && c.FailureReason == "" &&
		c.CompletionEvidence == "" && c.Owner == nil
}

// Task event types.
const (
	EventCreated   = "task_created"
	EventUpdated   = "task_updated"
	EventStarted   = "task_started"
	EventBlocked   = "task_blocked"
	EventCompleted = "task_completed"
	EventFailed    = "task_failed"
	EventCancelled = "task_cancelled"
	EventReopened  = "task_reopened"
)

// Event is one row of the append-only task event log; its JSON form is the
// stored payload.
type Event struct {
	Seq            int64               `json:"-"`
	EventID        string              `json:"eventId"`
	Type           string              `json:"type"`
	TS             int64               `json:"ts"`
	SessionID      string              `json:"sessionId"`
	TaskID         string              `json:"taskId"`
	PreviousStatus protocol.TaskStatus `json:"previousStatus,omitempty"`
	NextStatus     protocol.TaskStatus `json:"nextStatus"`
	Task           protocol.Task       `json:"task"`
	Reason         string              `json:"reason,omitempty"`
	Evidence       string              `json:"evidence,omitempty"`
	Refs           *EventRefs          `json:"refs,omitempty"`
	Source         string              `json:"source,omitempty"`
	Actor          string              `json:"actor,omitempty"`
}

// EventRefs are the run, turn and tool call that made a change.
type EventRefs struct {
	RunID      string `json:"runId,omitempty"`
	TurnID     string `json:"turnId,omitempty"`
	ToolCallID string `json:"toolCallId,omitempty"`
}

// CanTransition reports whether a task may move from one status to another.
// Keeping the status is always allowed.
func CanTransition(from, to protocol.TaskStatus, explicitReopen bool) bool {
	if from == to {
		return validStatus(from)
	}
	switch from {
	case protocol.TaskPending:
		return to == protocol.TaskInProgress || to == protocol.TaskCancelled
	case protocol.TaskInProgress:
		return to == protocol.TaskBlocked || to == protocol.TaskCompleted || to == protocol.TaskFailed || to == protocol.TaskCancelled
	case protocol.TaskBlocked:
		return to == protocol.TaskInProgress || to == protocol.TaskCancelled || to == protocol.TaskFailed
	case protocol.TaskFailed:
		return to == protocol.TaskPending || to == protocol.TaskCancelled
	case protocol.TaskCompleted:
		return explicitReopen && to == protocol.TaskInProgress
	case protocol.TaskCancelled:
		return explicitReopen && to == protocol.TaskPending
	}
	return false
}

func validStatus(s protocol.TaskStatus) bool {
	switch s {
	case protocol.TaskPending, protocol.TaskInProgress, protocol.TaskBlocked,
		protocol.TaskCompleted, protocol.TaskFailed, protocol.TaskCancelled:
		return true
	}
	return false
}

func terminal(s protocol.TaskStatus) bool {
	return s == protocol.TaskCompleted || s == protocol.TaskFailed || s == protocol.TaskCancelled
}

// Create adds a pending task to the Session's ledger and returns it once it
// is durable.
func (l *Ledger) Create(ctx context.Context, sessionID string, d Draft) (protocol.Task, error) {
	if !protocol.IsEntityID(sessionID) {
		return protocol.Task{}, ErrInvalidSession
	}
	subject, err := CanonicalSubject(d.Subject)
	if err != nil {
		return protocol.Task{}, err
	}
	if d.ParentRef != "" && !validRef(d.ParentRef) {
		return protocol.Task{}, fmt.Errorf("%w: parent %q", ErrInvalidRef, d.ParentRef)
	}
	owner, err := checkOwner(d.Owner)
	if err != nil {
		return protocol.Task{}, err
	}
	meta, err := checkMeta(d.Meta)
	if err != nil {
		return protocol.Task{}, err
	}
	id, err := newID()
	if err != nil {
		return protocol.Task{}, err
	}
	eventID, err := newID()
	if err != nil {
		return protocol.Task{}, err
	}

	var created protocol.Task
	err = l.st.Write(ctx, func(tx *store.Tx) error {
		keys, maxOrdinal, err := sessionKeys(tx, sessionID)
		if err != nil {
			return err
		}
		if len(keys) >= MaxTasksPerSession {
			return &LimitError{Limit: MaxTasksPerSession, Count: len(keys)}
		}
		parentID, prefix := "", "T"
		if d.ParentRef != "" {
			parent, found, err := findTask(tx, sessionID, d.ParentRef)
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("%w: %s", ErrParentNotFound, d.ParentRef)
			}
			parentID, prefix = parent.ID, parent.Key+"."
		}
		key := nextKey(keys, prefix)
		if !protocol.IsTaskKey(key) {
			return fmt.Errorf("%w: under %s", ErrKeyExhausted, strings.TrimSuffix(prefix, "."))
		}
		now := l.now().UnixMilli()
		task := protocol.Task{
			ID: id, Key: key, Subject: subject, Status: protocol.TaskPending,
			CreatedAt: protocol.TaskTime(now), UpdatedAt: protocol.TaskTime(now),
			ParentID: parentID, Owner: owner,
		}
		doc, err := json.Marshal(task)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO tasks (session_id, task_id, key, ordinal, document, created_at, updated_at, ended_at, archived)
			VALUES (?, ?, ?, ?, ?, ?, ?, NULL, 0)`, sessionID, id, key, maxOrdinal+1, string(doc), now, now); err != nil {
			return err
		}
		if err := l.archive(tx, sessionID, now); err != nil {
			return err
		}
		if err := appendEvent(tx, eventID, EventCreated, now, sessionID, "", task, meta); err != nil {
			return err
		}
		created = task
		return nil
	})
	if err != nil {
		return protocol.Task{}, err
	}
	return created, nil
}

// Update changes the task whose id or key is taskRef and returns the task
// once the change is durable.
func (l *Ledger) Update(ctx context.Context, sessionID, taskRef string, c Change) (protocol.Task, error) {
	if !protocol.IsEntityID(sessionID) {
		return protocol.Task{}, ErrInvalidSession
	}
	if !validRef(taskRef) {
		return protocol.Task{}, fmt.Errorf("%w: %q", ErrInvalidRef, taskRef)
	}
	if c.empty() {
		return protocol.Task{}, ErrEmptyChange
	}
	if c.Status != "" && !validStatus(c.Status) {
		return protocol.Task{}, fmt.Errorf("%w: %q", ErrInvalidStatus, c.Status)
	}
	var err error
	if c.Subject != "" {
		if c.Subject, err = CanonicalSubject(c.Subject); err != nil {
			return protocol.Task{}, err
		}
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{FieldBlockedReason, &c.BlockedReason}, {FieldFailureReason, &c.FailureReason}, {FieldCompletionEvidence, &c.CompletionEvidence}} {
		if *f.v != "" {
			if *f.v, err = CanonicalReason(f.name, *f.v); err != nil {
				return protocol.Task{}, err
			}
		}
	}
	if c.Owner, err = checkOwner(c.Owner); err != nil {
		return protocol.Task{}, err
	}
	meta, err := checkMeta(c.Meta)
	if err != nil {
		return protocol.Task{}, err
	}
	eventID, err := newID()
	if err != nil {
		return protocol.Task{}, err
	}

	var updated protocol.Task
	err = l.st.Write(ctx, func(tx *store.Tx) error {
		cur, found, err := findTask(tx, sessionID, taskRef)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("%w: %s", ErrNotFound, taskRef)
		}
		now := l.now().UnixMilli()
		next, eventType, err := applyChange(cur, c, now)
		if err != nil {
			return err
		}
		doc, err := json.Marshal(next)
		if err != nil {
			return err
		}
		var endedAt any
		if next.EndedAt != nil {
			endedAt = int64(*next.EndedAt)
		}
		if _, err := tx.Exec(`UPDATE tasks SET document = ?, updated_at = ?, ended_at = ?, archived = 0
			WHERE session_id = ? AND task_id = ?`, string(doc), now, endedAt, sessionID, cur.ID); err != nil {
			return err
		}
		if err := l.archive(tx, sessionID, now); err != nil {
			return err
		}
		if err := appendEvent(tx, eventID, eventType, now, sessionID, cur.Status, next, meta); err != nil {
			return err
		}
		updated = next
		return nil
	})
	if err != nil {
		return protocol.Task{}, err
	}
	return updated, nil
}

// applyChange computes the task that results from c (already canonical)
// and the type of its event, or the rule that refuses it.
func applyChange(cur protocol.Task, c Change, now int64) (protocol.Task, string, error) {
	next := cur
	next.Owner = cloneOwner(cur.Owner)
	next.EndedAt = cloneTime(cur.EndedAt)
	to := cur.Status
	if c.Status != "" {
		to = c.Status
	}
	if !CanTransition(cur.Status, to, c.ExplicitReopen) {
		return protocol.Task{}, "", &TransitionError{TaskID: cur.ID, Key: cur.Key, From: cur.Status, To: to, ExplicitReopen: c.ExplicitReopen}
	}
	next.Status = to
	if c.Subject != "" {
		next.Subject = c.Subject
	}
	if c.BlockedReason != "" {
		next.BlockedReason = c.BlockedReason
	}
	if c.FailureReason != "" {
		next.FailureReason = c.FailureReason
	}
	if c.CompletionEvidence != "" {
		next.CompletionEvidence = c.CompletionEvidence
	}
	if c.Owner != nil {
		next.Owner = cloneOwner(c.Owner)
	}
	next.UpdatedAt = protocol.TaskTime(now)
	switch {
	case to != cur.Status && terminal(to):
		at := protocol.TaskTime(now)
		next.EndedAt = &at
	case to == protocol.TaskPending || to == protocol.TaskInProgress:
		next.EndedAt = nil
	}
	if to == protocol.TaskPending {
		next.Owner = nil
	}
	// Evidence belongs to its status only.
	if to != protocol.TaskBlocked {
		next.BlockedReason = ""
	}
	if to != protocol.TaskFailed {
		next.FailureReason = ""
	}
	if to != protocol.TaskCompleted {
		next.CompletionEvidence = ""
	}
	// A stored classification describes the state it was made for.
	next.ResumeTrust = ""
	if next.MissingEvidence() {
		return protocol.Task{}, "", &EvidenceError{Status: to, Field: evidenceField(to)}
	}
	return next, updateEventType(cur.Status, to), nil
}

func evidenceField(s protocol.TaskStatus) string {
	switch s {
	case protocol.TaskBlocked:
		return FieldBlockedReason
	case protocol.TaskFailed:
		return FieldFailureReason
	default:
		return FieldCompletionEvidence
	}
}

func updateEventType(from, to protocol.TaskStatus) string {
	switch {
	case from == to:
		return EventUpdated
	case from == protocol.TaskCompleted && to == protocol.TaskInProgress,
		from == protocol.TaskCancelled && to == protocol.TaskPending,
		from == protocol.TaskFailed && to == protocol.TaskPending:
		return EventReopened
	}
	switch to {
	case protocol.TaskInProgress:
		return EventStarted
	case protocol.TaskBlocked:
		return EventBlocked
	case protocol.TaskCompleted:
		return EventCompleted
	case protocol.TaskFailed:
		return EventFailed
	case protocol.TaskCancelled:
		return EventCancelled
	}
	return EventUpdated
}

// archive marks the Session's tasks that ended before the archival horizon.
func (l *Ledger) archive(tx *store.Tx, sessionID string, now int64) error {
	_, err := tx.Exec(`UPDATE tasks SET archived = 1
		WHERE session_id = ? AND archived = 0 AND ended_at IS NOT NULL AND ended_at <= ?`,
		sessionID, now-l.archiveAfter.Milliseconds())
	return err
}

// archived reports whether a task is archived at now (Unix ms).
func (l *Ledger) archived(t protocol.Task, now int64) bool {
	return terminal(t.Status) && t.EndedAt != nil && float64(*t.EndedAt) <= float64(now-l.archiveAfter.Milliseconds())
}

func appendEvent(tx *store.Tx, eventID, typ string, now int64, sessionID string, prev protocol.TaskStatus, task protocol.Task, meta Meta) error {
	ev := Event{
		EventID: "task-event-" + eventID, Type: typ, TS: now, SessionID: sessionID, TaskID: task.ID,
		PreviousStatus: prev, NextStatus: task.Status, Task: task,
		Reason: meta.Reason, Evidence: task.CompletionEvidence, Source: meta.Source, Actor: meta.Actor,
	}
	if ev.Reason == "" {
		ev.Reason = task.BlockedReason + task.FailureReason // at most one is set
	}
	if meta.RunID != "" || meta.TurnID != "" || meta.ToolCallID != "" {
		ev.Refs = &EventRefs{RunID: meta.RunID, TurnID: meta.TurnID, ToolCallID: meta.ToolCallID}
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	var seq int64
	if err := tx.QueryRow(`SELECT COALESCE(MAX(seq), 0) + 1 FROM task_events WHERE session_id = ?`, sessionID).Scan(&seq); err != nil {
		return err
	}
	var previous any
	if prev != "" {
		previous = string(prev)
	}
	_, err = tx.Exec(`INSERT INTO task_events (session_id, event_id, seq, type, ts, task_id, previous_status, next_status, payload)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sessionID, ev.EventID, seq, typ, now, task.ID, previous, string(task.Status), string(payload))
	return err
}

// Events returns the Session's task events in order.
func (l *Ledger) Events(ctx context.Context, sessionID string) ([]Event, error) {
	var out []Event
	err := l.st.Read(ctx, func(q store.Querier) error {
		rows, err := q.Query(`SELECT seq, payload FROM task_events WHERE session_id = ? ORDER BY seq`, sessionID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var seq int64
			var payload string
			if err := rows.Scan(&seq, &payload); err != nil {
				return err
			}
			var ev Event
			if err := json.Unmarshal([]byte(payload), &ev); err != nil {
				return fmt.Errorf("tasks: corrupt task event %d of session %s: %w", seq, sessionID, err)
			}
			ev.Seq = seq
			out = append(out, ev)
		}
		return rows.Err()
	})
	return out, err
}

// sessionKeys returns the keys of all the Session's tasks and the highest
// ordinal.
func sessionKeys(q store.Querier, sessionID string) ([]string, int64, error) {
	rows, err := q.Query(`SELECT key, ordinal FROM tasks WHERE session_id = ?`, sessionID)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var keys []string
	var maxOrdinal int64
	for rows.Next() {
		var key string
		var ordinal int64
		if err := rows.Scan(&key, &ordinal); err != nil {
			return nil, 0, err
		}
		keys = append(keys, key)
		maxOrdinal = max(maxOrdinal, ordinal)
	}
	return keys, maxOrdinal, rows.Err()
}

// nextKey returns prefix followed by the smallest positive number that no
// key of the form prefix+N uses.
func nextKey(keys []string, prefix string) string {
	used := make(map[int]bool, len(keys))
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok || rest == "" || strings.Contains(rest, ".") {
			continue
		}
		if n, err := strconv.Atoi(rest); err == nil {
			used[n] = true
		}
	}
	n := 1
	for used[n] {
		n++
	}
	return prefix + strconv.Itoa(n)
}

// findTask returns the first task of the Session (in list order, archived
// included) whose id or key is ref.
func findTask(q store.Querier, sessionID, ref string) (protocol.Task, bool, error) {
	var doc string
	err := q.QueryRow(`SELECT document FROM tasks WHERE session_id = ? AND (task_id = ? OR key = ?)
		ORDER BY ordinal LIMIT 1`, sessionID, ref, ref).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return protocol.Task{}, false, nil
	}
	if err != nil {
		return protocol.Task{}, false, err
	}
	t, err := decodeDocument(doc)
	if err != nil {
		return protocol.Task{}, false, fmt.Errorf("tasks: session %s: %w", sessionID, err)
	}
	return t, true, nil
}

// decodeDocument decodes and checks a stored task document.
func decodeDocument(doc string) (protocol.Task, error) {
	var t protocol.Task
	if err := json.Unmarshal([]byte(doc), &t); err != nil {
		return protocol.Task{}, fmt.Errorf("corrupt task document: %w", err)
	}
	bad := func(what string) (protocol.Task, error) {
		return protocol.Task{}, fmt.Errorf("corrupt task document %q: %s", t.ID, what)
	}
	switch {
	case !protocol.IsSafeTaskID(t.ID):
		return bad("unsafe id")
	case !protocol.IsTaskKey(t.Key):
		return bad("invalid key")
	case !validStatus(t.Status):
		return bad("invalid status")
	case t.ParentID != "" && !protocol.IsSafeTaskID(t.ParentID):
		return bad("unsafe parent id")
	case !finite(t.CreatedAt) || !finite(t.UpdatedAt) || t.EndedAt != nil && !finite(*t.EndedAt):
		return bad("invalid time")
	case t.ResumeTrust != "" && !validTrust(t.ResumeTrust):
		return bad("invalid resume trust")
	}
	if _, err := checkOwner(t.Owner); err != nil {
		return bad("invalid owner")
	}
	return t, nil
}

func finite(t protocol.TaskTime) bool {
	return !math.IsNaN(float64(t)) && !math.IsInf(float64(t), 0)
}

func validTrust(s string) bool {
	switch s {
	case protocol.ResumeTrusted, protocol.ResumeNeedsRevalidation, protocol.ResumeStale,
		protocol.ResumeRepaired, protocol.ResumeUntrusted:
		return true
	}
	return false
}

func validRef(ref string) bool { return protocol.IsSafeTaskID(ref) || protocol.IsTaskKey(ref) }

// checkOwner validates an owner and returns a copy of it.
func checkOwner(o *protocol.TaskOwner) (*protocol.TaskOwner, error) {
	if o == nil {
		return nil, nil
	}
	if o.Actor != protocol.ActorMainAgent && o.Actor != protocol.ActorChildAgent {
		return nil, fmt.Errorf("%w: actor %q", ErrInvalidOwner, o.Actor)
	}
	for _, id := range []string{o.SessionID, o.AgentID, o.RunID, o.TurnID} {
		if id != "" && !protocol.IsSafeTaskID(id) {
			return nil, fmt.Errorf("%w: id %q is not a safe task id", ErrInvalidOwner, id)
		}
	}
	return cloneOwner(o), nil
}

func checkMeta(m Meta) (Meta, error) {
	switch m.Source {
	case "", SourceTool, SourceSystem, SourceRecovery, SourceImport:
	default:
		return Meta{}, fmt.Errorf("%w: source %q", ErrInvalidMeta, m.Source)
	}
	switch m.Actor {
	case "", protocol.ActorMainAgent, protocol.ActorChildAgent, ActorUser, ActorSystem:
	default:
		return Meta{}, fmt.Errorf("%w: actor %q", ErrInvalidMeta, m.Actor)
	}
	for _, s := range []*string{&m.RunID, &m.TurnID, &m.ToolCallID} {
		*s = strings.ToValidUTF8(*s, "\uFFFD")
	}
	if m.Reason != "" {
		var err error
		if m.Reason, err = CanonicalReason(FieldEventReason, m.Reason); err != nil {
			return Meta{}, err
		}
	}
	return m, nil
}

func cloneOwner(o *protocol.TaskOwner) *protocol.TaskOwner {
	if o == nil {
		return nil
	}
	c := *o
	return &c
}

func cloneTime(t *protocol.TaskTime) *protocol.TaskTime {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

// newID returns a random UUID (version 4) string.
func newID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("tasks: generate id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32], nil
}
