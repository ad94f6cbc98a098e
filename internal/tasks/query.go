package tasks

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/wireredact"
	"github.com/maka-agent/maka/protocol"
)

// MessageInvalidCursor is the message of task.ledger.query's invalid_request.
const MessageInvalidCursor = "Task ledger cursor is invalid"

// List returns the Session's projected task list, the one task.ledger.query
// pages through, and its revision. An unknown Session has an empty list.
//
// The projection lists tasks in creation order, leaves out archived tasks,
// and turns each stored task into its wire form: subject, reasons and
// evidence canonical (a subject left blank becomes wireredact.Marker,
// a blank reason is omitted), and resumeTrust classified: a stored
// classification is kept, otherwise an in_progress task (the host may have
// been restarted under it) is stale, a task missing its required evidence
// needs_revalidation, and any other task trusted. A task that misses its
// evidence is never reported trusted.
func (l *Ledger) List(ctx context.Context, sessionID string) ([]protocol.Task, string, error) {
	tasks, err := l.load(ctx, sessionID)
	if err != nil {
		return nil, "", err
	}
	return tasks, protocol.TaskLedgerRevision(tasks), nil
}

// Get returns the first listed task whose id or key is ref (nil when none)
// and the list's revision.
func (l *Ledger) Get(ctx context.Context, sessionID, ref string) (*protocol.Task, string, error) {
	tasks, revision, err := l.List(ctx, sessionID)
	if err != nil {
		return nil, "", err
	}
	return findRef(tasks, ref), revision, nil
}

func findRef(tasks []protocol.Task, ref string) *protocol.Task {
	for i := range tasks {
		if tasks[i].ID == ref || tasks[i].Key == ref {
			return &tasks[i]
		}
	}
	return nil
}

