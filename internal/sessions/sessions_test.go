package sessions

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/maka-agent/maka/internal/continuity"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// failAfter bounds every wait so that a broken service fails the test
// instead of hanging it. It never orders events.
const failAfter = 20 * time.Second

const testEpoch = "epoch-1"

func testCtx(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	tb.Cleanup(cancel)
	return ctx
}

// change is one OnChange call with the projection read at that moment.
type change struct {
	sessionID  string
	found      bool
	isArchived bool
	lastUsedAt int64
}

type fixture struct {
	t    testing.TB
	path string
	st   *store.Store
	gate *lane.Gate
	svc  *Service

	clock atomic.Int64 // Unix ms

	mu      sync.Mutex
	mode    string          // DefaultPermissionMode
	busy    map[string]bool // ActiveRoot
	changes []change
}

func openTestStore(tb testing.TB, path string) *store.Store {
	tb.Helper()
	st, err := store.Open(testCtx(tb), path, store.Options{Migrations: []store.Migration{Migration}})
	if err != nil {
		tb.Fatalf("open store: %v", err)
	}
	return st
}

func newFixture(tb testing.TB, tweak ...func(*fixture, *Options)) *fixture {
	tb.Helper()
	f := &fixture{t: tb, path: filepath.Join(tb.TempDir(), "store.sqlite"), mode: "execute", busy: map[string]bool{}}
	f.st = openTestStore(tb, f.path)
	f.gate = lane.New()
	f.clock.Store(1_700_000_000_000)
	opts := Options{
		Now: func() time.Time { return time.UnixMilli(f.clock.Load()) },
		DefaultPermissionMode: func() string {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.mode
		},
		OnChange: func(ctx context.Context, sessionID string) {
			// The change must be readable (durable) when OnChange runs.
			p, found, err := f.readProjection(ctx, sessionID)
			if err != nil {
				tb.Errorf("ReadProjection in OnChange: %v", err)
			}
			f.mu.Lock()
			f.changes = append(f.changes, change{sessionID, found, p.Session.IsArchived, p.Session.LastUsedAt})
			f.mu.Unlock()
		},
		ActiveRoot: func(sessionID string) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.busy[sessionID]
		},
	}
	for _, tw := range tweak {
		tw(f, &opts)
	}
	f.svc = New(f.st, f.gate, opts)
	tb.Cleanup(func() {
		ctx := context.Background()
		if err := f.gate.Close(ctx); err != nil {
			tb.Errorf("close gate: %v", err)
		}
		if err := f.st.Close(ctx); err != nil {
			tb.Errorf("close store: %v", err)
		}
	})
	return f
}

func (f *fixture) setMode(m string) {
	f.mu.Lock()
	f.mode = m
	f.mu.Unlock()
}

func (f *fixture) setBusy(sessionID string, busy bool) {
	f.mu.Lock()
	f.busy[sessionID] = busy
	f.mu.Unlock()
}

func (f *fixture) takeChanges() []change {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.changes
	f.changes = nil
	return out
}

func lookup(tb testing.TB, op protocol.Operation) *protocol.OperationSpec {
	tb.Helper()
	spec, ok := protocol.Lookup(string(op))
	if !ok {
		tb.Fatalf("no spec for %s", op)
	}
	return spec
}

// checkOutcome asserts that an outcome is something the host may send: a
// declared error code, or a result that passes the operation's output codec
// after a round trip through the wire encoding.
func checkOutcome(tb testing.TB, spec *protocol.OperationSpec, out host.Outcome) {
	tb.Helper()
	if out.Err != nil {
		if out.Result != nil {
			tb.Fatalf("%s: outcome has both a result and error %v", spec.Key, out.Err)
		}
		if !spec.Declares(out.Err.Code) {
			tb.Fatalf("%s: undeclared error %v", spec.Key, out.Err)
		}
		return
	}
	b, err := protocol.Marshal(out.Result)
	if err != nil {
		tb.Fatalf("%s: marshal result: %v", spec.Key, err)
	}
	v, err := protocol.Parse(b)
	if err != nil {
		tb.Fatalf("%s: parse result: %v", spec.Key, err)
	}
	if _, err := spec.DecodeOutput(v); err != nil {
		tb.Fatalf("%s: result fails the output codec: %v\n%.2000s", spec.Key, err, b)
	}
}

func (f *fixture) call(op protocol.Operation, input any) host.Outcome {
	f.t.Helper()
	spec := lookup(f.t, op)
	out := f.svc.Handlers()[op](testCtx(f.t), &host.Call{RequestID: "req", Operation: spec, Input: input})
	checkOutcome(f.t, spec, out)
	return out
}

func expectErr(tb testing.TB, out host.Outcome, code protocol.ErrorCode, message string) {
	tb.Helper()
	if out.Err == nil {
		tb.Fatalf("outcome = %+v, want error %s", out.Result, code)
	}
	if out.Err.Code != code || (message != "" && out.Err.Message != message) {
		tb.Fatalf("error = %v, want %s %q", out.Err, code, message)
	}
}

func expectOK[T any](tb testing.TB, out host.Outcome) T {
	tb.Helper()
	if out.Err != nil {
		tb.Fatalf("unexpected error %v", out.Err)
	}
	r, ok := out.Result.(T)
	if !ok {
		tb.Fatalf("result is %T, want %T", out.Result, *new(T))
	}
	return r
}

func ws(p string) protocol.Workspace { return protocol.HostPathWorkspace(p) }

func (f *fixture) create(in protocol.SessionCreateInput) protocol.SessionSummary {
	f.t.Helper()
	return expectOK[protocol.SessionSummary](f.t, f.call(protocol.OpSessionCreate, in))
}

func (f *fixture) createN(n int, id func(i int) string, tick func(i int) int64) {
	f.t.Helper()
	for i := range n {
		f.clock.Add(tick(i))
		f.create(protocol.SessionCreateInput{SessionID: id(i), Workspace: ws("/work/p")})
	}
}

