// Package store is the durable storage engine of the Runtime Host: one SQLite
// database in the storage root, opened by the daemon that holds the root's
// owner lock and by nobody else.
//
// # Write path
//
// Every mutation goes through Write. Write enqueues its function on a bounded
// queue and waits. One writer goroutine owned by the Store opens one
// transaction (BEGIN IMMEDIATE on the single writer connection) for what is
// queued and runs each function inside its own SAVEPOINT: a function that
// fails is rolled back to its savepoint alone and gets its own error, the
// others stay in the transaction. Functions queued while the transaction runs
// join it, up to Options.MaxBatch functions; when the queue is empty the
// writer issues one COMMIT. With journal_mode=WAL and synchronous=FULL, COMMIT is
// where bytes hit the disk: SQLite appends the transaction's modified pages as
// frames to "<db>-wal", the last frame carrying the commit mark, and calls
// fsync on the WAL before COMMIT returns. Only then are the callers of the
// batch acknowledged, so a Write that returned nil is durable, and one fsync
// covers the whole batch (group commit). The main database file is written
// later by a background checkpointer on its own connection, which copies WAL
// frames into it and fsyncs it while the writer goes on; a frame leaves the
// WAL only once it is safely in the database file. A crash before that is
// repaired on the next open by replaying the WAL, and a torn WAL tail (frames
// without a valid commit frame) is ignored, so a transaction is either
// entirely present or entirely absent.
//
// # Failures
//
// Storage faults never panic and are reported as errors wrapping
// ErrPersistenceFailed (nothing was committed: BEGIN failed, a statement hit
// an I/O error, the transaction was aborted) or ErrCommitOutcomeUnknown (the
// COMMIT itself failed; every successful function of that batch gets it).
// After a COMMIT failure that SQLite reports as disk full, read-only medium,
// lock contention or a failed write(2), the store stays usable: the next batch
// starts a fresh transaction. After any other COMMIT failure, notably a failed
// fsync, the kernel may have dropped dirty WAL pages that a later fsync would
// not cover, so the store goes into fail-stop: every later Write fails with
// ErrPersistenceFailed wrapping ErrFailStop, Err reports it, reads keep
// working, and reopening the database (which recovers from what is really on
// disk) is required.
//
// # Reads
//
// Read runs a function inside a read transaction on a separate pool of
// read-only connections (mode=ro, query_only). In WAL mode readers see the
// last committed snapshot and never wait for the writer.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// Defaults for Options fields left zero.
const (
	DefaultQueueSize   = 1024
	DefaultMaxBatch    = 1024
	DefaultMaxReaders  = 4
	DefaultBusyTimeout = 5 * time.Second
)

// Tuning of the write path.
const (
	// pageSize is the page size of new databases. Appends from many
	// concurrent runs dirty about one index page per event, so the WAL
	// volume per commit (and the fsync time) grows with the page size; 1 KiB
	// pages measured the highest durable append rate.
	pageSize = 1024
	// checkpointEvery is the number of commits after which the background
	// checkpointer is woken.
	checkpointEvery = 32
	// walAutoCheckpoint (frames) makes the writer checkpoint by itself when
	// the background checkpointer falls behind, bounding the WAL.
	walAutoCheckpoint = 4096
	// walSizeLimit is the size the WAL file is truncated to after a reset.
	walSizeLimit = 64 << 20
	// The page caches (SQLite's cache_size, each connection its own): they
	// hold pages the connection read or wrote, up to the bound, in memory
	// that the host keeps once it has been used. A miss re-reads the page
	// from the WAL or the database file, which the operating system keeps
	// in its own (shared, reclaimable) page cache. The bounds are the
	// host's largest private memory after work (docs/benchmarks.md,
	// "Memory"): writer 2 MiB, each of the MaxReaders readers 1 MiB, the
	// checkpointer (which copies WAL frames and reads little) 256 KiB.
	writerCacheKiB       = 2 << 10
	readerCacheKiB       = 1 << 10
	checkpointerCacheKiB = 256
	// stmtCacheLimit bounds the number of statements each prepared-statement
	// cache keeps.
	stmtCacheLimit = 256
)

