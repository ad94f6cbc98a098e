package sessions

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// seedSessions inserts n sessions with realistic settings in one write:
// every third shares its lastUsedAt with a neighbour and every tenth is
// archived.
func seedSessions(tb testing.TB, st *store.Store, n int) {
	tb.Helper()
	err := st.Write(testCtx(tb), func(tx *store.Tx) error {
		for i := range n {
			at := int64(1_700_000_000_000 + (i/3)*1000)
			doc, err := marshalJSON(sessionDoc{
				Workspace:      ws(fmt.Sprintf("/home/user/projects/project-%d", i%50)),
				Name:           fmt.Sprintf("Refactor the storage layer, part %d", i),
				Labels:         []string{"backend", fmt.Sprintf("sprint-%d", i%12)},
				ModelTarget:    storedModelTarget{Kind: "default"},
				PermissionMode: "ask",
			})
			if err != nil {
				return err
			}
			var archived any
			if i%10 == 0 {
				archived = at + 1
			}
			if _, err := tx.Exec(`INSERT INTO sessions (`+headerColumns+`) VALUES (?, ?, ?, 'active', ?, ?)`,
				fmt.Sprintf("session-%05d", i), at, at, archived, doc); err != nil {
				return err
			}
		}
		return bumpCatalog(tx)
	})
	if err != nil {
		tb.Fatal(err)
	}
}

func percentileMicros(d []time.Duration, p float64) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	i := min(len(s)-1, int(float64(len(s))*p))
	return float64(s[i].Nanoseconds()) / 1e3
}

// BenchmarkCatalogQueryPage10k measures catalog pages of a 10,000 session
// catalog: each iteration serves one list_start and one list_continue from
// a position spread over the whole catalog, and encodes both pages as the
// host does. p50 and p99 are per page, in microseconds, of the handler
// alone; p99 "+encode" adds the encoding of the result.
func BenchmarkCatalogQueryPage10k(b *testing.B) {
	f := newFixture(b)
	seedSessions(b, f.st, 10_000)
	handler := f.svc.Handlers()[protocol.OpSessionCatalogQuery]
	spec := lookup(b, protocol.OpSessionCatalogQuery)
	ctx := context.Background()
	query := func(in protocol.SessionCatalogQueryInput) protocol.SessionCatalogQueryResult {
		out := handler(ctx, &host.Call{Operation: spec, Input: in})
		if out.Err != nil {
			b.Fatal(out.Err)
		}
		return out.Result.(protocol.SessionCatalogQueryResult)
	}
	// encode is what the host does with the result next.
	encode := func(page protocol.SessionCatalogQueryResult) {
		if _, err := protocol.Marshal(page); err != nil {
			b.Fatal(err)
		}
	}
	// The cursors of every page, with and without archived sessions.
	type position struct {
		rev    int64
		cursor string
	}
	var positions []position
	for _, all := range []bool{false, true} {
		page := query(protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogListStart, IncludeArchived: all})
		for page.NextCursor != nil {
			positions = append(positions, position{page.Revision, *page.NextCursor})
			page = query(protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogListContinue, Revision: page.Revision, Cursor: *page.NextCursor})
		}
	}
	lat := make([]time.Duration, 0, 2*b.N)     // the handler
	withEnc := make([]time.Duration, 0, 2*b.N) // the handler and the encoding
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		page := query(protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogListStart, IncludeArchived: i%2 == 0})
		lat = append(lat, time.Since(start))
		encode(page)
		withEnc = append(withEnc, time.Since(start))
		if len(page.Sessions) != protocol.SessionCatalogPageMaxSessions {
			b.Fatalf("first page has %d sessions", len(page.Sessions))
		}
		pos := positions[(i*7919)%len(positions)]
		start = time.Now()
		page = query(protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogListContinue, Revision: pos.rev, Cursor: pos.cursor})
		lat = append(lat, time.Since(start))
		encode(page)
		withEnc = append(withEnc, time.Since(start))
		if page.Kind != protocol.SessionCatalogKindPage || len(page.Sessions) == 0 {
			b.Fatalf("continue page = %+v", page)
		}
	}
	b.StopTimer()
	b.ReportMetric(percentileMicros(lat, 0.50), "p50-µs/page")
	b.ReportMetric(percentileMicros(lat, 0.99), "p99-µs/page")
	b.ReportMetric(percentileMicros(withEnc, 0.99), "p99-µs/page+encode")
}