func (f *fixture) catalog(in protocol.SessionCatalogQueryInput) protocol.SessionCatalogQueryResult {
	f.t.Helper()
	return expectOK[protocol.SessionCatalogQueryResult](f.t, f.call(protocol.OpSessionCatalogQuery, in))
}

func (f *fixture) listStart(includeArchived bool) protocol.SessionCatalogQueryResult {
	f.t.Helper()
	return f.catalog(protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogListStart, IncludeArchived: includeArchived})
}

func (f *fixture) listContinue(rev int64, cursor string) protocol.SessionCatalogQueryResult {
	f.t.Helper()
	return f.catalog(protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogListContinue, Revision: rev, Cursor: cursor})
}

// walk lists the whole catalog and returns its pages.
func (f *fixture) walk(includeArchived bool) []protocol.SessionCatalogQueryResult {
	f.t.Helper()
	page := f.listStart(includeArchived)
	pages := []protocol.SessionCatalogQueryResult{page}
	for page.NextCursor != nil {
		if len(pages) > 10_000 {
			f.t.Fatal("catalog walk does not end")
		}
		page = f.listContinue(page.Revision, *page.NextCursor)
		if page.Kind != protocol.SessionCatalogKindPage {
			f.t.Fatalf("list_continue = %+v", page)
		}
		pages = append(pages, page)
	}
	return pages
}

func ids(pages []protocol.SessionCatalogQueryResult) []string {
	var out []string
	for _, p := range pages {
		for _, s := range p.Sessions {
			out = append(out, s.SessionID)
		}
	}
	return out
}

// --- session.create ----------------------------------------------------------

func TestCreateAppliesDefaultsAndCanonicalizes(t *testing.T) {
	f := newFixture(t)
	got := f.create(protocol.SessionCreateInput{
		SessionID: "s1", Workspace: ws("/work/a"), Name: "First",
		Labels: []string{"zeta", "alpha", "mid", "alpha"},
	})
	at := f.clock.Load()
	want := protocol.SessionSummary{
		SessionID: "s1", Name: "First", Workspace: ws("/work/a"), Labels: []string{"alpha", "mid", "zeta"},
		ModelTarget: protocol.ModelTarget{Kind: protocol.ModelTargetDefault}, PermissionMode: "execute",
		Status: protocol.SessionActive, CreatedAt: at, LastUsedAt: at,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("create = %+v\nwant %+v", got, want)
	}
	res := f.catalog(protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogGet, SessionID: "s1"})
	if res.Session == nil || !reflect.DeepEqual(*res.Session, want) {
		t.Fatalf("get = %+v, want the created session", res.Session)
	}
	if ch := f.takeChanges(); len(ch) != 1 || ch[0].sessionID != "s1" || !ch[0].found {
		t.Fatalf("OnChange calls = %+v, want one for s1 after the session was durable", ch)
	}
	if rev := f.listStart(true).Revision; rev != 1 {
		t.Fatalf("catalog revision after one create = %d, want 1", rev)
	}
}

func TestCreateIsIdempotent(t *testing.T) {
	f := newFixture(t)
	explicit := protocol.ModelTarget{Kind: protocol.ModelTargetExplicit, ConnectionSlug: "openai", Model: "gpt-5"}
	in := protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w"), Labels: []string{"b", "a"}, ModelTarget: &explicit}
	first := f.create(in)
	f.takeChanges()
	rev := f.listStart(true).Revision

	f.clock.Add(5000)
	same := []protocol.SessionCreateInput{
		in,
		// The canonical form of the same input.
		{SessionID: "s1", Workspace: ws("/w"), Labels: []string{"a", "b"}, ModelTarget: &explicit, PermissionMode: "execute"},
	}
	for i, in := range same {
		if got := f.create(in); !reflect.DeepEqual(got, first) {
			t.Fatalf("replay %d = %+v, want the stored %+v", i, got, first)
		}
	}
	// The policy default changed: a replay that omits permissionMode still
	// names the stored session, whose mode was the default.
	f.setMode("bypass")
	if got := f.create(in); !reflect.DeepEqual(got, first) {
		t.Fatalf("replay after a default change = %+v, want %+v", got, first)
	}
	if ch := f.takeChanges(); len(ch) != 0 {
		t.Fatalf("replays changed something: %+v", ch)
	}
	if got := f.listStart(true).Revision; got != rev {
		t.Fatalf("catalog revision after replays = %d, want %d", got, rev)
	}

	// A session created without defaults: omitting the mode now means the
	// current default, which differs.
	f.create(protocol.SessionCreateInput{SessionID: "s2", Workspace: ws("/w"), PermissionMode: "ask"})
	expectErr(t, f.call(protocol.OpSessionCreate, protocol.SessionCreateInput{SessionID: "s2", Workspace: ws("/w")}),
		protocol.ErrOperationConflict, MessageSessionConflict)
	f.setMode("ask")
	f.create(protocol.SessionCreateInput{SessionID: "s2", Workspace: ws("/w")})
}

func TestCreateConflicts(t *testing.T) {
	f := newFixture(t)
	target := protocol.ModelTarget{Kind: protocol.ModelTargetExplicit, ConnectionSlug: "openai", Model: "gpt-5"}
	base := protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w"), Name: "n", Labels: []string{"a"}}
	f.create(base)
	f.takeChanges()
	variants := map[string]func(in *protocol.SessionCreateInput){
		"workspace":      func(in *protocol.SessionCreateInput) { in.Workspace = ws("/other") },
		"name":           func(in *protocol.SessionCreateInput) { in.Name = "m" },
		"no name":        func(in *protocol.SessionCreateInput) { in.Name = "" },
		"labels":         func(in *protocol.SessionCreateInput) { in.Labels = []string{"a", "b"} },
		"no labels":      func(in *protocol.SessionCreateInput) { in.Labels = nil },
		"modelTarget":    func(in *protocol.SessionCreateInput) { in.ModelTarget = &target },
		"permissionMode": func(in *protocol.SessionCreateInput) { in.PermissionMode = "ask" },
	}
	for name, mutate := range variants {
		in := base
		mutate(&in)
		out := f.call(protocol.OpSessionCreate, in)
		if out.Err == nil || out.Err.Code != protocol.ErrOperationConflict || out.Err.Message != MessageSessionConflict {
			t.Fatalf("create with another %s = %+v %v, want operation_conflict", name, out.Result, out.Err)
		}
	}
	if ch := f.takeChanges(); len(ch) != 0 {
		t.Fatalf("conflicts changed something: %+v", ch)
	}
	if got := f.catalog(protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogGet, SessionID: "s1"}); got.Session.Name != "n" {
		t.Fatalf("stored session changed: %+v", got.Session)
	}
}

