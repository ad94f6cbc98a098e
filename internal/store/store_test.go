package store

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// crashChildEnv makes the test binary run as the writer child of
// TestCrashSafety; its value is the database path.
const crashChildEnv = "STORE_TEST_CRASH_CHILD"

// crashIterationEnv carries the iteration number into the child, which uses
// it to keep write ids unique across iterations.
const crashIterationEnv = "STORE_TEST_CRASH_ITERATION"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		os.Exit(crashChild(path))
	}
	goleak.VerifyTestMain(m)
}

// failAfter bounds every wait so that a broken store fails the test instead
// of hanging it. It never orders events.
const failAfter = 20 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	t.Cleanup(cancel)
	return ctx
}

// openStore opens a store at path and closes it when the test ends.
func openStore(t *testing.T, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(testCtx(t), path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func tempDB(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "store.sqlite")
}

// appendEvent inserts one run event.
func appendEvent(tx *Tx, runID string, seq int) error {
	_, err := tx.Exec(`INSERT INTO run_events (session_id, run_id, seq, ts, type, payload) VALUES (?, ?, ?, ?, ?, ?)`,
		"s1", runID, seq, int64(seq), "text_delta", `{"text":"x"}`)
	return err
}

// eventCount returns the number of run events of runID (all runs when "").
func eventCount(t *testing.T, s *Store, runID string) int {
	t.Helper()
	var n int
	err := s.Read(testCtx(t), func(q Querier) error {
		if runID == "" {
			return q.QueryRow(`SELECT COUNT(*) FROM run_events`).Scan(&n)
		}
		return q.QueryRow(`SELECT COUNT(*) FROM run_events WHERE run_id = ?`, runID).Scan(&n)
	})
	if err != nil {
		t.Fatalf("count events: %v", err)
	}
	return n
}

// blockWriter starts a Write whose function holds the writer until release
// is called; it returns once the function runs. The returned wait reports
// the blocked Write's result.
func blockWriter(t *testing.T, s *Store) (release func(), wait func() error) {
	t.Helper()
	started := make(chan struct{})
	unblock := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		result <- s.Write(context.Background(), func(tx *Tx) error {
			if err := appendEvent(tx, "blocker", 1); err != nil {
				return err
			}
			close(started)
			<-unblock
			return nil
		})
	}()
	select {
	case <-started:
	case err := <-result:
		t.Fatalf("blocking write returned early: %v", err)
	case <-time.After(failAfter):
		t.Fatal("blocking write did not start")
	}
	var once sync.Once
	release = func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(release)
	wait = func() error {
		select {
		case err := <-result:
			return err
		case <-time.After(failAfter):
			t.Fatal("blocking write did not finish")
			return nil
		}
	}
	return release, wait
}

// queuedCounter returns test hooks counting queued Write calls and a
// function waiting until n calls were queued in total.
func queuedCounter(t *testing.T) (*testHooks, func(n int)) {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	count := 0
	hooks := &testHooks{enqueued: func() {
		mu.Lock()
		count++
		mu.Unlock()
		cond.Broadcast()
	}}
	wait := func(n int) {
		t.Helper()
		deadline := time.AfterFunc(failAfter, func() {
			mu.Lock()
			count = -1 << 30
			mu.Unlock()
			cond.Broadcast()
		})
		defer deadline.Stop()
		mu.Lock()
		defer mu.Unlock()
		for count >= 0 && count < n {
			cond.Wait()
		}
		if count < 0 {
			t.Fatalf("timed out waiting for %d queued writes", n)
		}
	}
	return hooks, wait
}

func TestOpenCreatesPrivateDatabaseWithDurablePragmas(t *testing.T) {
	path := tempDB(t)
	s := openStore(t, path, Options{})

	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s has mode %#o, want 0600", p, perm)
		}
	}
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}

	var journal string
	var syncMode, fk, pgSize int
	err := s.Write(testCtx(t), func(tx *Tx) error {
		if err := tx.QueryRow("PRAGMA journal_mode").Scan(&journal); err != nil {
			return err
		}
		if err := tx.QueryRow("PRAGMA page_size").Scan(&pgSize); err != nil {
			return err
		}
		if err := tx.QueryRow("PRAGMA synchronous").Scan(&syncMode); err != nil {
			return err
		}
		return tx.QueryRow("PRAGMA foreign_keys").Scan(&fk)
	})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if journal != "wal" || syncMode != 2 || fk != 1 || pgSize != pageSize {
		t.Errorf("writer pragmas: journal_mode=%s synchronous=%d foreign_keys=%d page_size=%d, want wal 2 1 %d",
			journal, syncMode, fk, pgSize, pageSize)
	}

	// Readers are read-only.
	err = s.Read(testCtx(t), func(q Querier) error {
		_, err := q.Query(`INSERT INTO documents (name, revision, body) VALUES ('x', 1, '{}')`)
		return err
	})
	if err == nil {
		t.Fatal("insert through Read succeeded, want a read-only error")
	}
}

