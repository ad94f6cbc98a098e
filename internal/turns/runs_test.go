package turns

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/tasks"
	"github.com/maka-agent/maka/protocol"
)

// TestRunStatusMachine walks one run through the machine of runs.go and
// checks what each verb may and may not change, through the snapshot the
// wire shows.
func TestRunStatusMachine(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "maka.db"), store.Options{Migrations: []store.Migration{sessions.Migration, tasks.Migration, Migration}})
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
		var snap protocol.TurnSnapshot
		if err := st.Read(ctx, func(q store.Querier) error {
			var err error
			snap, err = snapshot(q, admission{SessionID: "s1", TurnID: "t1", RunID: "r1"})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return snap.Status
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
	write(func(tx *store.Tx) error { return beginRunRow(tx, "r1", "s1", "t1", 1) })
	verb(MarkRunning, false) // already running
	verb(MarkWaiting, true)
	verb(MarkWaiting, true) // a second prompt while waiting
	if status() != protocol.TurnWaitingForUser {
		t.Fatalf("after MarkWaiting: %s", status())
	}
	verb(MarkRunning, true)
	write(func(tx *store.Tx) error {
		return terminateRunRow(tx, "r1", runTerminal{Status: string(protocol.TurnCompleted), EventID: "e9", At: 3})
	})
	if status() != protocol.TurnCompleted {
		t.Fatalf("after Terminate: %s", status())
	}
	verb(MarkWaiting, false)
	verb(MarkRunning, false)
	if err := st.Write(ctx, func(tx *store.Tx) error {
		return terminateRunRow(tx, "r1", runTerminal{Status: string(protocol.TurnFailed), EventID: "e10", At: 4})
	}); err == nil {
		t.Fatal("a terminated run was terminated again")
	}
	if status() != protocol.TurnCompleted {
		t.Fatalf("a second terminal write changed the run: %s", status())
	}
}