func TestCreateRejectsInvalidInput(t *testing.T) {
	f := newFixture(t)
	for name, in := range map[string]protocol.SessionCreateInput{
		"relative workspace": {SessionID: "s1", Workspace: ws("work")},
		"bad session id":     {SessionID: "s 1", Workspace: ws("/w")},
		"long label":         {SessionID: "s1", Workspace: ws("/w"), Labels: []string{strings.Repeat("x", protocol.SessionLabelMaxLen+1)}},
		"too many labels":    {SessionID: "s1", Workspace: ws("/w"), Labels: strings.Fields("a b c d e f g h i j k l m n o p q")},
		"bad mode":           {SessionID: "s1", Workspace: ws("/w"), PermissionMode: "root"},
	} {
		t.Run(name, func(t *testing.T) {
			f.t = t
			expectErr(t, f.call(protocol.OpSessionCreate, in), protocol.ErrInvalidRequest, MessageInvalidCreateInput)
		})
	}
	f.t = t
	if got := f.listStart(true); len(got.Sessions) != 0 || got.Revision != 0 {
		t.Fatalf("invalid creates stored something: %+v", got)
	}
}

func TestCreateConcurrentSameSession(t *testing.T) {
	f := newFixture(t)
	const n = 8
	outs := make([]host.Outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			in := protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")}
			if i%2 == 1 {
				in.Name = "other"
			}
			spec := lookup(t, protocol.OpSessionCreate)
			outs[i] = f.svc.Handlers()[protocol.OpSessionCreate](testCtx(t), &host.Call{Operation: spec, Input: in})
		})
	}
	wg.Wait()
	// Whichever create ran first decides; every other one either replays
	// it or conflicts.
	var winner *protocol.SessionSummary
	for _, out := range outs {
		if out.Err == nil {
			s := out.Result.(protocol.SessionSummary)
			if winner != nil && !reflect.DeepEqual(*winner, s) {
				t.Fatalf("two different sessions created: %+v and %+v", *winner, s)
			}
			winner = &s
		}
	}
	if winner == nil {
		t.Fatal("no create succeeded")
	}
	for i, out := range outs {
		sameName := (i%2 == 1) == (winner.Name == "other")
		if sameName != (out.Err == nil) {
			t.Fatalf("create %d = %+v %v (winner name %q)", i, out.Result, out.Err, winner.Name)
		}
	}
	if ch := f.takeChanges(); len(ch) != 1 {
		t.Fatalf("OnChange calls = %d, want 1", len(ch))
	}
}

// --- session.catalog.query ---------------------------------------------------

func TestCatalogPagingEdges(t *testing.T) {
	for _, n := range []int{0, 1, 32, 33, 64, 65} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := newFixture(t)
			f.createN(n, func(i int) string { return fmt.Sprintf("s%03d", i) }, func(int) int64 { return 1 })
			pages := f.walk(false)
			wantPages := max(1, (n+31)/32)
			if len(pages) != wantPages {
				t.Fatalf("%d sessions in %d pages, want %d", n, len(pages), wantPages)
			}
			for i, p := range pages {
				want := min(32, n-32*i)
				if len(p.Sessions) != want {
					t.Fatalf("page %d has %d sessions, want %d", i, len(p.Sessions), want)
				}
				if (p.NextCursor == nil) != (i == len(pages)-1) {
					t.Fatalf("page %d nextCursor = %v", i, p.NextCursor)
				}
			}
			got := ids(pages)
			var want []string
			for i := n - 1; i >= 0; i-- { // newest first
				want = append(want, fmt.Sprintf("s%03d", i))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("catalog order = %v\nwant %v", got, want)
			}
		})
	}
}

