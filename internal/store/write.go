package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// savepointName names the savepoint each Write function runs in.
const savepointName = "store_write"

var (
	sqlSavepoint  = "SAVEPOINT " + savepointName
	sqlRelease    = "RELEASE " + savepointName
	sqlRollbackTo = "ROLLBACK TO " + savepointName
)

// writeReq is one queued Write call.
type writeReq struct {
	ctx  context.Context
	fn   func(tx *Tx) error
	done chan writeResult
}

type writeResult struct {
	err      error
	panicked any // a panic of fn, re-raised in the caller's goroutine
	stack    []byte
}

func (r *writeReq) finish(err error) { r.done <- writeResult{err: err} }

// reqPool recycles requests with their result channel.
var reqPool = sync.Pool{New: func() any {
	return &writeReq{done: make(chan writeResult, 1)}
}}

func (r *writeReq) release() {
	r.ctx, r.fn = nil, nil
	reqPool.Put(r)
}

func finishAll(reqs []*writeReq, err error) {
	for _, r := range reqs {
		r.finish(err)
	}
}

// Write runs fn in the writer's next transaction and returns once that
// transaction committed (nil: the effects of fn are durable) or failed.
//
// fn runs on the writer goroutine inside its own savepoint: when fn returns an
// error (or panics) its statements are rolled back and the error (or panic)
// is returned to this caller alone, while the other functions of the batch
// commit. fn must be quick and must not block or call Write (the whole batch
// waits for it), must not use tx after returning, and must not issue
// transaction control statements.
//
// ctx bounds the wait for a place in the queue and, until fn starts, the wait
// in the queue (a request whose ctx ended before it started returns ctx.Err()
// and has no effect). Once fn has started, Write waits for the outcome of the
// commit so that the result is always exact; statements run by fn are not
// interrupted by ctx (an interrupted statement would abort the whole batch).
//
// Errors: ErrClosed after Close started; ErrPersistenceFailed (and
// ErrFailStop in fail-stop) when nothing was committed because of a storage
// fault; ErrCommitOutcomeUnknown when the COMMIT failed; otherwise the error
// returned by fn, wrapped with ErrPersistenceFailed when it is a storage
// fault.
func (s *Store) Write(ctx context.Context, fn func(tx *Tx) error) error {
	if fn == nil {
		return errors.New("store: Write with a nil function")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	req := reqPool.Get().(*writeReq)
	req.ctx, req.fn = ctx, fn
	select {
	case s.queue <- req:
	case <-ctx.Done():
		s.leave()
		req.release()
		return ctx.Err()
	case <-s.abandon:
		s.leave()
		req.release()
		return ErrClosed
	}
	s.leave()
	if h := s.hooks.enqueued; h != nil {
		h()
	}
	// The writer does not touch req after delivering the result.
	res := <-req.done
	req.release()
	if res.panicked != nil {
		panic(fmt.Sprintf("store: write function panicked: %v\n\nwriter goroutine stack:\n%s", res.panicked, res.stack))
	}
	return res.err
}

// run is the writer goroutine. It waits for a request, then commits
// everything that is queued in one transaction.
func (s *Store) run() {
	defer close(s.writerDone)
	for {
		var first *writeReq
		select {
		case first = <-s.queue:
		case <-s.stop:
			// Nobody can queue any more; drain what is left.
			select {
			case first = <-s.queue:
			default:
				return
			}
		}
		s.pending = append(s.pending[:0], first)
		s.gather()
		for len(s.pending) > 0 {
			// Keep what the transaction did not run for the next one.
			n := copy(s.pending, s.pending[s.runTx():])
			clear(s.pending[n:])
			s.pending = s.pending[:n]
		}
	}
}

// gather lets the callers acknowledged by the previous commit queue their
// next write before the transaction starts: the writer yields while that
// makes s.pending grow (it woke them, so they wait in its run queue).
func (s *Store) gather() {
	for s.fill(); len(s.pending) < s.maxBatch; {
		n := len(s.pending)
		runtime.Gosched()
		if s.fill(); len(s.pending) == n {
			return
		}
	}
}

// fill appends queued requests to s.pending without blocking, up to
// maxBatch. Once Close gave up waiting, queued requests are left for the
// writer loop to reject.
func (s *Store) fill() {
	for len(s.pending) < s.maxBatch && !isClosed(s.abandon) {
		select {
		case r := <-s.queue:
			s.pending = append(s.pending, r)
		default:
			return
		}
	}
}

// runTx runs the requests in s.pending in one transaction, acknowledges them
// and returns the index of the first request it did not run. Requests queued
// while the transaction runs join it, up to maxBatch: the callers
// acknowledged by the previous commit queue their next write while this
// transaction executes, and share its fsync. When the transaction aborts
// midway, the requests after the one that broke it are left for a fresh
// transaction.
func (s *Store) runTx() (next int) {
	if isClosed(s.abandon) {
		finishAll(s.pending, ErrClosed)
		return len(s.pending)
	}
	if err := s.Err(); err != nil {
		finishAll(s.pending, err)
		return len(s.pending)
	}
	s.batches.Add(1)
	if h := s.hooks.begin; h != nil {
		if err := h(); err != nil {
			finishAll(s.pending, persistenceError("begin", err))
			return len(s.pending)
		}
	}
	tx, err := s.wdb.BeginTx(context.Background(), nil)
	if err != nil {
		finishAll(s.pending, persistenceError("begin", err))
		return len(s.pending)
	}
	stmts := s.wstmts.scope(context.Background(), tx)
	defer stmts.end()

	ok := s.okBuf[:0]
	defer func() { clear(ok); s.okBuf = ok[:0] }()
	ran := 0
	for i := 0; ; i++ {
		if i == len(s.pending) {
			if s.fill(); i == len(s.pending) {
				break
			}
		}
		r := s.pending[i]
		if err := r.ctx.Err(); err != nil {
			r.finish(err)
			continue
		}
		ran++
		res, txErr := runOne(stmts, r)
		if txErr != nil {
			_ = tx.Rollback()
			s.recordBatch(ran)
			abort := persistenceError("transaction aborted", txErr)
			finishAll(ok, abort)
			if res.err != nil {
				res.err = persistenceError("transaction aborted", errors.Join(txErr, res.err))
			} else if res.panicked == nil {
				res.err = abort
			}
			r.done <- res
			return i + 1
		}
		if res.err != nil || res.panicked != nil {
			// Rolled back to its savepoint: the outcome is final already.
			r.done <- res
			continue
		}
		ok = append(ok, r)
	}
	s.recordBatch(ran)
	if len(ok) == 0 {
		_ = tx.Rollback()
		return len(s.pending)
	}
	if err := s.commit(tx); err != nil {
		// database/sql reports ErrTxDone when the commit did run.
		_ = tx.Rollback()
		s.commitFailures.Add(1)
		if !commitFailureIsClean(err) {
			stopErr := fmt.Errorf("%w: %w: %w", ErrPersistenceFailed, ErrFailStop, err)
			s.failStop.CompareAndSwap(nil, &stopErr)
		}
		finishAll(ok, fmt.Errorf("%w: commit: %w", ErrCommitOutcomeUnknown, err))
		return len(s.pending)
	}
	finishAll(ok, nil)
	if s.sinceCkpt++; s.sinceCkpt >= checkpointEvery {
		select {
		case s.ckptWake <- struct{}{}:
			s.sinceCkpt = 0
		default: // still busy with the previous round
		}
	}
	return len(s.pending)
}

// runOne runs one request inside its savepoint. txErr reports that the
// transaction itself can no longer be used.
func runOne(stmts *stmtScope, r *writeReq) (res writeResult, txErr error) {
	if _, err := stmts.exec(sqlSavepoint); err != nil {
		return res, err
	}
	tx := &Tx{q: querier{stmts: stmts}, ctx: r.ctx}
	res = callWrite(r.fn, tx)
	tx.q.finish()
	if res.err == nil && res.panicked == nil {
		if _, err := stmts.exec(sqlRelease); err != nil {
			return res, err
		}
		return res, nil
	}
	res.err = classify(res.err)
	if _, err := stmts.exec(sqlRollbackTo); err != nil {
		return res, err
	}
	if _, err := stmts.exec(sqlRelease); err != nil {
		return res, err
	}
	return res, nil
}

// callWrite runs fn, capturing a panic instead of letting it kill the writer.
func callWrite(fn func(*Tx) error, tx *Tx) (res writeResult) {
	defer func() {
		if p := recover(); p != nil {
			res = writeResult{panicked: p, stack: debug.Stack()}
		}
	}()
	return writeResult{err: fn(tx)}
}

func (s *Store) commit(tx *sql.Tx) error {
	if h := s.hooks.commit; h != nil {
		return h(tx.Commit)
	}
	return tx.Commit()
}

func (s *Store) recordBatch(n int) {
	s.writes.Add(uint64(n))
	for {
		cur := s.maxBatchSeen.Load()
		if uint64(n) <= cur || s.maxBatchSeen.CompareAndSwap(cur, uint64(n)) {
			return
		}
	}
}

// Tx is the handle a Write function uses. It is valid only during the call
// and not safe for concurrent use.
type Tx struct {
	q   querier
	ctx context.Context
}

// Context returns the context of the Write call. Statements run by the Tx
// do not observe it.
func (t *Tx) Context() context.Context { return t.ctx }

// Exec executes a statement that returns no rows, using the writer
// connection's prepared-statement cache.
func (t *Tx) Exec(query string, args ...any) (sql.Result, error) {
	return t.q.Exec(query, args...)
}

// Query runs a query inside the write transaction; it sees the changes made
// so far. Rows left open are closed when the function returns.
func (t *Tx) Query(query string, args ...any) (*sql.Rows, error) {
	return t.q.Query(query, args...)
}

// QueryRow runs a query expected to return at most one row.
func (t *Tx) QueryRow(query string, args ...any) *Row {
	return t.q.QueryRow(query, args...)
}