func TestOpenRefusesInsecureFiles(t *testing.T) {
	t.Run("group readable", func(t *testing.T) {
		path := tempDB(t)
		if err := os.WriteFile(path, nil, 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o640); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(testCtx(t), path, Options{}); !errors.Is(err, ErrInsecureFile) {
			t.Fatalf("Open = %v, want ErrInsecureFile", err)
		}
	})
	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		target := filepath.Join(dir, "target.sqlite")
		if err := os.WriteFile(target, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, "store.sqlite")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(testCtx(t), link, Options{}); !errors.Is(err, ErrInsecureFile) {
			t.Fatalf("Open = %v, want ErrInsecureFile", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		path := tempDB(t)
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(testCtx(t), path, Options{}); !errors.Is(err, ErrInsecureFile) {
			t.Fatalf("Open = %v, want ErrInsecureFile", err)
		}
	})
	t.Run("other owner", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("changing a file's owner needs root")
		}
		path := tempDB(t)
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(testCtx(t), path, Options{}); !errors.Is(err, ErrInsecureFile) {
			t.Fatalf("Open = %v, want ErrInsecureFile", err)
		}
	})
	t.Run("insecure wal", func(t *testing.T) {
		path := tempDB(t)
		s, err := Open(testCtx(t), path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path+"-wal", nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path+"-wal", 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(testCtx(t), path, Options{}); !errors.Is(err, ErrInsecureFile) {
			t.Fatalf("Open = %v, want ErrInsecureFile", err)
		}
	})
}