func TestCatalogNewestFirstWithTies(t *testing.T) {
	f := newFixture(t)
	// Ids in scrambled order, three per timestamp.
	perm := []int{7, 2, 9, 0, 4, 11, 1, 8, 5, 10, 3, 6, 13, 12, 15, 14, 20, 17, 19, 16, 18}
	type key struct {
		at int64
		id string
	}
	var want []key
	for i, p := range perm {
		if i%3 == 0 {
			f.clock.Add(10)
		}
		id := fmt.Sprintf("x%02d", p)
		f.create(protocol.SessionCreateInput{SessionID: id, Workspace: ws("/w")})
		want = append(want, key{f.clock.Load(), id})
	}
	slices.SortFunc(want, func(a, b key) int {
		if a.at != b.at {
			return int(b.at - a.at)
		}
		return strings.Compare(a.id, b.id)
	})
	// Pages of 32 would hold them all; list twice with a cut in a tie by
	// paging from a cursor positioned inside a tie group.
	pages := f.walk(true)
	var got []key
	for _, p := range pages {
		for _, s := range p.Sessions {
			got = append(got, key{s.LastUsedAt, s.SessionID})
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("order = %v\nwant %v", got, want)
	}
	rev := pages[0].Revision
	for i := range want[:len(want)-1] {
		c := catalogCursor{Revision: rev, IncludeArchived: true, LastUsedAt: want[i].at, SessionID: want[i].id}.encode()
		page := f.listContinue(rev, c)
		if len(page.Sessions) == 0 || page.Sessions[0].SessionID != want[i+1].id {
			t.Fatalf("continue after %v starts with %+v, want %v", want[i], page.Sessions, want[i+1])
		}
	}
}

// fat returns a session create input whose summary encodes large: control
// characters escape to six bytes each.
func fat(id string, pathBytes int) protocol.SessionCreateInput {
	labels := make([]string, protocol.SessionLabelsMax)
	for i := range labels {
		labels[i] = fmt.Sprintf("%02d", i) + strings.Repeat("\x02", protocol.SessionLabelMaxLen-2)
	}
	return protocol.SessionCreateInput{
		SessionID: id, Workspace: ws("/" + strings.Repeat("\x03", pathBytes-1)),
		Name: strings.Repeat("\x01", protocol.SessionNameMaxLen), Labels: labels,
	}
}

func TestCatalogPagesBoundedByBytes(t *testing.T) {
	f := newFixture(t)
	const n = 40
	sizes := []int{16, 900, 2500, 4096, 300}
	for i := range n {
		f.clock.Add(1)
		f.create(fat(fmt.Sprintf("s%03d", i), sizes[i%len(sizes)]))
	}
	pages := f.walk(true)
	got := ids(pages)
	if len(got) != n {
		t.Fatalf("walk returned %d sessions, want %d", len(got), n)
	}
	for i := range got {
		if want := fmt.Sprintf("s%03d", n-1-i); got[i] != want {
			t.Fatalf("session %d = %s, want %s", i, got[i], want)
		}
	}
	if len(pages) < 4 {
		t.Fatalf("%d pages: fat sessions should need several pages", len(pages))
	}
	for i, p := range pages {
		size, err := protocol.EncodedSize(p)
		if err != nil {
			t.Fatal(err)
		}
		if size > protocol.SessionCatalogPageMaxBytes {
			t.Fatalf("page %d is %d bytes", i, size)
		}
		if i == len(pages)-1 {
			continue
		}
		// The page is as full as the bound allows: with the next session
		// (and the cursor after it, unless it is the last one) it would not
		// fit.
		next := pages[i+1].Sessions[0]
		bigger := p
		bigger.Sessions = append(slices.Clone(p.Sessions), next)
		bigger.NextCursor = nil
		if i+1 < len(pages)-1 || len(pages[i+1].Sessions) > 1 {
			c := catalogCursor{Revision: p.Revision, IncludeArchived: true, LastUsedAt: next.LastUsedAt, SessionID: next.SessionID}.encode()
			bigger.NextCursor = &c
		}
		if size, _ := protocol.EncodedSize(bigger); size <= protocol.SessionCatalogPageMaxBytes && len(bigger.Sessions) <= 32 {
			t.Fatalf("page %d (%d sessions) could have held the next session (%d bytes)", i, len(p.Sessions), size)
		}
	}
}

func TestCatalogRevisionChanged(t *testing.T) {
	f := newFixture(t)
	f.createN(40, func(i int) string { return fmt.Sprintf("s%03d", i) }, func(int) int64 { return 1 })
	first := f.listStart(false)
	if first.NextCursor == nil {
		t.Fatal("40 sessions fit one page")
	}
	if first.Revision != 40 {
		t.Fatalf("revision after 40 creates = %d", first.Revision)
	}
	// Another client creates a session between the pages.
	f.create(protocol.SessionCreateInput{SessionID: "late", Workspace: ws("/w")})
	res := f.listContinue(first.Revision, *first.NextCursor)
	want := protocol.SessionCatalogQueryResult{Kind: protocol.SessionCatalogKindRevisionChanged, Expected: 40, Actual: 41}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("list_continue after a create = %+v, want %+v", res, want)
	}
	// A replayed create changes nothing, so a fresh listing stays valid.
	second := f.listStart(false)
	f.create(protocol.SessionCreateInput{SessionID: "late", Workspace: ws("/w")})
	if res := f.listContinue(second.Revision, *second.NextCursor); res.Kind != protocol.SessionCatalogKindPage || len(res.Sessions) != 9 {
		t.Fatalf("list_continue after a replayed create = %+v", res)
	}
	// A lifecycle change advances the revision too.
	expectOK[protocol.SessionSummary](t, f.call(protocol.OpSessionLifecycleSet,
		protocol.SessionLifecycleSetInput{SessionID: "s001", Action: protocol.SessionActionArchive}))
	if res := f.listContinue(second.Revision, *second.NextCursor); res.Kind != protocol.SessionCatalogKindRevisionChanged || res.Actual != 42 {
		t.Fatalf("list_continue after an archive = %+v", res)
	}
}

func TestCatalogMalformedCursor(t *testing.T) {
	f := newFixture(t)
	f.createN(33, func(i int) string { return fmt.Sprintf("s%03d", i) }, func(int) int64 { return 1 })
	page := f.listStart(false)
	good := *page.NextCursor
	c, ok := parseCatalogCursor(good)
	if !ok {
		t.Fatalf("issued cursor %q does not parse", good)
	}
	raw := func(s string) string { return encodeCursor(s) }
	bad := map[string]string{
		"garbage":          "not a cursor!",
		"not base64":       good + "*",
		"truncated":        good[:len(good)/2],
		"wrong tag":        raw("t1:33:0:5:s001"),
		"too few fields":   raw("c1:33:0:5"),
		"bad flag":         raw("c1:33:2:5:s001"),
		"negative time":    raw("c1:33:0:-5:s001"),
		"leading zero":     raw("c1:033:0:5:s001"),
		"unsafe integer":   raw("c1:33:0:99999999999999999:s001"),
		"bad session id":   raw("c1:33:0:5:s 001"),
		"empty session id": raw("c1:33:0:5:"),
		"transcript":       transcriptCursor{SessionID: "s001", Seq: 1, Part: 1}.encode(),
		"padded":           good + "==",
	}
	for name, cursor := range bad {
		t.Run(name, func(t *testing.T) {
			f.t = t
			expectErr(t, f.call(protocol.OpSessionCatalogQuery, protocol.SessionCatalogQueryInput{
				Kind: protocol.SessionCatalogListContinue, Revision: page.Revision, Cursor: cursor,
			}), protocol.ErrInvalidRequest, MessageInvalidCatalogCursor)
		})
	}
	f.t = t
	// A cursor of another revision than the one sent with it.
	expectErr(t, f.call(protocol.OpSessionCatalogQuery, protocol.SessionCatalogQueryInput{
		Kind: protocol.SessionCatalogListContinue, Revision: c.Revision + 1, Cursor: good,
	}), protocol.ErrInvalidRequest, MessageInvalidCatalogCursor)
	// The good one works.
	if res := f.listContinue(page.Revision, good); len(res.Sessions) != 1 || res.NextCursor != nil {
		t.Fatalf("second page = %+v", res)
	}
}