// Options configures Open. The zero value is valid.
type Options struct {
	// Migrations continue the built-in schema: the first one has version
	// BaseSchemaVersion+1 and each next one the previous version plus one.
	Migrations []Migration
	// QueueSize bounds the number of Write calls waiting for the writer
	// (DefaultQueueSize when zero).
	QueueSize int
	// MaxBatch bounds the number of Write functions committed in one
	// transaction (DefaultMaxBatch when zero).
	MaxBatch int
	// MaxReaders bounds the read-only connection pool (DefaultMaxReaders
	// when zero).
	MaxReaders int
	// BusyTimeout is SQLite's busy timeout on every connection
	// (DefaultBusyTimeout when zero).
	BusyTimeout time.Duration

	// hooks lets tests inject storage faults.
	hooks *testHooks
}

// testHooks are fault-injection points used by the package tests.
type testHooks struct {
	// begin, when set, runs before each write transaction starts; an error
	// makes the batch fail as if BEGIN had failed.
	begin func() error
	// commit, when set, replaces the COMMIT of each write transaction; it
	// receives the real commit.
	commit func(commit func() error) error
	// enqueued, when set, runs after a Write call was queued.
	enqueued func()
	// closing, when set, runs once Close stopped accepting calls.
	closing func()
	// checkpointed, when set, runs after each background checkpoint.
	checkpointed func(err error)
}

// Stats are counters of the writer and the checkpointer.
type Stats struct {
	// Batches is the number of write transactions the writer started.
	Batches uint64
	// Writes is the number of Write functions the writer ran.
	Writes uint64
	// MaxBatch is the largest number of Write functions run in one
	// transaction.
	MaxBatch uint64
	// CommitFailures is the number of failed COMMITs.
	CommitFailures uint64
	// Checkpoints and CheckpointFailures count background checkpoints.
	Checkpoints        uint64
	CheckpointFailures uint64
}

// Store is an open database. It is safe for concurrent use.
type Store struct {
	path   string
	wdb    *sql.DB // one connection, used only by the writer goroutine
	rdb    *sql.DB // read-only pool
	cdb    *sql.DB // one connection, used only by the checkpointer
	hooks  testHooks
	schema int

	queue     chan *writeReq
	maxBatch  int
	wstmts    *stmtCache  // writer statements
	rstmts    *stmtCache  // reader statements
	pending   []*writeReq // requests of the writer's current transaction
	okBuf     []*writeReq // writer scratch space
	sinceCkpt int         // commits since the checkpointer was woken (writer only)

	mu        sync.Mutex
	closed    bool
	active    int           // Write calls enqueueing plus running Read calls
	idle      chan struct{} // closed once closed && active == 0
	closeDone chan struct{} // closed when Close finished
	closeErr  error

	stop       chan struct{} // closed when no more requests can be queued
	abandon    chan struct{} // closed when Close gives up waiting: fail queued writes
	writerDone chan struct{}
	ckptWake   chan struct{} // capacity 1: wakes the checkpointer
	ckptStop   chan struct{}
	ckptDone   chan struct{}
	killCtx    context.Context // canceled when Close gives up waiting: cancels reads
	kill       context.CancelFunc

	failStop atomic.Pointer[error]

	batches            atomic.Uint64
	writes             atomic.Uint64
	maxBatchSeen       atomic.Uint64
	commitFailures     atomic.Uint64
	checkpoints        atomic.Uint64
	checkpointFailures atomic.Uint64
}

