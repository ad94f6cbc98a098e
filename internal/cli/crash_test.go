package cli_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// crashRounds is how many times the host is killed mid-burst (more with
// -count or by raising it by hand).
const crashRounds = 5

// sessionInput is the create input of a session id: every attempted create
// is known, so any session found after a crash can be checked field by
// field against what its client sent.
func sessionInput(id string) protocol.SessionCreateInput {
	return protocol.SessionCreateInput{
		SessionID: id,
		Workspace: protocol.HostPathWorkspace("/work/" + id),
		Name:      "crash " + id,
		Labels:    []string{"crash", "round"},
	}
}

// TestCrashDuringConcurrentWritesLosesNothingAcknowledged SIGKILLs the host
// while several clients create sessions as fast as they can, restarts it,
// and checks that every acknowledged create is present, every session
// present is complete and exactly what its client asked for, and SQLite's
// integrity check passes. Durable means acknowledged: a create is
// acknowledged only by its ok response.
func TestCrashDuringConcurrentWritesLosesNothingAcknowledged(t *testing.T) {
	rounds := crashRounds
	if testing.Short() {
		rounds = 2
	}
	for round := range rounds {
		t.Run(fmt.Sprintf("round-%d", round), func(t *testing.T) { crashRound(t, round) })
	}
}

func crashRound(t *testing.T, round int) {
	s := newSandbox(t)
	root, capability := newRoot(t)
	p := s.serve(root, "--idle-grace", "0")

	const clients = 4
	var mu sync.Mutex
	acked := map[string]bool{}
	ackedCh := make(chan struct{}, 1<<16)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		conn, _, _ := connect(t, root)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("r%d-c%d-%d", round, c, i)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := conn.Call(ctx, protocol.OpSessionCreate, sessionInput(id))
				cancel()
				if err != nil {
					return // the host was killed
				}
				mu.Lock()
				acked[id] = true
				mu.Unlock()
				ackedCh <- struct{}{}
			}
		}()
	}
	// Kill once the burst is well under way, at a different point each round.
	for range 150 + 97*round {
		select {
		case <-ackedCh:
		case <-time.After(10 * time.Second):
			t.Fatal("the clients stopped making progress")
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.waitExit()
	close(stop)
	wg.Wait()

	// Restart and look for every acknowledged session.
	p2 := s.serve(root, "--idle-grace", "0")
	conn, _, _ := connect(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mu.Lock()
	want := len(acked)
	mu.Unlock()
	found := map[string]protocol.SessionSummary{}
	in := protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogListStart, IncludeArchived: true}
	for {
		res, err := conn.Call(ctx, protocol.OpSessionCatalogQuery, in)
		if err != nil {
			t.Fatalf("catalog query after restart: %v", err)
		}
		page := res.(protocol.SessionCatalogQueryResult)
		if page.Kind != protocol.SessionCatalogKindPage {
			t.Fatalf("catalog result %s", page.Kind)
		}
		for _, sum := range page.Sessions {
			found[sum.SessionID] = sum
		}
		if page.NextCursor == nil {
			break
		}
		in = protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogListContinue, Revision: page.Revision, Cursor: *page.NextCursor}
	}
	for id := range acked {
		if _, ok := found[id]; !ok {
			t.Errorf("acknowledged session %s is missing after the crash", id)
		}
	}
	for id, sum := range found {
		exp := sessionInput(id)
		if sum.Workspace != exp.Workspace || sum.Name != exp.Name || len(sum.Labels) != 2 {
			t.Errorf("session %s is not what its client created: %+v", id, sum)
		}
	}
	t.Logf("round %d: %d acknowledged, %d present after restart", round, want, len(found))

	// A clean stop, then SQLite's own integrity check.
	p2.kill()
	if code := p2.waitExit(); code != 0 {
		t.Fatalf("host exit code %d", code)
	}
	st, err := store.Open(ctx, filepath.Join(capability.Path(), domain.DatabaseFile), store.Options{Migrations: domain.Migrations})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	var check string
	if err := st.Read(ctx, func(q store.Querier) error {
		return q.QueryRow(`PRAGMA integrity_check`).Scan(&check)
	}); err != nil {
		t.Fatal(err)
	}
	if check != "ok" {
		t.Fatalf("integrity_check = %q", check)
	}
}