func TestCatalogGet(t *testing.T) {
	f := newFixture(t)
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
	res := f.catalog(protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogGet, SessionID: "missing"})
	if res.Kind != protocol.SessionCatalogKindSession || res.Session != nil {
		t.Fatalf("get missing = %+v", res)
	}
	res = f.catalog(protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogGet, SessionID: "s1"})
	if res.Session == nil || res.Session.SessionID != "s1" {
		t.Fatalf("get s1 = %+v", res)
	}
}

// --- session.lifecycle.set ---------------------------------------------------

func (f *fixture) lifecycle(id string, action protocol.SessionLifecycleAction) host.Outcome {
	f.t.Helper()
	return f.call(protocol.OpSessionLifecycleSet, protocol.SessionLifecycleSetInput{SessionID: id, Action: action})
}

func TestLifecycleArchiveRules(t *testing.T) {
	f := newFixture(t)
	f.createN(3, func(i int) string { return fmt.Sprintf("s%d", i) }, func(int) int64 { return 1 })
	f.takeChanges()
	rev := f.listStart(true).Revision

	f.clock.Add(1000)
	archivedAt := f.clock.Load()
	got := expectOK[protocol.SessionSummary](t, f.lifecycle("s1", protocol.SessionActionArchive))
	if !got.IsArchived || got.ArchivedAt == nil || *got.ArchivedAt != archivedAt || got.Status != protocol.SessionActive {
		t.Fatalf("archive = %+v", got)
	}
	if ch := f.takeChanges(); len(ch) != 1 || ch[0].sessionID != "s1" || !ch[0].isArchived {
		t.Fatalf("OnChange after archive = %+v, want the archived s1 readable", ch)
	}
	// Archiving again returns it unchanged and changes nothing.
	f.clock.Add(1000)
	again := expectOK[protocol.SessionSummary](t, f.lifecycle("s1", protocol.SessionActionArchive))
	if !reflect.DeepEqual(again, got) {
		t.Fatalf("archive again = %+v, want %+v", again, got)
	}
	if ch := f.takeChanges(); len(ch) != 0 {
		t.Fatalf("unchanged archive called OnChange: %+v", ch)
	}
	if r := f.listStart(true).Revision; r != rev+1 {
		t.Fatalf("revision = %d, want %d", r, rev+1)
	}

	// includeArchived.
	if got := ids(f.walk(false)); !slices.Equal(got, []string{"s2", "s0"}) {
		t.Fatalf("listing without archived = %v", got)
	}
	if got := ids(f.walk(true)); !slices.Equal(got, []string{"s2", "s1", "s0"}) {
		t.Fatalf("listing with archived = %v", got)
	}

	// Unarchive, and unarchive an active session.
	un := expectOK[protocol.SessionSummary](t, f.lifecycle("s1", protocol.SessionActionUnarchive))
	if un.IsArchived || un.ArchivedAt != nil {
		t.Fatalf("unarchive = %+v", un)
	}
	if !reflect.DeepEqual(expectOK[protocol.SessionSummary](t, f.lifecycle("s1", protocol.SessionActionUnarchive)), un) {
		t.Fatal("unarchiving an active session changed it")
	}
	if ch := f.takeChanges(); len(ch) != 1 || ch[0].isArchived {
		t.Fatalf("OnChange after unarchive = %+v", ch)
	}
	if got := ids(f.walk(false)); !slices.Equal(got, []string{"s2", "s1", "s0"}) {
		t.Fatalf("listing after unarchive = %v", got)
	}

	expectErr(t, f.lifecycle("nope", protocol.SessionActionArchive), protocol.ErrNotFound, MessageSessionNotFound)
	expectErr(t, f.lifecycle("nope", protocol.SessionActionUnarchive), protocol.ErrNotFound, MessageSessionNotFound)
}

func TestLifecycleBusy(t *testing.T) {
	f := newFixture(t)
	f.createN(2, func(i int) string { return fmt.Sprintf("s%d", i) }, func(int) int64 { return 1 })
	f.setBusy("s0", true)
	expectErr(t, f.lifecycle("s0", protocol.SessionActionArchive), protocol.ErrSessionBusy, MessageSessionBusy)
	res := f.catalog(protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogGet, SessionID: "s0"})
	if res.Session.IsArchived {
		t.Fatal("a busy session was archived")
	}
	// Another session is unaffected; an archived session stays archivable
	// and unarchivable while a turn runs.
	expectOK[protocol.SessionSummary](t, f.lifecycle("s1", protocol.SessionActionArchive))
	f.setBusy("s1", true)
	expectOK[protocol.SessionSummary](t, f.lifecycle("s1", protocol.SessionActionArchive))
	expectOK[protocol.SessionSummary](t, f.lifecycle("s1", protocol.SessionActionUnarchive))
	f.setBusy("s0", false)
	if got := expectOK[protocol.SessionSummary](t, f.lifecycle("s0", protocol.SessionActionArchive)); !got.IsArchived {
		t.Fatalf("archive after the turn ended = %+v", got)
	}
}

// --- projection ---------------------------------------------------------------

