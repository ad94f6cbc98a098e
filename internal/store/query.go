package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
)

// Querier runs queries inside a transaction. It is implemented by the handle
// passed to Read functions and by *Tx. A Querier is valid only during the
// function it was passed to and is not safe for concurrent use.
type Querier interface {
	// Query runs a query. Rows left open are closed when the function
	// returns.
	Query(query string, args ...any) (*sql.Rows, error)
	// QueryRow runs a query expected to return at most one row.
	QueryRow(query string, args ...any) *Row
}

var (
	_ Querier = (*Tx)(nil)
	_ Querier = (*querier)(nil)
)

// Row is the result of QueryRow.
type Row struct {
	rows *sql.Rows
	err  error
}

// Scan copies the columns of the first row into dest and closes the result.
// It returns sql.ErrNoRows when the query returned no row.
func (r *Row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	return r.rows.Close()
}

// Err returns the error of running the query, if any.
func (r *Row) Err() error { return r.err }

// Read runs fn in a read transaction on the read-only connection pool. fn
// sees one consistent snapshot of the last committed state and never waits
// for the writer. ctx cancels running statements. A storage fault is
// returned wrapped with ErrPersistenceFailed; other errors of fn are returned
// unchanged.
func (s *Store) Read(ctx context.Context, fn func(q Querier) error) error {
	if fn == nil {
		return errors.New("store: Read with a nil function")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	readCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.killCtx, cancel)()

	tx, err := s.rdb.BeginTx(readCtx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return s.readError(ctx, readCtx, persistenceError("read: begin", err))
	}
	stmts := s.rstmts.scope(readCtx, tx)
	q := &querier{stmts: stmts}
	defer func() {
		q.finish()
		_ = tx.Rollback()
		stmts.end()
	}()
	if err := fn(q); err != nil {
		return s.readError(ctx, readCtx, classify(err))
	}
	return nil
}

// readError reports a canceled read as the caller's ctx.Err(), or as
// ErrClosed when Close canceled it.
func (s *Store) readError(ctx, readCtx context.Context, err error) error {
	if readCtx.Err() == nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return ErrClosed
}

// querier implements Querier (and the statements of Tx) on a transaction's
// statement scope.
type querier struct {
	stmts *stmtScope
	rows  []*sql.Rows
	done  bool
}

func (q *querier) Exec(query string, args ...any) (sql.Result, error) {
	st, err := q.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(q.stmts.ctx, args...)
}

func (q *querier) Query(query string, args ...any) (*sql.Rows, error) {
	st, err := q.stmt(query)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(q.stmts.ctx, args...)
	if err != nil {
		return nil, err
	}
	q.rows = append(q.rows, rows)
	return rows, nil
}

func (q *querier) QueryRow(query string, args ...any) *Row {
	rows, err := q.Query(query, args...)
	return &Row{rows: rows, err: err}
}

func (q *querier) stmt(query string) (*sql.Stmt, error) {
	if q.done {
		return nil, ErrTxDone
	}
	if isTxControl(query) {
		return nil, ErrTxControl
	}
	return q.stmts.stmt(query)
}

// finish closes rows the function left open (an open result would block the
// end of the transaction) and invalidates the handle.
func (q *querier) finish() {
	for _, r := range q.rows {
		_ = r.Close()
	}
	clear(q.rows)
	q.rows = nil
	q.done = true
}

// isTxControl reports whether query starts with a transaction control
// keyword.
func isTxControl(query string) bool {
	q := strings.TrimLeft(query, " \t\r\n(")
	end := strings.IndexFunc(q, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	})
	if end >= 0 {
		q = q[:end]
	}
	switch strings.ToUpper(q) {
	case "BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE":
		return true
	}
	return false
}

// stmtCache keeps statements prepared on a connection pool. A statement
// prepared on the pool is reused by every transaction on every connection
// that already prepared it (database/sql keeps one driver statement per
// connection).
type stmtCache struct {
	db     *sql.DB
	mu     sync.Mutex
	stmts  map[string]*sql.Stmt
	closed bool
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, stmts: make(map[string]*sql.Stmt)}
}

func (c *stmtCache) get(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stmts[query]
}

// add prepares queries on the pool. It must run outside any transaction of
// the pool: preparing needs a free connection.
func (c *stmtCache) add(ctx context.Context, queries []string) {
	for _, q := range queries {
		c.mu.Lock()
		_, have := c.stmts[q]
		full := c.closed || len(c.stmts) >= stmtCacheLimit
		c.mu.Unlock()
		if have || full {
			continue
		}
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			continue
		}
		c.mu.Lock()
		if _, have := c.stmts[q]; have || c.closed {
			_ = st.Close()
		} else {
			c.stmts[q] = st
		}
		c.mu.Unlock()
	}
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.stmts {
		_ = st.Close()
	}
	clear(c.stmts)
	c.closed = true
}

// scope returns the statement view of one transaction.
func (c *stmtCache) scope(ctx context.Context, tx *sql.Tx) *stmtScope {
	return &stmtScope{cache: c, tx: tx, ctx: ctx}
}

// stmtScope hands out the statements of one transaction: cached pool
// statements bound to the transaction, or statements prepared on the
// transaction for queries not cached yet (those are added to the cache when
// the transaction ended).
type stmtScope struct {
	cache  *stmtCache
	tx     *sql.Tx
	ctx    context.Context
	local  map[string]*sql.Stmt
	missed []string
}

func (s *stmtScope) stmt(query string) (*sql.Stmt, error) {
	if st, ok := s.local[query]; ok {
		return st, nil
	}
	var st *sql.Stmt
	if cached := s.cache.get(query); cached != nil {
		st = s.tx.StmtContext(s.ctx, cached)
	} else {
		var err error
		if st, err = s.tx.PrepareContext(s.ctx, query); err != nil {
			return nil, err
		}
		s.missed = append(s.missed, query)
	}
	if s.local == nil {
		s.local = make(map[string]*sql.Stmt)
	}
	s.local[query] = st
	return st, nil
}

func (s *stmtScope) exec(query string, args ...any) (sql.Result, error) {
	st, err := s.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(s.ctx, args...)
}

// end must be called after the transaction committed or rolled back.
func (s *stmtScope) end() {
	if len(s.missed) > 0 && s.ctx.Err() == nil {
		s.cache.add(s.ctx, s.missed)
	}
}