// realisticText returns about n bytes of prose.
func realisticText(seed, n int) string {
	words := strings.Fields(`the session store keeps every transcript message in one table ordered by
		its sequence number so that a client can page through a long conversation without
		loading it whole; tool calls carry a short preview of their output and the assistant
		text is split into parts when it grows beyond sixteen kilobytes`)
	var sb strings.Builder
	for i := seed; sb.Len() < n; i++ {
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(words[i%len(words)])
	}
	return sb.String()[:n]
}

// BenchmarkTranscriptStoreSize appends 1,000 transcript messages of ~400
// bytes of text (user messages and assistant replies, one write per turn,
// each kept in the run record and in the transcript) and reports the size
// of the database files once the store is closed (which checkpoints the
// WAL into the database).
func BenchmarkTranscriptStoreSize(b *testing.B) {
	const messages, textBytes = 1000, 400
	var dbBytes int64
	for i := range b.N {
		dir := filepath.Join(b.TempDir(), fmt.Sprint(i))
		if err := os.Mkdir(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		path := filepath.Join(dir, "store.sqlite")
		st := openTestStore(b, path)
		gate := lane.New()
		svc := New(st, gate, Options{})
		out := svc.Handlers()[protocol.OpSessionCreate](testCtx(b), &host.Call{
			Operation: lookup(b, protocol.OpSessionCreate),
			Input:     protocol.SessionCreateInput{SessionID: "7f0c6d1e-3b2a-4c5d-8e9f-0a1b2c3d4e5f", Workspace: ws("/home/user/projects/maka")},
		})
		if out.Err != nil {
			b.Fatal(out.Err)
		}
		sid := "7f0c6d1e-3b2a-4c5d-8e9f-0a1b2c3d4e5f"
		for turn := range messages / 2 {
			turnID := fmt.Sprintf("turn-%08d-2c3d-4e5f-8a9b-0c1d2e3f4a5b", turn)
			runID := fmt.Sprintf("run-%08d-2c3d-4e5f-8a9b-0c1d2e3f4a5b", turn)
			ts := int64(1_700_000_000_000 + turn*1000)
			evs := []RunEvent{
				mustEvent(b, 1, ts, EventUserMessage, MessagePayload{TurnID: turnID, MessageID: fmt.Sprintf("msg-%08d-user-4e5f-8a9b-0c1d2e3f", turn), Text: realisticText(turn, textBytes)}),
				mustEvent(b, 2, ts+1, EventTextComplete, MessagePayload{TurnID: turnID, MessageID: fmt.Sprintf("msg-%08d-asst-4e5f-8a9b-0c1d2e3f", turn), Text: realisticText(turn+3, textBytes)}),
			}
			if err := svc.AppendRunEvents(testCtx(b), sid, runID, evs); err != nil {
				b.Fatal(err)
			}
		}
		if err := gate.Close(testCtx(b)); err != nil {
			b.Fatal(err)
		}
		if err := st.Close(testCtx(b)); err != nil {
			b.Fatal(err)
		}
		dbBytes = 0
		for _, suffix := range []string{"", "-wal"} {
			if fi, err := os.Stat(path + suffix); err == nil {
				dbBytes += fi.Size()
			}
		}
	}
	b.ReportMetric(float64(dbBytes)*1000/messages, "db-bytes/1000msgs")
	b.ReportMetric(float64(textBytes*1000), "text-bytes/1000msgs")
}