func TestLoadIdentity(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	if _, found, err := f.readProjection(ctx, "s1"); found || err != nil {
		t.Fatalf("projection of a missing session: found=%v err=%v", found, err)
	}
	s1 := f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
	f.create(protocol.SessionCreateInput{SessionID: "s2", Workspace: ws("/w")})
	f.clock.Add(7)
	expectOK[protocol.SessionSummary](t, f.lifecycle("s2", protocol.SessionActionArchive))

	p, found, err := f.readProjection(ctx, "s1")
	if err != nil || !found {
		t.Fatalf("readProjection(s1) = %v, %v", found, err)
	}
	want := protocol.SessionContinuityIdentity{
		SessionID: "s1", Status: protocol.SessionActive, CreatedAt: s1.CreatedAt, LastUsedAt: s1.LastUsedAt,
	}
	if !reflect.DeepEqual(p.Session, want) {
		t.Fatalf("identity = %+v\nwant %+v", p.Session, want)
	}
	checkSnapshot(t, p)

	p, _, err = f.readProjection(ctx, "s2")
	if err != nil || !p.Session.IsArchived || p.Session.ArchivedAt == nil || *p.Session.ArchivedAt != f.clock.Load() {
		t.Fatalf("identity of archived s2 = %+v, %v", p.Session, err)
	}
	checkSnapshot(t, p)
}

// readProjection reads the session's projection as the session owner
// does, with its identity from LoadIdentity, no root turn, nothing
// pending and the empty queue of testEpoch.
func readProjection(st *store.Store, ctx context.Context, sessionID string) (continuity.Projection, bool, error) {
	p := continuity.Projection{Queue: protocol.SessionMessageQueueProjection{HostEpoch: testEpoch}}
	err := st.Read(ctx, func(q store.Querier) error {
		var err error
		p.Session, err = LoadIdentity(q, sessionID)
		return err
	})
	switch {
	case errors.Is(err, ErrSessionNotFound):
		return continuity.Projection{}, false, nil
	case err != nil:
		return continuity.Projection{}, false, err
	}
	return p, true, nil
}

func (f *fixture) readProjection(ctx context.Context, sessionID string) (continuity.Projection, bool, error) {
	return readProjection(f.st, ctx, sessionID)
}

