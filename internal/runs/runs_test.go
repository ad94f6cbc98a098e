package runs

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/tasks"
	"github.com/maka-agent/maka/protocol"
)

// TestRunStatusMachine walks one run through the machine of runs.go and
// checks what each verb may and may not change.
func TestRunStatusMachine(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "maka.db"), store.Options{Migrations: []store.Migration{sessions.Migration, tasks.Migration, {Version: 4, Up: CreateSchema}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	write := func(f func(tx *store.Tx) error) {
		t.Helper()
		if err := st.Write(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	status := func() protocol.TurnStatus {
		t.Helper()
		var status string
		err := st.Read(ctx, func(q store.Querier) error {
			return q.QueryRow(`SELECT status FROM runs WHERE run_id = 'r1'`).Scan(&status)
		})
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return protocol.TurnAdmitted
		case err != nil:
			t.Fatal(err)
		}
		return protocol.TurnStatus(status)
	}
	verb := func(f func(*store.Tx, string, int64) (bool, error), want bool) {
		t.Helper()
		write(func(tx *store.Tx) error {
			changed, err := f(tx, "r1", 2)
			if changed != want {
				t.Errorf("changed %v, want %v (run %s)", changed, want, status())
			}
			return err
		})
	}
	if status() != protocol.TurnAdmitted {
		t.Fatalf("before the run: %s", status())
	}
	verb(MarkWaiting, false) // no run yet
	write(func(tx *store.Tx) error { return Begin(tx, "r1", "s1", "t1", 1) })
	verb(MarkRunning, false) // already running
	verb(MarkWaiting, true)
	verb(MarkWaiting, true) // a second prompt while waiting
	if status() != protocol.TurnWaitingForUser {
		t.Fatalf("after MarkWaiting: %s", status())
	}
	verb(MarkRunning, true)
	write(func(tx *store.Tx) error {
		return Terminate(tx, "r1", Terminal{Status: string(protocol.TurnCompleted), EventID: "e9", At: 3})
	})
	if status() != protocol.TurnCompleted {
		t.Fatalf("after Terminate: %s", status())
	}
	verb(MarkWaiting, false)
	verb(MarkRunning, false)
	if err := st.Write(ctx, func(tx *store.Tx) error {
		return Terminate(tx, "r1", Terminal{Status: string(protocol.TurnFailed), EventID: "e10", At: 4})
	}); err == nil {
		t.Fatal("a terminated run was terminated again")
	}
	if status() != protocol.TurnCompleted {
		t.Fatalf("a second terminal write changed the run: %s", status())
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