// Open opens (creating it when missing) the database at path, checks that
// the file is private to the current user, configures WAL mode, synchronous
// FULL and foreign keys, migrates the schema and starts the writer and the
// background checkpointer. The caller must hold the storage root's owner
// lock: the store assumes it is the only writer of the file.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.MaxReaders <= 0 {
		opts.MaxReaders = DefaultMaxReaders
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = DefaultBusyTimeout
	}
	migrations, err := allMigrations(opts.Migrations)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: resolve path: %w", err)
	}
	if err := prepareFile(abs); err != nil {
		return nil, err
	}
	if err := checkCompanions(abs); err != nil {
		return nil, err
	}

	s := &Store{
		path:       abs,
		queue:      make(chan *writeReq, opts.QueueSize),
		maxBatch:   opts.MaxBatch,
		idle:       make(chan struct{}),
		closeDone:  make(chan struct{}),
		stop:       make(chan struct{}),
		abandon:    make(chan struct{}),
		writerDone: make(chan struct{}),
		ckptWake:   make(chan struct{}, 1),
		ckptStop:   make(chan struct{}),
		ckptDone:   make(chan struct{}),
	}
	if opts.hooks != nil {
		s.hooks = *opts.hooks
	}
	s.killCtx, s.kill = context.WithCancel(context.Background())
	if err := s.open(ctx, abs, opts, migrations); err != nil {
		s.kill()
		for _, db := range []*sql.DB{s.rdb, s.cdb, s.wdb} {
			if db != nil {
				_ = db.Close()
			}
		}
		return nil, err
	}
	go s.checkpointLoop()
	go s.run()
	return s, nil
}

// open opens the connection pools and migrates the schema.
func (s *Store) open(ctx context.Context, path string, opts Options, migrations []Migration) error {
	busy := strconv.FormatInt(opts.BusyTimeout.Milliseconds(), 10)
	var err error
	s.wdb, err = openPool(ctx, path, 1, url.Values{
		"mode":          {"rw"},
		"_txlock":       {"immediate"},
		"_busy_timeout": {busy},
		"_journal_mode": {"WAL"},
		"_synchronous":  {"FULL"},
		"_foreign_keys": {"1"},
		"_pragma": {
			fmt.Sprintf("page_size(%d)", pageSize),
			fmt.Sprintf("journal_size_limit(%d)", walSizeLimit),
			fmt.Sprintf("wal_autocheckpoint(%d)", walAutoCheckpoint),
			fmt.Sprintf("cache_size(-%d)", writerCacheKiB),
			"temp_store(MEMORY)",
		},
		"_error_rc":  {"1"},
		"_defensive": {"1"},
		"_dqs":       {"0"},
	})
	if err != nil {
		return persistenceError("open writer", err)
	}
	s.wstmts = newStmtCache(s.wdb)
	if err := checkWriterPragmas(ctx, s.wdb); err != nil {
		return err
	}
	if s.schema, err = migrate(ctx, s.wdb, migrations); err != nil {
		return err
	}
	// The companion files exist now; SQLite gives them the main file's mode
	// and owner, verify that it did.
	if err := checkCompanions(path); err != nil {
		return err
	}
	s.rdb, err = openPool(ctx, path, opts.MaxReaders, url.Values{
		"mode":          {"ro"},
		"_busy_timeout": {busy},
		"_query_only":   {"1"},
		"_pragma":       {fmt.Sprintf("cache_size(-%d)", readerCacheKiB)},
		"_error_rc":     {"1"},
		"_dqs":          {"0"},
	})
	if err != nil {
		return persistenceError("open readers", err)
	}
	s.rstmts = newStmtCache(s.rdb)
	s.cdb, err = openPool(ctx, path, 1, url.Values{
		"mode":          {"rw"},
		"_busy_timeout": {busy},
		"_synchronous":  {"FULL"},
		"_pragma":       {fmt.Sprintf("cache_size(-%d)", checkpointerCacheKiB)},
		"_error_rc":     {"1"},
	})
	if err != nil {
		return persistenceError("open checkpointer", err)
	}
	return nil
}