// checkSnapshot asserts that p encodes as a wire snapshot clients accept.
func checkSnapshot(t *testing.T, p continuity.Projection) {
	t.Helper()
	b, err := protocol.Marshal(protocol.SessionContinuitySnapshot{
		SchemaVersion: protocol.SessionContinuitySchemaVersion, Session: p.Session, ProjectionRevision: 1,
		RootTurn: p.RootTurn, Queue: p.Queue, Interactions: p.Interactions,
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := protocol.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := protocol.DecodeSessionContinuitySnapshot(v); err != nil {
		t.Fatalf("snapshot %s: %v", b, err)
	}
}

// TestContinuityRefreshOnChange wires the service to a continuity
// coordinator the way the composition does: an archive reaches an open
// subscription as a projection frame before the archive's reply.
func TestContinuityRefreshOnChange(t *testing.T) {
	var coord *continuity.Publisher
	var refreshErr atomic.Value
	f := newFixture(t, func(f *fixture, o *Options) {
		o.OnChange = func(ctx context.Context, sessionID string) {
			if err := coord.Refresh(ctx, sessionID); err != nil {
				refreshErr.Store(err)
			}
		}
	})
	coord = continuity.New(testEpoch, f.readProjection, f.gate, nil)
	defer coord.Close()
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})

	var mu sync.Mutex
	var frames [][]byte
	conn := host.NewConnInfo(host.ConnInfo{HostEpoch: testEpoch, ConnectionID: "c1"}, func(frame []byte, onDone func(error)) error {
		mu.Lock()
		frames = append(frames, frame)
		mu.Unlock()
		onDone(nil)
		return nil
	})
	spec := lookup(t, protocol.OpSubscriptionOpen)
	out := coord.Handlers()[protocol.OpSubscriptionOpen](testCtx(t), &host.Call{Operation: spec, Input: protocol.SubscriptionOpenInput{SessionID: "s1"}, Conn: conn})
	checkOutcome(t, spec, out)
	open := expectOK[protocol.SubscriptionOpenResult](t, out)
	if open.Snapshot.Session.IsArchived {
		t.Fatal("fresh session is archived")
	}
	out.AfterQueued(nil)

	expectOK[protocol.SessionSummary](t, f.lifecycle("s1", protocol.SessionActionArchive))
	if err := refreshErr.Load(); err != nil {
		t.Fatalf("refresh from OnChange: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(frames) != 1 {
		t.Fatalf("%d frames after archive, want 1 projection frame", len(frames))
	}
	v, err := protocol.Parse(frames[0])
	if err != nil {
		t.Fatal(err)
	}
	sv, _ := v.Get("snapshot")
	snap, err := protocol.DecodeSessionContinuitySnapshot(sv)
	if err != nil || !snap.Session.IsArchived || snap.ProjectionRevision != 2 {
		t.Fatalf("projection frame = %s (%v)", frames[0], err)
	}
}

// --- store faults ----------------------------------------------------------------

func TestStoreFaultReadOnlyIsPersistenceFailed(t *testing.T) {
	f := newFixture(t)
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
	f.takeChanges()
	// The writer connection becomes read-only: every later write fails
	// like one on a read-only medium (SQLITE_READONLY) before COMMIT.
	if err := f.st.Write(testCtx(t), func(tx *store.Tx) error {
		_, err := tx.Exec(`PRAGMA query_only = 1`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	expectErr(t, f.call(protocol.OpSessionCreate, protocol.SessionCreateInput{SessionID: "s2", Workspace: ws("/w")}),
		protocol.ErrPersistenceFailed, MessagePersistenceFailed)
	expectErr(t, f.lifecycle("s1", protocol.SessionActionArchive), protocol.ErrPersistenceFailed, MessagePersistenceFailed)
	if ch := f.takeChanges(); len(ch) != 0 {
		t.Fatalf("failed writes called OnChange: %+v", ch)
	}
	// Nothing was stored, and queries still work.
	if got := ids(f.walk(true)); !slices.Equal(got, []string{"s1"}) {
		t.Fatalf("catalog after failed writes = %v", got)
	}
	ev := mustEvent(t, 1, 1, EventUserMessage, MessagePayload{TurnID: "t1", MessageID: "m1", Text: "hi"})
	if err := f.svc.AppendRunEvents(testCtx(t), "s1", "r1", []RunEvent{ev}); !errors.Is(err, store.ErrPersistenceFailed) {
		t.Fatalf("AppendRunEvents on a read-only store = %v", err)
	}
}

// installCommitFault makes the COMMIT of every transaction that inserts a
// session fail: the insert fires a trigger that leaves a deferred foreign
// key violation, which SQLite reports only at COMMIT.
func installCommitFault(t *testing.T, st *store.Store, table string) {
	t.Helper()
	err := st.Write(testCtx(t), func(tx *store.Tx) error {
		for _, q := range []string{
			`CREATE TABLE fault_parent (id INTEGER PRIMARY KEY)`,
			`CREATE TABLE fault_child (p INTEGER REFERENCES fault_parent (id) DEFERRABLE INITIALLY DEFERRED)`,
			`CREATE TRIGGER fault_insert AFTER INSERT ON ` + table + ` BEGIN INSERT INTO fault_child VALUES (1); END`,
			`CREATE TRIGGER fault_update AFTER UPDATE ON ` + table + ` BEGIN INSERT INTO fault_child VALUES (1); END`,
		} {
			if _, err := tx.Exec(q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestStoreFaultCommitIsCommitOutcomeUnknown(t *testing.T) {
	t.Run("create", func(t *testing.T) {
		f := newFixture(t)
		installCommitFault(t, f.st, "sessions")
		expectErr(t, f.call(protocol.OpSessionCreate, protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")}),
			protocol.ErrCommitOutcomeUnknown, MessageCommitOutcomeUnknown)
		// The change may be durable: readers are told to look.
		if ch := f.takeChanges(); len(ch) != 1 || ch[0].sessionID != "s1" {
			t.Fatalf("OnChange after an unknown commit = %+v", ch)
		}
		// The store stopped writing; queries answer from what is durable.
		if got := f.listStart(true); len(got.Sessions) != 0 {
			t.Fatalf("catalog = %+v", got)
		}
		expectErr(t, f.call(protocol.OpSessionCreate, protocol.SessionCreateInput{SessionID: "s2", Workspace: ws("/w")}),
			protocol.ErrPersistenceFailed, MessagePersistenceFailed)
	})
	t.Run("lifecycle", func(t *testing.T) {
		f := newFixture(t)
		f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
		installCommitFault(t, f.st, "sessions")
		expectErr(t, f.lifecycle("s1", protocol.SessionActionArchive), protocol.ErrCommitOutcomeUnknown, MessageCommitOutcomeUnknown)
	})
}

func TestStoreClosed(t *testing.T) {
	f := newFixture(t)
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
	// A second handle on the closed store: the fixture closes its own.
	st := openTestStore(t, filepath.Join(t.TempDir(), "closed.sqlite"))
	if err := st.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	svc := New(st, f.gate, Options{})
	for op, in := range map[protocol.Operation]any{
		protocol.OpSessionCreate:         protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")},
		protocol.OpSessionLifecycleSet:   protocol.SessionLifecycleSetInput{SessionID: "s1", Action: protocol.SessionActionArchive},
		protocol.OpSessionCatalogQuery:   protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogListStart},
		protocol.OpSessionTranscriptPage: protocol.SessionTranscriptPageInput{SessionID: "s1"},
	} {
		spec := lookup(t, op)
		out := svc.Handlers()[op](testCtx(t), &host.Call{Operation: spec, Input: in})
		checkOutcome(t, spec, out)
		expectErr(t, out, protocol.ErrPersistenceFailed, MessagePersistenceFailed)
	}
	if _, _, err := readProjection(svc.st, testCtx(t), "s1"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("ReadProjection on a closed store = %v", err)
	}

	// A closed lane gate means the host is draining.
	if err := f.gate.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	expectErr(t, f.lifecycle("s1", protocol.SessionActionArchive), protocol.ErrHostDraining, protocol.MessageHostDraining)
}

func TestCorruptDocumentIsPersistenceFailed(t *testing.T) {
	f := newFixture(t)
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
	if err := f.st.Write(testCtx(t), func(tx *store.Tx) error {
		_, err := tx.Exec(`UPDATE sessions SET document = '{' WHERE session_id = 's1'`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	expectErr(t, f.call(protocol.OpSessionCatalogQuery, protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogListStart}),
		protocol.ErrPersistenceFailed, MessagePersistenceFailed)
	expectErr(t, f.lifecycle("s1", protocol.SessionActionArchive), protocol.ErrPersistenceFailed, MessagePersistenceFailed)
}

func TestMigrationLeavesRoomForLaterVersions(t *testing.T) {
	later := store.Migration{Version: 3, Up: func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE later (id INTEGER)`)
		return err
	}}
	path := filepath.Join(t.TempDir(), "store.sqlite")
	st, err := store.Open(testCtx(t), path, store.Options{Migrations: []store.Migration{Migration, later}})
	if err != nil {
		t.Fatalf("open with a version 3 migration: %v", err)
	}
	if err := st.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// Reopening with only version 2 is refused as too new, never
	// re-migrated.
	if _, err := store.Open(testCtx(t), path, store.Options{Migrations: []store.Migration{Migration}}); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("reopen without version 3 = %v", err)
	}
}

// sweepStep is the step of the byte-bound sweeps: every byte, or every
// fifth with -short (.ci/run also runs the sweeps in full).
func sweepStep() int {
	if testing.Short() {
		return 5
	}
	return 1
}

// TestCatalogPageExactByteBound walks a session's size across the point
// where it stops fitting a page, byte by byte (see sweepStep): every page
// stays within the bound and holds every session that fits, counting the
// next cursor.
func TestCatalogPageExactByteBound(t *testing.T) {
	mk := func(id string, at int64, pathLen int) header {
		return header{ID: id, CreatedAt: at, LastUsedAt: at, Status: string(protocol.SessionActive), Doc: sessionDoc{
			Workspace: ws("/" + strings.Repeat("p", pathLen-1)), ModelTarget: storedModelTarget{Kind: "default"}, PermissionMode: "ask",
		}}
	}
	spec := lookup(t, protocol.OpSessionCatalogQuery)
	fits := func(p protocol.SessionCatalogQueryResult) bool {
		n, err := protocol.EncodedSize(p)
		if err != nil {
			t.Fatal(err)
		}
		return n <= protocol.SessionCatalogPageMaxBytes
	}
	// Calibrate: the room the eleven leading sessions leave, and the size of
	// a session beyond its path.
	var lead []protocol.SessionSummary
	for i := range 11 {
		lead = append(lead, mk(fmt.Sprintf("s%02d", i), int64(100-i), 4096).summary())
	}
	used, _ := protocol.EncodedSize(protocol.SessionCatalogQueryResult{Kind: protocol.SessionCatalogKindPage, Revision: 7, Sessions: lead})
	fixed, _ := protocol.EncodedSize(mk("s11", 80, 1).summary())
	room := protocol.SessionCatalogPageMaxBytes - used - 1 - (fixed - 1)
	seen := map[int]bool{}
	for _, tail := range []bool{false, true} {
		for pathLen := room - 80; pathLen <= room+20; pathLen += sweepStep() {
			// Eleven sessions of ~4.2 KB, then the one whose size varies,
			// then (with tail) one more, so that a cursor is needed.
			var hs []header
			for i := range 11 {
				hs = append(hs, mk(fmt.Sprintf("s%02d", i), int64(100-i), 4096))
			}
			hs = append(hs, mk("s11", 80, pathLen))
			if tail {
				hs = append(hs, mk("s12", 70, 10))
			}
			page, err := buildCatalogPage(7, false, hs)
			if err != nil {
				t.Fatal(err)
			}
			checkOutcome(t, spec, host.OK(page))
			k := len(page.Sessions)
			seen[k] = true
			if k == len(hs) {
				if page.NextCursor != nil {
					t.Fatalf("complete page has a cursor")
				}
				continue
			}
			if page.NextCursor == nil || *page.NextCursor != (catalogCursor{Revision: 7, LastUsedAt: hs[k-1].LastUsedAt, SessionID: hs[k-1].ID}).encode() {
				t.Fatalf("pathLen %d: cursor %v does not name session %d", pathLen, page.NextCursor, k-1)
			}
			bigger := page
			bigger.Sessions = append(slices.Clone(page.Sessions), hs[k].summary())
			bigger.NextCursor = nil
			if k+1 < len(hs) {
				c := catalogCursor{Revision: 7, LastUsedAt: hs[k].LastUsedAt, SessionID: hs[k].ID}.encode()
				bigger.NextCursor = &c
			}
			if fits(bigger) {
				t.Fatalf("pathLen %d tail %v: %d sessions returned but %d fit", pathLen, tail, k, k+1)
			}
		}
	}
	if !seen[11] || !seen[12] {
		t.Fatalf("the sizes did not cross the bound: page sizes seen %v", seen)
	}
}

func TestSummarySize(t *testing.T) {
	at := int64(protocol.MaxSafeInteger)
	strs := []string{"", "a", "\x00\x01\x1f", "\"\\\b\f\n\r\t", "<>&\x7f", "\u2028\u2029", "é✓😀", "\xff\xfe", "a\xe2\x80", strings.Repeat("x\x02", 300)}
	n := 0
	for _, a := range strs {
		for _, b := range strs {
			n++
			s := protocol.SessionSummary{
				SessionID: fmt.Sprintf("s-%d", n), Name: a, Workspace: ws("/" + b),
				Labels: []string{a, b}, ModelTarget: protocol.ModelTarget{Kind: protocol.ModelTargetDefault},
				PermissionMode: "ask", Status: protocol.SessionWaitingForUser, CreatedAt: int64(n), LastUsedAt: int64(n) * 1_000_003,
			}
			switch n % 3 {
			case 0:
				s.ModelTarget = protocol.ModelTarget{Kind: protocol.ModelTargetExplicit, ConnectionSlug: b, Model: a}
				s.IsArchived, s.ArchivedAt = true, &at
			case 1:
				s.Labels = nil
			}
			want, err := protocol.EncodedSize(s)
			if err != nil {
				t.Fatal(err)
			}
			if got := summarySize(s); got != want {
				t.Fatalf("summarySize(%+v) = %d, want %d", s, got, want)
			}
		}
	}
}

// FuzzParseCursors checks that cursor parsing never panics and accepts only
// the canonical form of a cursor.
func FuzzParseCursors(f *testing.F) {
	f.Add(catalogCursor{Revision: 3, IncludeArchived: true, LastUsedAt: 17, SessionID: "s-1"}.encode())
	f.Add(transcriptCursor{SessionID: "s-1", Seq: 4, Part: 2}.encode())
	f.Add(encodeCursor("c1:1:0:1:"))
	f.Add(encodeCursor("t1:1:1:a:b"))
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		if c, ok := parseCatalogCursor(s); ok && c.encode() != s {
			t.Fatalf("catalog cursor %q parsed to %+v", s, c)
		}
		if c, ok := parseTranscriptCursor(s); ok && (c.encode() != s || c.Seq < 1 || c.Part < 1) {
			t.Fatalf("transcript cursor %q parsed to %+v", s, c)
		}
	})
}

// Archived is told of each durable archive, and only of that.
func TestLifecycleArchivedHook(t *testing.T) {
	var mu sync.Mutex
	var told []string
	f := newFixture(t, func(_ *fixture, o *Options) {
		o.Archived = func(id string) {
			mu.Lock()
			told = append(told, id)
			mu.Unlock()
		}
	})
	f.createN(2, func(i int) string { return fmt.Sprintf("s%d", i) }, func(int) int64 { return 1 })
	expectOK[protocol.SessionSummary](t, f.lifecycle("s1", protocol.SessionActionArchive))
	expectOK[protocol.SessionSummary](t, f.lifecycle("s1", protocol.SessionActionArchive)) // unchanged
	expectOK[protocol.SessionSummary](t, f.lifecycle("s1", protocol.SessionActionUnarchive))
	f.setBusy("s0", true)
	f.lifecycle("s0", protocol.SessionActionArchive) // refused: a root turn runs
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(told, []string{"s1"}) {
		t.Fatalf("Archived told %v, want [s1]", told)
	}
}