func tableNames(t *testing.T, s *Store) []string {
	t.Helper()
	var names []string
	err := s.Read(testCtx(t), func(q Querier) error {
		rows, err := q.Query(`SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return err
			}
			names = append(names, n)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestMigrations(t *testing.T) {
	path := tempDB(t)
	ctx := testCtx(t)

	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.SchemaVersion(); got != BaseSchemaVersion {
		t.Errorf("fresh SchemaVersion = %d, want %d", got, BaseSchemaVersion)
	}
	if got, want := strings.Join(tableNames(t, s), ","), "documents,run_events,schema_version,sessions"; got != want {
		t.Errorf("tables = %s, want %s", got, want)
	}
	// The built-in tables accept what the host stores.
	err = s.Write(ctx, func(tx *Tx) error {
		if _, err := tx.Exec(`INSERT INTO sessions (session_id, created_at, last_used_at, status, archived_at, document) VALUES ('s1', 1, 2, 'active', NULL, '{}')`); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO documents (name, revision, body) VALUES ('runtime_policy', 1, '{}')`); err != nil {
			return err
		}
		return appendEvent(tx, "r1", 1)
	})
	if err != nil {
		t.Fatalf("write to built-in tables: %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	var ups atomic.Int32
	v2 := Migration{Version: 2, Up: func(tx *sql.Tx) error {
		ups.Add(1)
		_, err := tx.Exec(`CREATE TABLE extra (id INTEGER PRIMARY KEY)`)
		return err
	}}
	for i := range 2 {
		s, err = Open(ctx, path, Options{Migrations: []Migration{v2}})
		if err != nil {
			t.Fatalf("open %d with migration 2: %v", i, err)
		}
		if got := s.SchemaVersion(); got != 2 {
			t.Errorf("SchemaVersion = %d, want 2", got)
		}
		if n := eventCount(t, s, "r1"); n != 1 {
			t.Errorf("data lost across migration: %d events", n)
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := ups.Load(); n != 1 {
		t.Errorf("migration 2 ran %d times, want once", n)
	}

	// A failing migration is rolled back entirely and fails Open.
	boom := errors.New("boom")
	v3 := Migration{Version: 3, Up: func(tx *sql.Tx) error {
		if _, err := tx.Exec(`CREATE TABLE half (id INTEGER)`); err != nil {
			return err
		}
		return boom
	}}
	if _, err := Open(ctx, path, Options{Migrations: []Migration{v2, v3}}); !errors.Is(err, boom) {
		t.Fatalf("Open with failing migration = %v, want boom", err)
	}
	s, err = Open(ctx, path, Options{Migrations: []Migration{v2}})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.SchemaVersion(); got != 2 {
		t.Errorf("SchemaVersion after failed migration = %d, want 2", got)
	}
	for _, n := range tableNames(t, s) {
		if n == "half" {
			t.Error("table of the failed migration exists")
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// A database migrated further than this program knows is refused.
	_, err = Open(ctx, path, Options{})
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("Open of a newer database = %v, want ErrSchemaTooNew", err)
	}
	if !strings.Contains(err.Error(), "version 2") {
		t.Errorf("error %q does not name the database version", err)
	}

	// Migration lists must continue the built-in versions without gaps.
	for _, bad := range [][]Migration{
		{{Version: 3, Up: v2.Up}},
		{{Version: 1, Up: v2.Up}},
		{{Version: 2}},
	} {
		if _, err := Open(ctx, path, Options{Migrations: bad}); err == nil || errors.Is(err, ErrSchemaTooNew) {
			t.Errorf("Open with migrations %+v = %v, want a validation error", bad, err)
		}
	}
}

func TestWriteAndRead(t *testing.T) {
	s := openStore(t, tempDB(t), Options{})
	ctx := testCtx(t)

	err := s.Write(ctx, func(tx *Tx) error {
		if err := appendEvent(tx, "r1", 1); err != nil {
			return err
		}
		// The transaction sees its own changes.
		var n int
		if err := tx.QueryRow(`SELECT COUNT(*) FROM run_events WHERE run_id = 'r1'`).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("own insert not visible: %d rows", n)
		}
		if tx.Context() != ctx {
			return errors.New("Tx.Context is not the Write context")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if n := eventCount(t, s, "r1"); n != 1 {
		t.Fatalf("committed events = %d, want 1", n)
	}

	err = s.Read(ctx, func(q Querier) error {
		var x int
		return q.QueryRow(`SELECT seq FROM run_events WHERE run_id = 'nope'`).Scan(&x)
	})
	if !errors.Is(err, sql.ErrNoRows) {
		t.Errorf("QueryRow of no row = %v, want sql.ErrNoRows", err)
	}
	err = s.Read(ctx, func(q Querier) error {
		_, err := q.Query(`SELECT * FROM no_such_table`)
		return err
	})
	if err == nil || errors.Is(err, ErrPersistenceFailed) {
		t.Errorf("query of a missing table = %v, want a plain SQL error", err)
	}

	// Rows left open by a function do not wedge the transaction.
	for range 3 {
		err = s.Write(ctx, func(tx *Tx) error {
			_, err := tx.Query(`SELECT * FROM run_events`)
			return err
		})
		if err != nil {
			t.Fatalf("Write leaving rows open: %v", err)
		}
		err = s.Read(ctx, func(q Querier) error {
			_, err := q.Query(`SELECT * FROM run_events`)
			return err
		})
		if err != nil {
			t.Fatalf("Read leaving rows open: %v", err)
		}
	}

	// Handles are invalid after the function returned.
	var kept *Tx
	if err := s.Write(ctx, func(tx *Tx) error { kept = tx; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := kept.Exec(`DELETE FROM run_events`); !errors.Is(err, ErrTxDone) {
		t.Errorf("Exec after return = %v, want ErrTxDone", err)
	}
	if n := eventCount(t, s, "r1"); n != 1 {
		t.Errorf("events = %d after a stale Exec, want 1", n)
	}
}

func TestWriteRejectsTransactionControl(t *testing.T) {
	s := openStore(t, tempDB(t), Options{})
	for _, q := range []string{"COMMIT", " rollback", "BEGIN IMMEDIATE", "savepoint x", "RELEASE store_write", "END TRANSACTION", "ROLLBACK TO store_write"} {
		err := s.Write(testCtx(t), func(tx *Tx) error {
			if err := appendEvent(tx, "ctl", 1); err != nil {
				return err
			}
			_, err := tx.Exec(q)
			return err
		})
		if !errors.Is(err, ErrTxControl) {
			t.Errorf("Exec(%q) = %v, want ErrTxControl", q, err)
		}
	}
	if n := eventCount(t, s, "ctl"); n != 0 {
		t.Errorf("rejected writes left %d events", n)
	}
	if !isTxControl("commit;") || isTxControl("COMMITTED_AT") || isTxControl("SELECT 1") {
		t.Error("isTxControl misclassifies")
	}
}

func TestGroupCommitManyConcurrentWriters(t *testing.T) {
	s := openStore(t, tempDB(t), Options{})
	ctx := testCtx(t)
	writers, perWriter := 64, 20
	if raceEnabled {
		writers, perWriter = 32, 5
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter)
	for w := range writers {
		wg.Go(func() {
			run := fmt.Sprintf("run-%d", w)
			for i := range perWriter {
				if err := s.Write(ctx, func(tx *Tx) error { return appendEvent(tx, run, i) }); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Write: %v", err)
	}
	total := writers * perWriter
	if n := eventCount(t, s, ""); n != total {
		t.Fatalf("events = %d, want %d", n, total)
	}
	st := s.Stats()
	if st.Writes != uint64(total) {
		t.Errorf("Stats.Writes = %d, want %d", st.Writes, total)
	}
	if st.Batches >= uint64(total) || st.MaxBatch < 2 {
		t.Errorf("no group commit: %d batches for %d writes, max batch %d", st.Batches, total, st.MaxBatch)
	}
	t.Logf("%d writes in %d batches, max batch %d", st.Writes, st.Batches, st.MaxBatch)
}

func TestGroupCommitIsolatesFailingWrites(t *testing.T) {
	hooks, waitQueued := queuedCounter(t)
	s := openStore(t, tempDB(t), Options{hooks: hooks})
	ctx := testCtx(t)
	// A row the constraint-violating write below collides with.
	if err := s.Write(ctx, func(tx *Tx) error { return appendEvent(tx, "dup", 1) }); err != nil {
		t.Fatal(err)
	}

	release, waitBlocker := blockWriter(t, s)
	before := s.Stats()
	waitQueued(2) // the setup write and the blocker

	const n = 12
	errBoom := errors.New("boom")
	type result struct {
		err      error
		panicked any
	}
	results := make([]chan result, n)
	for i := range n {
		results[i] = make(chan result, 1)
		run := fmt.Sprintf("batch-%d", i)
		go func() {
			var res result
			defer func() {
				res.panicked = recover()
				results[i] <- res
			}()
			res.err = s.Write(ctx, func(tx *Tx) error {
				if err := appendEvent(tx, run, 1); err != nil {
					return err
				}
				switch i {
				case 3:
					return errBoom // after its own insert
				case 7:
					return appendEvent(tx, "dup", 1) // constraint violation
				case 9:
					panic("write function bug")
				}
				return appendEvent(tx, run, 2)
			})
		}()
	}
	waitQueued(2 + n)
	release()
	if err := waitBlocker(); err != nil {
		t.Fatalf("blocking write: %v", err)
	}

	for i := range n {
		res := <-results[i]
		err, panicked := res.err, res.panicked
		run := fmt.Sprintf("batch-%d", i)
		got := eventCount(t, s, run)
		switch i {
		case 3:
			if !errors.Is(err, errBoom) {
				t.Errorf("write %d: err = %v, want its own error", i, err)
			}
			if got != 0 {
				t.Errorf("write %d failed but left %d events", i, got)
			}
		case 7:
			if err == nil || errors.Is(err, ErrPersistenceFailed) || !strings.Contains(err.Error(), "UNIQUE") {
				t.Errorf("write %d: err = %v, want the constraint error", i, err)
			}
			if got != 0 {
				t.Errorf("write %d failed but left %d events", i, got)
			}
		case 9:
			if !strings.Contains(fmt.Sprint(panicked), "write function bug") {
				t.Errorf("write %d: panic %v (err %v), want the function's panic re-raised", i, panicked, err)
			}
			if got != 0 {
				t.Errorf("write %d panicked but left %d events", i, got)
			}
		default:
			if err != nil {
				t.Errorf("write %d: %v", i, err)
			}
			if got != 2 {
				t.Errorf("write %d: %d events, want 2", i, got)
			}
		}
	}
	after := s.Stats()
	// Queued while the blocker ran, all n writes joined its transaction.
	if d := after.Batches - before.Batches; d != 0 {
		t.Errorf("%d more transactions after the blocker's, want 0", d)
	}
	if after.MaxBatch < n+1 {
		t.Errorf("MaxBatch = %d, want >= %d", after.MaxBatch, n+1)
	}
}

func TestWritePanicReachesCaller(t *testing.T) {
	s := openStore(t, tempDB(t), Options{})
	ctx := testCtx(t)
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_ = s.Write(ctx, func(tx *Tx) error {
			if err := appendEvent(tx, "p", 1); err != nil {
				return err
			}
			panic("kaboom")
		})
	}()
	if recovered == nil || !strings.Contains(fmt.Sprint(recovered), "kaboom") {
		t.Fatalf("recovered %v, want the write function's panic", recovered)
	}
	if n := eventCount(t, s, "p"); n != 0 {
		t.Errorf("panicking write left %d events", n)
	}
	if err := s.Write(ctx, func(tx *Tx) error { return appendEvent(tx, "p", 2) }); err != nil {
		t.Fatalf("write after panic: %v", err)
	}
}

func TestReadersNotBlockedByLongWrite(t *testing.T) {
	s := openStore(t, tempDB(t), Options{MaxReaders: 2})
	ctx := testCtx(t)
	if err := s.Write(ctx, func(tx *Tx) error { return appendEvent(tx, "committed", 1) }); err != nil {
		t.Fatal(err)
	}
	release, wait := blockWriter(t, s) // holds an open write transaction

	// Concurrent reads complete while the writer is in the middle of a
	// transaction and see only committed data.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			var committed, uncommitted int
			err := s.Read(ctx, func(q Querier) error {
				if err := q.QueryRow(`SELECT COUNT(*) FROM run_events WHERE run_id = 'committed'`).Scan(&committed); err != nil {
					return err
				}
				return q.QueryRow(`SELECT COUNT(*) FROM run_events WHERE run_id = 'blocker'`).Scan(&uncommitted)
			})
			if err != nil {
				t.Errorf("Read during a write: %v", err)
			}
			if committed != 1 || uncommitted != 0 {
				t.Errorf("Read during a write saw committed=%d uncommitted=%d, want 1 0", committed, uncommitted)
			}
		})
	}
	wg.Wait()
	release()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if n := eventCount(t, s, "blocker"); n != 1 {
		t.Errorf("blocker events after commit = %d, want 1", n)
	}
}

func TestWriteContext(t *testing.T) {
	hooks, waitQueued := queuedCounter(t)
	s := openStore(t, tempDB(t), Options{hooks: hooks, QueueSize: 1})

	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Write(canceled, func(tx *Tx) error { return appendEvent(tx, "c", 1) }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Write with a canceled context = %v", err)
	}

	release, wait := blockWriter(t, s)
	waitQueued(1)

	// Queued behind the blocker, canceled before it starts: no effect.
	ctx1, cancel1 := context.WithCancel(context.Background())
	res1 := make(chan error, 1)
	go func() {
		res1 <- s.Write(ctx1, func(tx *Tx) error { return appendEvent(tx, "c", 1) })
	}()
	waitQueued(2)
	cancel1()

	// The queue (size 1) is full: a Write waiting for room honours its ctx.
	ctx2, cancel2 := context.WithCancel(context.Background())
	waiting := &doneSignalCtx{Context: ctx2, called: make(chan struct{})}
	res2 := make(chan error, 1)
	go func() {
		res2 <- s.Write(waiting, func(tx *Tx) error { return appendEvent(tx, "c", 2) })
	}()
	select {
	case <-waiting.called:
	case <-time.After(failAfter):
		t.Fatal("Write did not wait for queue room")
	}
	cancel2()
	if err := <-res2; !errors.Is(err, context.Canceled) {
		t.Errorf("Write waiting for queue room = %v, want context.Canceled", err)
	}

	release()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if err := <-res1; !errors.Is(err, context.Canceled) {
		t.Errorf("queued Write canceled before it ran = %v, want context.Canceled", err)
	}
	if n := eventCount(t, s, "c"); n != 0 {
		t.Errorf("canceled writes left %d events", n)
	}
}

func TestReadContext(t *testing.T) {
	s := openStore(t, tempDB(t), Options{})
	ctx, cancel := context.WithCancel(testCtx(t))
	err := s.Read(ctx, func(q Querier) error {
		cancel()
		var n int
		return q.QueryRow(`SELECT COUNT(*) FROM run_events`).Scan(&n)
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Read canceled midway = %v, want context.Canceled", err)
	}
	if err := s.Read(ctx, func(Querier) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read with a canceled context = %v", err)
	}
	domain := errors.New("not found")
	if err := s.Read(testCtx(t), func(Querier) error { return domain }); err != domain {
		t.Fatalf("Read returning a domain error = %v, want it unchanged", err)
	}
}

func TestBackgroundCheckpoint(t *testing.T) {
	checkpointed := make(chan error, 16)
	path := tempDB(t)
	s := openStore(t, path, Options{hooks: &testHooks{checkpointed: func(err error) { checkpointed <- err }}})
	ctx := testCtx(t)
	sizeOf := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := sizeOf()
	payload := strings.Repeat("p", 512)
	// Sequential writes: one commit each.
	for i := range checkpointEvery {
		err := s.Write(ctx, func(tx *Tx) error {
			_, err := tx.Exec(`INSERT INTO run_events (session_id, run_id, seq, ts, type, payload) VALUES ('s', 'ckpt', ?, 0, 't', ?)`, i, payload)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-checkpointed:
		if err != nil {
			t.Fatalf("background checkpoint: %v", err)
		}
	case <-time.After(failAfter):
		t.Fatalf("no background checkpoint after %d commits", checkpointEvery)
	}
	if st := s.Stats(); st.Checkpoints < 1 || st.CheckpointFailures != 0 {
		t.Errorf("Stats = %+v, want a successful checkpoint", st)
	}
	// The committed pages reached the database file itself.
	if after := sizeOf(); after <= before+int64(len(payload))*checkpointEvery/2 {
		t.Errorf("database file grew from %d to %d bytes only", before, after)
	}
	if n := eventCount(t, s, "ckpt"); n != checkpointEvery {
		t.Errorf("events = %d, want %d", n, checkpointEvery)
	}
}

// doneSignalCtx reports the first call of Done, i.e. the moment a Write
// starts waiting on the context.
type doneSignalCtx struct {
	context.Context
	once   sync.Once
	called chan struct{}
}

func (c *doneSignalCtx) Done() <-chan struct{} {
	c.once.Do(func() { close(c.called) })
	return c.Context.Done()
}

func TestCloseDrainsQueuedWrites(t *testing.T) {
	hooks, waitQueued := queuedCounter(t)
	closing := make(chan struct{})
	hooks.closing = func() { close(closing) }
	path := tempDB(t)
	s, err := Open(testCtx(t), path, Options{hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	release, wait := blockWriter(t, s)
	const n = 8
	results := make(chan error, n)
	for i := range n {
		go func() {
			results <- s.Write(context.Background(), func(tx *Tx) error { return appendEvent(tx, "drain", i) })
		}()
	}
	waitQueued(1 + n)

	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background()) }()
	// Close stops accepting before it drains.
	select {
	case <-closing:
	case err := <-closed:
		t.Fatalf("Close returned before the blocked write finished: %v", err)
	case <-time.After(failAfter):
		t.Fatal("Close did not start")
	}
	if err := s.Write(context.Background(), func(*Tx) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Write during Close = %v, want ErrClosed", err)
	}
	if err := s.Read(context.Background(), func(Querier) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Read during Close = %v, want ErrClosed", err)
	}
	release()
	if err := wait(); err != nil {
		t.Errorf("blocking write: %v", err)
	}
	for range n {
		if err := <-results; err != nil {
			t.Errorf("queued write: %v", err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}

	s2 := openStore(t, path, Options{})
	if got := eventCount(t, s2, "drain"); got != n {
		t.Errorf("drained writes present = %d, want %d", got, n)
	}
}

func TestCloseWithExpiredContextAbandonsQueuedWrites(t *testing.T) {
	hooks, waitQueued := queuedCounter(t)
	path := tempDB(t)
	s, err := Open(testCtx(t), path, Options{hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	release, wait := blockWriter(t, s)
	const n = 4
	results := make(chan error, n)
	for i := range n {
		go func() {
			results <- s.Write(context.Background(), func(tx *Tx) error { return appendEvent(tx, "abandoned", i) })
		}()
	}
	waitQueued(1 + n)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- s.Close(ctx) }()
	select {
	case <-s.abandon:
	case <-time.After(failAfter):
		t.Fatal("Close with an expired context did not give up")
	}
	release()
	if err := wait(); err != nil {
		t.Errorf("running write must still commit: %v", err)
	}
	for range n {
		if err := <-results; !errors.Is(err, ErrClosed) {
			t.Errorf("abandoned write = %v, want ErrClosed", err)
		}
	}
	if err := <-closed; !errors.Is(err, context.Canceled) {
		t.Errorf("Close = %v, want context.Canceled", err)
	}
	s2 := openStore(t, path, Options{})
	if got := eventCount(t, s2, "blocker"); got != 1 {
		t.Errorf("running write lost: %d events", got)
	}
	if got := eventCount(t, s2, "abandoned"); got != 0 {
		t.Errorf("abandoned writes applied: %d events", got)
	}
}

// --- storage faults -------------------------------------------------------

func TestFaultBeginFailsIsPersistenceFailed(t *testing.T) {
	var fail atomic.Bool
	s := openStore(t, tempDB(t), Options{hooks: &testHooks{begin: func() error {
		if fail.Load() {
			return &os.PathError{Op: "read", Path: "store.sqlite", Err: syscall.EIO}
		}
		return nil
	}}})
	ctx := testCtx(t)
	fail.Store(true)
	err := s.Write(ctx, func(tx *Tx) error { return appendEvent(tx, "f", 1) })
	if !errors.Is(err, ErrPersistenceFailed) || errors.Is(err, ErrCommitOutcomeUnknown) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Write with failing begin = %v, want ErrPersistenceFailed wrapping EIO", err)
	}
	fail.Store(false)
	if s.Err() != nil {
		t.Errorf("store in fail-stop after a begin failure: %v", s.Err())
	}
	if err := s.Write(ctx, func(tx *Tx) error { return appendEvent(tx, "f", 2) }); err != nil {
		t.Fatalf("Write after the fault: %v", err)
	}
	if n := eventCount(t, s, "f"); n != 1 {
		t.Errorf("events = %d, want 1", n)
	}
}

func TestFaultCommitDiskFullHook(t *testing.T) {
	var fail atomic.Bool
	s := openStore(t, tempDB(t), Options{hooks: &testHooks{commit: func(commit func() error) error {
		if fail.Load() {
			return fmt.Errorf("write wal: %w", syscall.ENOSPC) // COMMIT never ran
		}
		return commit()
	}}})
	ctx := testCtx(t)
	fail.Store(true)
	err := s.Write(ctx, func(tx *Tx) error { return appendEvent(tx, "full", 1) })
	if !errors.Is(err, ErrCommitOutcomeUnknown) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Write on a full disk = %v, want ErrCommitOutcomeUnknown wrapping ENOSPC", err)
	}
	fail.Store(false)
	if err := s.Err(); err != nil {
		t.Fatalf("disk full must not put the store into fail-stop: %v", err)
	}
	if n := eventCount(t, s, "full"); n != 0 {
		t.Errorf("uncommitted write visible: %d events", n)
	}
	if err := s.Write(ctx, func(tx *Tx) error { return appendEvent(tx, "full", 2) }); err != nil {
		t.Fatalf("Write after space was freed: %v", err)
	}
	if st := s.Stats(); st.CommitFailures != 1 {
		t.Errorf("CommitFailures = %d, want 1", st.CommitFailures)
	}
}

func TestFaultFsyncFailsIsFailStop(t *testing.T) {
	var fail atomic.Bool
	path := tempDB(t)
	s := openStore(t, path, Options{hooks: &testHooks{commit: func(commit func() error) error {
		if fail.Load() {
			// The commit record reached the WAL but its fsync failed.
			if err := commit(); err != nil {
				return err
			}
			return &os.PathError{Op: "fsync", Path: path + "-wal", Err: syscall.EIO}
		}
		return commit()
	}}})
	ctx := testCtx(t)
	fail.Store(true)
	err := s.Write(ctx, func(tx *Tx) error { return appendEvent(tx, "fsync", 1) })
	if !errors.Is(err, ErrCommitOutcomeUnknown) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Write with failing fsync = %v, want ErrCommitOutcomeUnknown wrapping EIO", err)
	}
	fail.Store(false)
	if err := s.Err(); !errors.Is(err, ErrFailStop) || !errors.Is(err, ErrPersistenceFailed) {
		t.Fatalf("Err() = %v, want fail-stop", err)
	}
	err = s.Write(ctx, func(tx *Tx) error { return appendEvent(tx, "fsync", 2) })
	if !errors.Is(err, ErrPersistenceFailed) || !errors.Is(err, ErrFailStop) {
		t.Fatalf("Write in fail-stop = %v, want ErrPersistenceFailed/ErrFailStop", err)
	}
	// Reads keep working; the outcome of the unknown commit is visible to
	// a read-back (here it did land).
	if n := eventCount(t, s, "fsync"); n != 1 {
		t.Errorf("events = %d, want the unknown commit's 1", n)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, path, Options{})
	if err := s2.Write(ctx, func(tx *Tx) error { return appendEvent(tx, "fsync", 3) }); err != nil {
		t.Fatalf("Write after reopening: %v", err)
	}
}

func TestFaultStorageErrorInsideFunctionIsPersistenceFailed(t *testing.T) {
	s := openStore(t, tempDB(t), Options{})
	err := s.Write(testCtx(t), func(tx *Tx) error {
		return fmt.Errorf("write side file: %w", syscall.EIO)
	})
	if !errors.Is(err, ErrPersistenceFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("storage fault of a function = %v, want ErrPersistenceFailed", err)
	}
	domain := errors.New("revision conflict")
	if err := s.Write(testCtx(t), func(*Tx) error { return domain }); err != domain {
		t.Fatalf("domain error = %v, want it unchanged", err)
	}
}

// mountTmpfs mounts a tmpfs of the given size on a fresh directory and
// unmounts it when the test ends; it skips the test where mounting is not
// permitted.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs (%v); the hook-based fault tests cover this path", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

func remount(t *testing.T, dir string, readOnly bool) {
	t.Helper()
	flags := uintptr(syscall.MS_REMOUNT)
	if readOnly {
		flags |= syscall.MS_RDONLY
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", flags, ""); err != nil {
		t.Fatalf("remount %s (ro=%v): %v", dir, readOnly, err)
	}
}

func TestFaultDiskFullOnTmpfs(t *testing.T) {
	dir := mountTmpfs(t, "1m")
	path := filepath.Join(dir, "store.sqlite")
	// Ballast to delete once the disk is full.
	ballast := filepath.Join(dir, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 256<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, path, Options{})
	ctx := testCtx(t)
	payload := strings.Repeat("x", 16<<10)
	acked := 0
	var failure error
	for i := 0; i < 1000; i++ {
		err := s.Write(ctx, func(tx *Tx) error {
			_, err := tx.Exec(`INSERT INTO run_events (session_id, run_id, seq, ts, type, payload) VALUES ('s', 'big', ?, 0, 't', ?)`, i, payload)
			return err
		})
		if err != nil {
			failure = err
			break
		}
		acked++
	}
	if failure == nil {
		t.Fatal("a 1 MiB file system never filled up")
	}
	if !errors.Is(failure, ErrCommitOutcomeUnknown) && !errors.Is(failure, ErrPersistenceFailed) {
		t.Fatalf("Write on a full disk = %v, want commit_outcome_unknown or persistence_failed", failure)
	}
	t.Logf("disk full after %d writes: %v", acked, failure)
	if err := s.Err(); err != nil {
		t.Fatalf("disk full put the store into fail-stop: %v", err)
	}
	// Every acknowledged write is there, the failed one is not.
	if n := eventCount(t, s, "big"); n != acked {
		t.Errorf("events = %d, want the %d acknowledged", n, acked)
	}
	// Still full: writes keep failing cleanly.
	err := s.Write(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`INSERT INTO run_events (session_id, run_id, seq, ts, type, payload) VALUES ('s', 'big', -1, 0, 't', ?)`, payload)
		return err
	})
	if !errors.Is(err, ErrCommitOutcomeUnknown) && !errors.Is(err, ErrPersistenceFailed) {
		t.Fatalf("second Write on a full disk = %v", err)
	}
	// Free space and keep writing.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	err = s.Write(ctx, func(tx *Tx) error {
		if _, err := tx.Exec(`DELETE FROM run_events WHERE run_id = 'big' AND seq >= ?`, acked/2); err != nil {
			return err
		}
		return appendEvent(tx, "after-full", 1)
	})
	if err != nil {
		t.Fatalf("Write after freeing space: %v", err)
	}
	if n := eventCount(t, s, "big"); n != acked/2 {
		t.Errorf("events after delete = %d, want %d", n, acked/2)
	}
	checkIntegrity(t, s)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, path, Options{})
	checkIntegrity(t, s2)
	if n := eventCount(t, s2, "after-full"); n != 1 {
		t.Errorf("write after the fault lost across reopen: %d events", n)
	}
}

// TestFaultReadOnlyMedium opens databases on a read-only file system. (A
// file system cannot be turned read-only under an open store: the kernel
// refuses to remount while files are open for writing.)
func TestFaultReadOnlyMedium(t *testing.T) {
	dir := mountTmpfs(t, "4m")
	path := filepath.Join(dir, "store.sqlite")
	ctx := testCtx(t)
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, func(tx *Tx) error { return appendEvent(tx, "ro", 1) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	remount(t, dir, true)
	for _, p := range []string{path, filepath.Join(dir, "new.sqlite")} {
		_, err = Open(ctx, p, Options{})
		if !errors.Is(err, ErrPersistenceFailed) {
			t.Fatalf("Open(%s) on a read-only medium = %v, want ErrPersistenceFailed", filepath.Base(p), err)
		}
		t.Logf("open on a read-only medium: %v", err)
	}
	remount(t, dir, false)

	s = openStore(t, path, Options{})
	if n := eventCount(t, s, "ro"); n != 1 {
		t.Errorf("events = %d, want 1", n)
	}
	if err := s.Write(ctx, func(tx *Tx) error { return appendEvent(tx, "ro", 2) }); err != nil {
		t.Fatalf("Write after the medium became writable: %v", err)
	}
}

func TestFaultReadOnlyDatabaseFile(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores file permissions; TestFaultReadOnlyMedium covers read-only storage")
	}
	path := tempDB(t)
	s := openStore(t, path, Options{})
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	_, err := Open(testCtx(t), path, Options{})
	if !errors.Is(err, ErrPersistenceFailed) {
		t.Fatalf("Open of a read-only file = %v, want ErrPersistenceFailed", err)
	}
}

func checkIntegrity(t *testing.T, s *Store) {
	t.Helper()
	var res string
	if err := s.Read(testCtx(t), func(q Querier) error {
		return q.QueryRow(`PRAGMA integrity_check`).Scan(&res)
	}); err != nil {
		t.Fatalf("integrity_check: %v", err)
	}
	if res != "ok" {
		t.Fatalf("integrity_check = %q", res)
	}
}

// --- crash safety -----------------------------------------------------------

// crashChild is the child process of TestCrashSafety: concurrent writers,
// each write inserting two rows, each id printed only after Write returned
// nil. It runs until it is killed.
func crashChild(path string) int {
	iteration, _ := strconv.Atoi(os.Getenv(crashIterationEnv))
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 3
	}
	var mu sync.Mutex
	for w := range 16 {
		go func() {
			for i := 0; ; i++ {
				id := iteration*1_000_000_000 + w*1_000_000 + i
				run := strconv.Itoa(id)
				err := s.Write(ctx, func(tx *Tx) error {
					if err := crashAppend(tx, run, 1); err != nil {
						return err
					}
					return crashAppend(tx, run, 2)
				})
				if err != nil {
					fmt.Fprintln(os.Stderr, "write:", err)
					os.Exit(4)
				}
				mu.Lock()
				_, err = os.Stdout.WriteString(run + "\n")
				mu.Unlock()
				if err != nil {
					os.Exit(5)
				}
			}
		}()
	}
	// The parent kills this process; leave on its own if it never does.
	time.Sleep(failAfter)
	return 6
}

func crashAppend(tx *Tx, run string, seq int) error {
	_, err := tx.Exec(`INSERT INTO run_events (session_id, run_id, seq, ts, type, payload) VALUES ('crash', ?, ?, 0, 'pair', '{}')`, run, seq)
	return err
}

func TestCrashSafety(t *testing.T) {
	iterations, acks := 10, 300
	if raceEnabled {
		acks = 60
	}
	path := tempDB(t)
	// Create the schema once; every child reopens the same database.
	s, err := Open(testCtx(t), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	allAcked := map[string]bool{}
	for it := range iterations {
		acked := runCrashChild(t, path, it, acks)
		for _, id := range acked {
			allAcked[id] = true
		}
		verifyCrashDatabase(t, path, allAcked)
		if t.Failed() {
			t.Fatalf("iteration %d failed", it)
		}
	}
}

// runCrashChild starts the writer child, SIGKILLs it after it acknowledged
// n writes and returns every id it acknowledged.
func runCrashChild(t *testing.T, path string, iteration, n int) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path, crashIterationEnv+"="+strconv.Itoa(iteration+1))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(failAfter, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	var acked []string
	r := bufio.NewReader(out)
	killed := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			// A line without its newline was cut by the kill: not an
			// acknowledgement.
			if err != io.EOF {
				t.Errorf("read child output: %v", err)
			}
			break
		}
		acked = append(acked, strings.TrimSuffix(line, "\n"))
		if len(acked) == n && !killed {
			killed = true
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatalf("kill child: %v", err)
			}
		}
	}
	err = cmd.Wait()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v (stderr: %s), want killed by SIGKILL", err, stderr.String())
	}
	if !killed || len(acked) < n {
		t.Fatalf("child acknowledged %d writes before it ended, want %d", len(acked), n)
	}
	return acked
}

// verifyCrashDatabase reopens the database after a crash and checks that
// every acknowledged write is present, no write is half applied and the
// file is intact.
func verifyCrashDatabase(t *testing.T, path string, acked map[string]bool) {
	t.Helper()
	s := openStore(t, path, Options{})
	counts := map[string]int{}
	err := s.Read(testCtx(t), func(q Querier) error {
		rows, err := q.Query(`SELECT run_id, COUNT(*) FROM run_events WHERE session_id = 'crash' GROUP BY run_id`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				return err
			}
			counts[id] = n
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	for id := range acked {
		if counts[id] != 2 {
			t.Errorf("acknowledged write %s has %d of 2 rows", id, counts[id])
		}
	}
	for id, n := range counts {
		if n != 2 {
			t.Errorf("write %s is half applied: %d of 2 rows", id, n)
		}
	}
	checkIntegrity(t, s)
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}