// openPool opens a pool of at most n connections that are never recycled
// and checks that a connection can be established.
func openPool(ctx context.Context, path string, n int, params url.Values) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn(path, params))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// dsn builds a SQLite URI for path with the given query parameters.
func dsn(path string, params url.Values) string {
	u := url.URL{Scheme: "file", Path: path, RawQuery: params.Encode()}
	return u.String()
}

// checkWriterPragmas verifies that the writer connection really runs with
// the durability settings the write path relies on.
func checkWriterPragmas(ctx context.Context, db *sql.DB) error {
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return persistenceError("open", err)
	}
	if mode != "wal" {
		return fmt.Errorf("%w: open: journal_mode is %q, want wal", ErrPersistenceFailed, mode)
	}
	var sync, fk int
	if err := db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
		return persistenceError("open", err)
	}
	if sync != 2 {
		return fmt.Errorf("%w: open: synchronous is %d, want 2 (FULL)", ErrPersistenceFailed, sync)
	}
	if err := db.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
		return persistenceError("open", err)
	}
	if fk != 1 {
		return fmt.Errorf("%w: open: foreign_keys is off", ErrPersistenceFailed)
	}
	return nil
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// SchemaVersion returns the schema version the database was migrated to.
func (s *Store) SchemaVersion() int { return s.schema }

// Stats returns the counters of the writer and the checkpointer.
func (s *Store) Stats() Stats {
	return Stats{
		Batches:        s.batches.Load(),
		Writes:         s.writes.Load(),
		MaxBatch:       s.maxBatchSeen.Load(),
		CommitFailures: s.commitFailures.Load(),

		Checkpoints:        s.checkpoints.Load(),
		CheckpointFailures: s.checkpointFailures.Load(),
	}
}

// Err returns the error that put the store into fail-stop, or nil while
// writes are possible.
func (s *Store) Err() error {
	if p := s.failStop.Load(); p != nil {
		return *p
	}
	return nil
}

// enter registers a Write or Read call; it fails once Close has started.
func (s *Store) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.active++
	return nil
}

// leave unregisters a call registered by enter.
func (s *Store) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	if s.closed && s.active == 0 {
		close(s.idle)
	}
}

// Close stops accepting Write and Read calls, waits for running reads, lets
// the writer commit everything already queued, and closes the database.
// When ctx ends first, queued writes that have not started fail with
// ErrClosed, running reads are canceled, the transaction in progress is
// finished, and Close returns an error wrapping ctx.Err() after the teardown.
// Close is idempotent: later calls wait for the first one and return its
// result.
func (s *Store) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		select {
		case <-s.closeDone:
			return s.closeErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.closed = true
	if s.active == 0 {
		close(s.idle)
	}
	s.mu.Unlock()
	if h := s.hooks.closing; h != nil {
		h()
	}

	var errs []error
	giveUp := func() {
		if !isClosed(s.abandon) {
			errs = append(errs, fmt.Errorf("store: close: %w", ctx.Err()))
			close(s.abandon)
			s.kill()
		}
	}
	// Wait for running Read calls and for Write calls still enqueueing.
	select {
	case <-s.idle:
	case <-ctx.Done():
		giveUp()
		<-s.idle
	}
	// Nothing can be queued any more: let the writer drain and exit.
	close(s.stop)
	select {
	case <-s.writerDone:
	case <-ctx.Done():
		giveUp()
		<-s.writerDone
	}
	s.kill()
	close(s.ckptStop)
	<-s.ckptDone
	s.wstmts.close()
	s.rstmts.close()
	if err := s.rdb.Close(); err != nil {
		errs = append(errs, fmt.Errorf("store: close readers: %w", err))
	}
	if err := s.cdb.Close(); err != nil {
		errs = append(errs, fmt.Errorf("store: close checkpointer: %w", err))
	}
	// The writer connection closes last: as the last connection it
	// checkpoints the WAL completely and removes it.
	if err := s.wdb.Close(); err != nil {
		errs = append(errs, fmt.Errorf("store: close writer: %w", err))
	}
	s.closeErr = errors.Join(errs...)
	close(s.closeDone)
	return s.closeErr
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