// load reads one snapshot of the Session's listed tasks and projects them.
func (l *Ledger) load(ctx context.Context, sessionID string) ([]protocol.Task, error) {
	now := l.now().UnixMilli()
	tasks := []protocol.Task{}
	err := l.st.Read(ctx, func(q store.Querier) error {
		rows, err := q.Query(`SELECT document FROM tasks WHERE session_id = ? AND archived = 0 ORDER BY ordinal`, sessionID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var doc string
			if err := rows.Scan(&doc); err != nil {
				return err
			}
			t, err := decodeDocument(doc)
			if err != nil {
				return fmt.Errorf("tasks: session %s: %w", sessionID, err)
			}
			if !l.archived(t, now) {
				tasks = append(tasks, project(t))
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return tasks, nil
}

// project returns the wire form of a stored task.
func project(t protocol.Task) protocol.Task {
	p := t
	p.Owner = cloneOwner(t.Owner)
	p.EndedAt = cloneTime(t.EndedAt)
	if p.ResumeTrust == "" {
		switch {
		case t.Status == protocol.TaskInProgress:
			p.ResumeTrust = protocol.ResumeStale
		case t.MissingEvidence():
			p.ResumeTrust = protocol.ResumeNeedsRevalidation
		default:
			p.ResumeTrust = protocol.ResumeTrusted
		}
	}
	if p.Subject = projectText(t.Subject, protocol.TaskSubjectMaxCodePoints); p.Subject == "" {
		p.Subject = wireredact.Marker
	}
	p.BlockedReason = projectText(t.BlockedReason, protocol.TaskEvidenceMaxCodePoints)
	p.FailureReason = projectText(t.FailureReason, protocol.TaskEvidenceMaxCodePoints)
	p.CompletionEvidence = projectText(t.CompletionEvidence, protocol.TaskEvidenceMaxCodePoints)
	if p.MissingEvidence() && p.ResumeTrust == protocol.ResumeTrusted {
		p.ResumeTrust = protocol.ResumeNeedsRevalidation
	}
	return p
}

// Handlers returns the handler of task.ledger.query.
func (l *Ledger) Handlers() host.Handlers {
	return host.Handlers{protocol.OpTaskLedgerQuery: l.serveQuery}
}

// serveQuery serves task.ledger.query. Failures to read
// the ledger are logged and answered with internal_failure, the only
// failure code the operation declares for them.
func (l *Ledger) serveQuery(ctx context.Context, call *host.Call) host.Outcome {
	var in protocol.TaskLedgerQueryInput
	switch x := call.Input.(type) {
	case protocol.TaskLedgerQueryInput:
		in = x
	case *protocol.TaskLedgerQueryInput:
		if x == nil {
			return host.Fail(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
		}
		in = *x
	default:
		l.log.Error("task ledger query with an unexpected input", "type", fmt.Sprintf("%T", call.Input))
		return host.Fail(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
	}
	var out host.Outcome
	var err error
	if l.gate != nil {
		err = l.gate.Run(ctx, in.SessionID, func(ctx context.Context, _ *lane.Lease) error {
			var qerr error
			out, qerr = l.Query(ctx, in)
			return qerr
		})
	} else {
		out, err = l.Query(ctx, in)
	}
	if err != nil {
		l.log.Error("task ledger query failed", "session", in.SessionID, "kind", in.Kind, "err", err)
		return host.Fail(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
	}
	return out
}

// Query answers one task.ledger.query input outside the lane. The outcome
// is a result or invalid_request; err reports a failure to read the ledger.
//
//   - get: {kind:"task"} with the first listed task whose id or key is
//     taskRef, or null.
//   - list_continue with a revision other than the current one:
//     {kind:"revision_changed", expected, actual}.
//   - list_start (offset 0) and list_continue (offset = cursor, a decimal
//     number without leading zeros, below the number of tasks): a page
//     filled greedily from the offset with at most
//     protocol.TaskLedgerPageMaxItems tasks and at most
//     protocol.TaskLedgerPageMaxBytes bytes encoded, whose nextCursor is the
//     offset after it, or null at the end. An empty ledger yields one empty
//     page.
func (l *Ledger) Query(ctx context.Context, in protocol.TaskLedgerQueryInput) (host.Outcome, error) {
	tasks, revision, err := l.List(ctx, in.SessionID)
	if err != nil {
		return host.Outcome{}, err
	}
	switch in.Kind {
	case protocol.TaskQueryGet:
		return host.OK(protocol.TaskLedgerQueryResult{
			Kind: protocol.TaskResultTask, SessionID: in.SessionID, Revision: revision, Task: findRef(tasks, in.TaskRef),
		}), nil
	case protocol.TaskQueryListStart, protocol.TaskQueryListContinue:
	default:
		return host.Outcome{}, fmt.Errorf("tasks: unknown query kind %q", in.Kind)
	}
	offset := 0
	if in.Kind == protocol.TaskQueryListContinue {
		if in.Revision != revision {
			return host.OK(protocol.TaskLedgerQueryResult{
				Kind: protocol.TaskResultRevisionChanged, Expected: in.Revision, Actual: revision,
			}), nil
		}
		var ok bool
		if offset, ok = parseCursor(in.Cursor); !ok || offset >= len(tasks) {
			return host.Fail(protocol.ErrInvalidRequest, MessageInvalidCursor), nil
		}
	}
	page, err := buildPage(in.SessionID, revision, tasks, offset)
	if err != nil {
		return host.Outcome{}, err
	}
	return host.OK(page), nil
}

var cursorPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(?:0|[1-9][0-9]*)$`) })

// maxSafeInteger is JavaScript's Number.MAX_SAFE_INTEGER.
const maxSafeInteger = 1<<53 - 1

// parseCursor decodes a cursor: a decimal offset without leading zeros.
func parseCursor(c string) (int, bool) {
	if !cursorPattern().MatchString(c) {
		return 0, false
	}
	n, err := strconv.ParseInt(c, 10, 64)
	if err != nil || n > maxSafeInteger {
		return 0, false
	}
	return int(n), true
}

// errTaskTooLarge reports a task that does not fit in a page by itself.
var errTaskTooLarge = errors.New("tasks: a task cannot fit in one task ledger page")

// buildPage returns the page that starts at offset (≤ len(tasks)), filled
// greedily while it holds at most TaskLedgerPageMaxItems tasks and encodes
// to at most TaskLedgerPageMaxBytes bytes.
func buildPage(sessionID, revision string, tasks []protocol.Task, offset int) (protocol.TaskLedgerQueryResult, error) {
	page := protocol.TaskLedgerQueryResult{Kind: protocol.TaskResultPage, SessionID: sessionID, Revision: revision}
	// The encoding of a page is its encoding without tasks plus the tasks
	// joined by commas, so each task is encoded once.
	size := 0 // encoded size of the tasks taken so far, commas included
	end := offset
	for end < len(tasks) && end-offset < protocol.TaskLedgerPageMaxItems {
		b, err := protocol.Marshal(tasks[end])
		if err != nil {
			return page, err
		}
		grown := size + len(b)
		if end > offset {
			grown++ // the comma
		}
		shell, err := emptyPageSize(page, nextCursor(end+1, len(tasks)))
		if err != nil {
			return page, err
		}
		if shell+grown > protocol.TaskLedgerPageMaxBytes {
			if end == offset {
				return page, fmt.Errorf("%w: %s", errTaskTooLarge, tasks[end].Key)
			}
			break
		}
		size = grown
		end++
	}
	page.Tasks = tasks[offset:end:end]
	page.NextCursor = nextCursor(end, len(tasks))
	return page, nil
}

// emptyPageSize returns the encoded size of page without tasks and with the
// given next cursor.
func emptyPageSize(page protocol.TaskLedgerQueryResult, next *string) (int, error) {
	page.Tasks, page.NextCursor = nil, next
	return protocol.EncodedSize(page)
}

func nextCursor(offset, count int) *string {
	if offset >= count {
		return nil
	}
	c := strconv.Itoa(offset)
	return &c
}
