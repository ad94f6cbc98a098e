package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/protocol"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// ---- harness ----

type harness struct {
	t       *testing.T
	c       *Settings
	docs    *MemoryDocuments
	secrets *SecretFile

	mu            sync.Mutex
	responses     [][]byte // every encoded response: results and errors
	invalidate    func() error
	invalidations int
	poisons       []error
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, docs: NewMemoryDocuments()}
	sf, err := OpenSecretFile(filepath.Join(t.TempDir(), "secrets.json"))
	if err != nil {
		t.Fatal(err)
	}
	h.secrets = sf
	c, err := New(h.docs, sf, Options{
		Invalidate: func(context.Context) error {
			h.mu.Lock()
			h.invalidations++
			fn := h.invalidate
			h.mu.Unlock()
			if fn != nil {
				return fn()
			}
			return nil
		},
		OnPoison: func(err error) {
			h.mu.Lock()
			h.poisons = append(h.poisons, err)
			h.mu.Unlock()
		},
		Now: func() time.Time { return time.UnixMilli(1_700_000_000_000) },
	})
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	return h
}

func (h *harness) setInvalidate(fn func() error) {
	h.mu.Lock()
	h.invalidate = fn
	h.mu.Unlock()
}

func (h *harness) counts() (invalidations, poisons int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.invalidations, len(h.poisons)
}

func opSpec(t *testing.T, op protocol.Operation) *protocol.OperationSpec {
	spec, ok := protocol.Lookup(string(op))
	if !ok || !spec.HasCodecs() {
		t.Fatalf("operation %s has no codecs", op)
	}
	return spec
}

// do runs one operation the way the host does: the input goes through the
// operation's input codec, the result through its output codec, and an
// error must be one the operation declares. Every encoded response is
// recorded. It is safe to call from other goroutines (it reports with
// Errorf).
func (h *harness) do(op protocol.Operation, input any) (any, *protocol.OpError) {
	t := h.t
	spec := opSpec(t, op)
	raw, err := protocol.Marshal(input)
	if err != nil {
		t.Errorf("%s: encode input: %v", op, err)
		return nil, nil
	}
	v, err := protocol.Parse(raw)
	if err != nil {
		t.Errorf("%s: parse input: %v", op, err)
		return nil, nil
	}
	in, err := spec.DecodeInput(v)
	if err != nil {
		t.Errorf("%s: input rejected by its codec: %v", op, err)
		return nil, nil
	}
	handler := h.c.Handlers()[op]
	out := handler(context.Background(), &host.Call{RequestID: uuid.NewString(), Operation: spec, Input: in})
	if out.Err != nil {
		if !spec.Declares(out.Err.Code) {
			t.Errorf("%s: undeclared error code %s", op, out.Err.Code)
		}
		if n := len(out.Err.Message); n == 0 || n > 1024 {
			t.Errorf("%s: error message of %d bytes", op, n)
		}
		b, _ := protocol.Marshal(out.Err)
		h.record(b)
		return nil, out.Err
	}
	b, err := protocol.Marshal(out.Result)
	if err != nil {
		t.Errorf("%s: encode result: %v", op, err)
		return nil, nil
	}
	h.record(b)
	rv, err := protocol.Parse(b)
	if err != nil {
		t.Errorf("%s: parse result: %v", op, err)
		return nil, nil
	}
	res, err := spec.DecodeOutput(rv)
	if err != nil {
		t.Errorf("%s: result %s rejected by the output codec: %v", op, b, err)
		return nil, nil
	}
	return res, nil
}

func (h *harness) record(b []byte) {
	h.mu.Lock()
	h.responses = append(h.responses, b)
	h.mu.Unlock()
}

// ok runs an operation that must succeed with a result of type T.
func ok[T any](h *harness, op protocol.Operation, input any) T {
	h.t.Helper()
	res, opErr := h.do(op, input)
	if opErr != nil {
		h.t.Fatalf("%s: unexpected error %s: %s", op, opErr.Code, opErr.Message)
	}
	r, isT := res.(T)
	if !isT {
		h.t.Fatalf("%s: result %#v, want %T", op, res, *new(T))
	}
	return r
}

// fails runs an operation that must fail with code and message.
func fails(h *harness, op protocol.Operation, input any, code protocol.ErrorCode, message string) {
	h.t.Helper()
	res, opErr := h.do(op, input)
	if opErr == nil {
		h.t.Fatalf("%s: result %#v, want error %s", op, res, code)
	}
	if opErr.Code != code || opErr.Message != message {
		h.t.Fatalf("%s: error %s %q, want %s %q", op, opErr.Code, opErr.Message, code, message)
	}
}

func setMemory(expected int64, enabled bool) protocol.RuntimePolicyMutateInput {
	return protocol.RuntimePolicyMutateInput{ExpectedRevision: expected,
		Operation: protocol.RuntimePolicyOperation{Value: protocol.MemoryPolicy{Enabled: enabled, AgentReadEnabled: true}}}
}

func (h *harness) policy() protocol.RuntimePolicySnapshot {
	h.t.Helper()
	return ok[protocol.RuntimePolicySnapshot](h, protocol.OpRuntimePolicyQuery, protocol.RuntimePolicyQueryInput{})
}

func (h *harness) create(expected int64, slug, providerType string, enabled bool, models ...string) protocol.CatalogConnectionCommitted {
	h.t.Helper()
	return ok[protocol.CatalogConnectionCommitted](h, protocol.OpConnectionCatalogCreate, protocol.CatalogCreateInput{
		ExpectedCatalogRevision: expected,
		Connection: protocol.ConnectionDraft{Slug: slug, Name: "Connection " + slug, ProviderType: providerType,
			Enabled: enabled, EnabledModelIDs: models},
	})
}

// readCatalog reads every page from the start; all pages share a revision.
func (h *harness) readCatalog() ([]protocol.CatalogItem, []protocol.CatalogPage) {
	h.t.Helper()
	page := ok[protocol.CatalogPage](h, protocol.OpConnectionCatalogQuery, protocol.CatalogQueryInput{})
	pages := []protocol.CatalogPage{page}
	items := slices.Clone(page.Items)
	for page.NextCursor != nil {
		if len(pages) > 10000 {
			h.t.Fatal("catalog paging does not end")
		}
		next := ok[protocol.CatalogPage](h, protocol.OpConnectionCatalogQuery,
			protocol.CatalogQueryInput{Revision: page.Revision, Cursor: page.NextCursor})
		if next.Revision != page.Revision {
			h.t.Fatalf("page revision %d after %d", next.Revision, page.Revision)
		}
		page = next
		pages = append(pages, page)
		items = append(items, page.Items...)
	}
	return items, pages
}

// eventLog records the order of events across goroutines.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *eventLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

type result struct {
	res any
	err *protocol.OpError
}

func (h *harness) async(op protocol.Operation, input any) <-chan result {
	ch := make(chan result, 1)
	go func() {
		res, err := h.do(op, input)
		ch <- result{res, err}
	}()
	return ch
}

// ---- runtime policy ----

func TestPolicyQueryReturnsDefaultsAtRevisionZero(t *testing.T) {
	h := newHarness(t)
	snap := h.policy()
	want := protocol.RuntimePolicySnapshot{Revision: 0, Policy: protocol.DefaultRuntimePolicy()}
	if a, b := mustMarshal(t, snap), mustMarshal(t, want); a != b {
		t.Fatalf("snapshot %s, want %s", a, b)
	}
}

func TestPolicyMutateEveryKind(t *testing.T) {
	h := newHarness(t)
	proxy := protocol.NetworkProxyPolicy{Enabled: true, Protocol: protocol.ProxyProtocolSOCKS5, Host: "  proxy.local  ",
		Port: 1080, AuthEnabled: true, Username: "me", BypassList: []string{"a.example"}, AutoBypassDomains: []string{}}
	sections := []protocol.RuntimePolicySection{
		proxy,
		protocol.PersonalizationPolicy{DisplayName: "Ada", AssistantTone: "terse"},
		protocol.MemoryPolicy{Enabled: false, AgentReadEnabled: true},
		protocol.WorkspaceInstructionsPolicy{Enabled: false},
		protocol.PrivacyPolicy{IncognitoActive: true},
		protocol.ChatDefaultsPolicy{PermissionMode: protocol.PermissionModeBypass},
		protocol.WebSearchPolicy{Enabled: true, DefaultProvider: protocol.WebSearchProviderTavily},
	}
	want := protocol.DefaultRuntimePolicy()
	for i, s := range sections {
		r := ok[protocol.PolicyCommitted](h, protocol.OpRuntimePolicyMutate, protocol.RuntimePolicyMutateInput{
			ExpectedRevision: int64(i), Operation: protocol.RuntimePolicyOperation{Value: s}})
		if r.Revision != int64(i+1) {
			t.Fatalf("%s: committed revision %d, want %d", s.PolicyOperationKind(), r.Revision, i+1)
		}
		want = want.With(s)
	}
	want.NetworkProxy.Host = "proxy.local" // normalized on input
	snap := h.policy()
	if snap.Revision != int64(len(sections)) {
		t.Fatalf("revision %d", snap.Revision)
	}
	if a, b := mustMarshal(t, snap.Policy), mustMarshal(t, want); a != b {
		t.Fatalf("policy %s, want %s", a, b)
	}
	if inv, _ := h.counts(); inv != len(sections) {
		t.Fatalf("%d invalidations, want %d", inv, len(sections))
	}
}

func TestPolicyMutateRejectsOversizedSnapshot(t *testing.T) {
	h := newHarness(t)
	list := make([]string, 256)
	for i := range list {
		list[i] = fmt.Sprintf("%03d.%s", i, strings.Repeat("x", 400))
	}
	in := protocol.RuntimePolicyMutateInput{Operation: protocol.RuntimePolicyOperation{Value: protocol.NetworkProxyPolicy{
		Protocol: protocol.ProxyProtocolHTTP, Host: "h", Port: 1, BypassList: list, AutoBypassDomains: []string{}}}}
	fails(h, protocol.OpRuntimePolicyMutate, in, protocol.ErrInvalidRequest, MessageMutationInvalid)
	if snap := h.policy(); snap.Revision != 0 {
		t.Fatalf("revision %d after a rejected mutation", snap.Revision)
	}
	if inv, _ := h.counts(); inv != 0 {
		t.Fatalf("%d invalidations after a rejected mutation", inv)
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := protocol.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Guarantee 50: two concurrent mutations with the same expected revision →
// one committed, one revision_conflict; both clients then read the same
// snapshot.
func TestGuarantee50ConcurrentPolicyMutations(t *testing.T) {
	h := newHarness(t)
	// Hold the first write until the second mutation has arrived at the
	// gate, so that both are in flight together.
	queued := make(chan struct{}, 2)
	h.c.gate.setHook(func(mutation bool, _ int) {
		if mutation {
			queued <- struct{}{}
		}
	})
	release := make(chan struct{})
	var once sync.Once
	h.docs.OnStore(func(string) { once.Do(func() { <-release }) })

	a := h.async(protocol.OpRuntimePolicyMutate, setMemory(0, false))
	b := h.async(protocol.OpRuntimePolicyMutate, setMemory(0, true))
	<-queued
	<-queued
	close(release)
	ra, rb := <-a, <-b
	var committed, conflicts int
	for _, r := range []result{ra, rb} {
		if r.err != nil {
			t.Fatalf("error %s: %s", r.err.Code, r.err.Message)
		}
		switch x := r.res.(type) {
		case protocol.PolicyCommitted:
			committed++
			if x.Revision != 1 {
				t.Errorf("committed revision %d", x.Revision)
			}
		case protocol.RevisionConflict:
			conflicts++
			if x.ExpectedRevision != 0 || x.ActualRevision != 1 {
				t.Errorf("conflict %+v", x)
			}
		default:
			t.Fatalf("result %#v", r.res)
		}
	}
	if committed != 1 || conflicts != 1 {
		t.Fatalf("%d committed, %d conflicts; want 1 and 1", committed, conflicts)
	}
	if s1, s2 := mustMarshal(t, h.policy()), mustMarshal(t, h.policy()); s1 != s2 || !strings.Contains(s1, `"revision":1`) {
		t.Fatalf("snapshots differ or wrong revision: %s / %s", s1, s2)
	}
	if inv, _ := h.counts(); inv != 1 {
		t.Fatalf("%d invalidations, want 1 (only the committed mutation)", inv)
	}
}

func TestConcurrentCatalogCreatesWithSameRevision(t *testing.T) {
	h := newHarness(t)
	in := func(slug string) protocol.CatalogCreateInput {
		return protocol.CatalogCreateInput{Connection: protocol.ConnectionDraft{Slug: slug, ProviderType: "openai", Enabled: true}}
	}
	a := h.async(protocol.OpConnectionCatalogCreate, in("first"))
	b := h.async(protocol.OpConnectionCatalogCreate, in("second"))
	kinds := map[string]int{}
	for _, r := range []result{<-a, <-b} {
		if r.err != nil {
			t.Fatalf("error %s", r.err.Code)
		}
		kinds[fmt.Sprintf("%T", r.res)]++
	}
	if kinds["protocol.CatalogConnectionCommitted"] != 1 || kinds["protocol.RevisionConflict"] != 1 {
		t.Fatalf("results %v", kinds)
	}
}

// Guarantee 51: when invalidation fails, the durable result is still
// returned, OnPoison is called once, and queued and later mutations and
// activations fail.
func TestGuarantee51InvalidationFailurePoisons(t *testing.T) {
	h := newHarness(t)
	invalidating := make(chan struct{})
	fail := make(chan struct{})
	h.setInvalidate(func() error {
		close(invalidating)
		<-fail
		return errors.New("backend cache refused")
	})
	queued := make(chan int, 4)
	h.c.gate.setHook(func(mutation bool, waits int) { queued <- waits })

	first := h.async(protocol.OpRuntimePolicyMutate, setMemory(0, false))
	<-queued
	<-invalidating
	second := h.async(protocol.OpRuntimePolicyMutate, setMemory(1, true))
	if w := <-queued; w != 1 {
		t.Fatalf("second mutation waits for %d entries, want 1", w)
	}
	close(fail)

	r := <-first
	if r.err != nil {
		t.Fatalf("first mutation: %s %s", r.err.Code, r.err.Message)
	}
	if c, isC := r.res.(protocol.PolicyCommitted); !isC || c.Revision != 1 {
		t.Fatalf("first mutation result %#v, want committed revision 1", r.res)
	}
	r = <-second
	if r.err == nil || r.err.Code != protocol.ErrInternalFailure || r.err.Message != MessageActivationPoisoned {
		t.Fatalf("queued mutation: %#v %#v, want poisoned", r.res, r.err)
	}
	h.c.gate.setHook(nil)

	fails(h, protocol.OpRuntimePolicyMutate, setMemory(1, true), protocol.ErrInternalFailure, MessageActivationPoisoned)
	fails(h, protocol.OpConnectionCatalogCreate, protocol.CatalogCreateInput{
		Connection: protocol.ConnectionDraft{Slug: "later", ProviderType: "openai"}}, protocol.ErrInternalFailure, MessageActivationPoisoned)
	ran := false
	err := h.c.Activate(context.Background(), func() error { ran = true; return nil })
	if !errors.Is(err, ErrActivationPoisoned) || ran {
		t.Fatalf("activation after poison: err %v, ran %t", err, ran)
	}
	// Queries are not gated and see the durable outcome.
	if snap := h.policy(); snap.Revision != 1 || snap.Policy.Memory.Enabled {
		t.Fatalf("snapshot after poison %+v", snap)
	}
	h.mu.Lock()
	poisons := slices.Clone(h.poisons)
	h.mu.Unlock()
	if len(poisons) != 1 || !strings.Contains(poisons[0].Error(), "backend cache refused") {
		t.Fatalf("OnPoison calls %v, want one with the invalidation error", poisons)
	}
}

// Guarantee 52: a write whose outcome is unknown returns
// commit_outcome_unknown and still invalidates.
func TestGuarantee52CommitOutcomeUnknownInvalidates(t *testing.T) {
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%t", applied), func(t *testing.T) {
			h := newHarness(t)
			h.docs.FailNextStoreUnknown(applied)
			fails(h, protocol.OpRuntimePolicyMutate, setMemory(0, false), protocol.ErrCommitOutcomeUnknown, MessageCommitOutcomeUnknown)
			if inv, poisons := h.counts(); inv != 1 || poisons != 0 {
				t.Fatalf("%d invalidations, %d poisons; want 1 and 0", inv, poisons)
			}
			want := int64(0)
			if applied {
				want = 1
			}
			if snap := h.policy(); snap.Revision != want {
				t.Fatalf("revision %d, want %d", snap.Revision, want)
			}
			// The gate is not blocked: the next mutation proceeds.
			r := ok[protocol.PolicyCommitted](h, protocol.OpRuntimePolicyMutate, setMemory(want, true))
			if r.Revision != want+1 {
				t.Fatalf("next revision %d", r.Revision)
			}
		})
	}
}

func TestFailedMutationDoesNotInvalidateOrBlock(t *testing.T) {
	h := newHarness(t)
	h.docs.FailNextStore(errors.New("disk full"))
	fails(h, protocol.OpRuntimePolicyMutate, setMemory(0, false), protocol.ErrPersistenceFailed, MessagePersistenceFailed)
	if inv, _ := h.counts(); inv != 0 {
		t.Fatalf("%d invalidations after a failed write", inv)
	}
	if r := ok[protocol.PolicyCommitted](h, protocol.OpRuntimePolicyMutate, setMemory(0, false)); r.Revision != 1 {
		t.Fatalf("revision %d", r.Revision)
	}
}

// ---- corrupt and failing stores ----

func TestGuarantee53CorruptDocumentsReadAsPersistenceFailed(t *testing.T) {
	corrupt := map[string][]string{
		DocRuntimePolicy: {
			`not json`,
			`{"schemaVersion":1}`,
			`{"schemaVersion":2,"policy":` + mustMarshal(t, protocol.DefaultRuntimePolicy()) + `}`,
			// a host with surrounding white space is not canonical
			strings.Replace(`{"schemaVersion":1,"policy":`+mustMarshal(t, protocol.DefaultRuntimePolicy())+`}`,
				`"127.0.0.1"`, `" 127.0.0.1"`, 1),
		},
		DocConnectionCatalog: {
			`[]`,
			`{"schemaVersion":1,"defaultTarget":null,"connections":[{"connectionId":"x"}]}`,
		},
		DocCredentialVault: {
			`{"schemaVersion":1,"entries":[{"locator":{"scope":"nowhere"},"credentialId":"x","revision":1,"updatedAt":0}]}`,
		},
	}
	for name, bodies := range corrupt {
		for i, body := range bodies {
			t.Run(fmt.Sprintf("%s/%d", name, i), func(t *testing.T) {
				h := newHarness(t)
				h.docs.Corrupt(name, []byte(body))
				switch name {
				case DocRuntimePolicy:
					fails(h, protocol.OpRuntimePolicyQuery, protocol.RuntimePolicyQueryInput{}, protocol.ErrPersistenceFailed, MessagePersistenceFailed)
					fails(h, protocol.OpRuntimePolicyMutate, setMemory(1, true), protocol.ErrPersistenceFailed, MessagePersistenceFailed)
				case DocConnectionCatalog:
					fails(h, protocol.OpConnectionCatalogQuery, protocol.CatalogQueryInput{}, protocol.ErrPersistenceFailed, MessagePersistenceFailed)
					fails(h, protocol.OpConnectionCatalogSetDefaultTarget, protocol.CatalogSetDefaultTargetInput{ExpectedCatalogRevision: 1},
						protocol.ErrPersistenceFailed, MessagePersistenceFailed)
					fails(h, protocol.OpCredentialVaultQuery, protocol.CredentialVaultQueryInput{
						Locator: protocol.ConnectionCredential(uuid.NewString(), protocol.CredentialKindAPIKey)},
						protocol.ErrPersistenceFailed, MessagePersistenceFailed)
				case DocCredentialVault:
					fails(h, protocol.OpCredentialVaultQuery, protocol.CredentialVaultQueryInput{Locator: protocol.NetworkProxyCredential()},
						protocol.ErrPersistenceFailed, MessagePersistenceFailed)
					fails(h, protocol.OpCredentialVaultSet, protocol.CredentialVaultSetInput{Locator: protocol.NetworkProxyCredential(), Secret: "pw"},
						protocol.ErrPersistenceFailed, MessagePersistenceFailed)
				}
				if inv, _ := h.counts(); inv != 0 {
					t.Fatalf("%d invalidations", inv)
				}
			})
		}
	}
}

func TestLoadErrors(t *testing.T) {
	h := newHarness(t)
	h.docs.FailNextLoad(errors.New("i/o error"))
	fails(h, protocol.OpRuntimePolicyQuery, protocol.RuntimePolicyQueryInput{}, protocol.ErrPersistenceFailed, MessagePersistenceFailed)
	h.docs.FailNextLoad(errors.New("i/o error"))
	fails(h, protocol.OpConnectionCatalogCreate, protocol.CatalogCreateInput{
		Connection: protocol.ConnectionDraft{Slug: "ab", ProviderType: "openai"}}, protocol.ErrPersistenceFailed, MessagePersistenceFailed)
	// An unknown commit outcome while reading is an invariant failure.
	h.docs.FailNextLoad(fmt.Errorf("read: %w", ErrCommitOutcomeUnknown))
	fails(h, protocol.OpConnectionCatalogQuery, protocol.CatalogQueryInput{}, protocol.ErrInternalFailure, protocol.MessageOperationFailed)
	h.docs.FailNextLoad(fmt.Errorf("read: %w", ErrCommitOutcomeUnknown))
	fails(h, protocol.OpCredentialVaultQuery, protocol.CredentialVaultQueryInput{Locator: protocol.NetworkProxyCredential()},
		protocol.ErrInternalFailure, protocol.MessageOperationFailed)
}

func TestRevisionMismatchFromAnotherWriterIsReevaluated(t *testing.T) {
	h := newHarness(t)
	// Another writer commits revision 1 between the coordinator's read and
	// its write; the mutation is evaluated again and conflicts.
	h.docs.OnStore(func(name string) {
		h.docs.OnStore(nil)
		body, err := encodePolicy(protocol.DefaultRuntimePolicy())
		if err != nil {
			t.Error(err)
		}
		if err := h.docs.Store(context.Background(), name, 0, 1, body); err != nil {
			t.Error(err)
		}
	})
	r := ok[protocol.RevisionConflict](h, protocol.OpRuntimePolicyMutate, setMemory(0, false))
	if r.ExpectedRevision != 0 || r.ActualRevision != 1 {
		t.Fatalf("conflict %+v", r)
	}
	if inv, _ := h.counts(); inv != 0 {
		t.Fatalf("%d invalidations", inv)
	}
}

// ---- connection catalog ----

func TestCatalogMutations(t *testing.T) {
	h := newHarness(t)
	a := h.create(0, "alpha", "openai", true, "gpt-a", "gpt-b")
	if a.CatalogRevision != 1 || a.Connection.Revision != 1 {
		t.Fatalf("create %+v", a)
	}
	if u, err := uuid.Parse(a.Connection.ConnectionID); err != nil || u.Version() != 4 {
		t.Fatalf("connectionId %q is not a UUID v4", a.Connection.ConnectionID)
	}
	// Stale catalog revision, then a taken slug.
	conflict := ok[protocol.RevisionConflict](h, protocol.OpConnectionCatalogCreate, protocol.CatalogCreateInput{
		ExpectedCatalogRevision: 0, Connection: protocol.ConnectionDraft{Slug: "beta", ProviderType: "openai"}})
	if conflict.ExpectedRevision != 0 || conflict.ActualRevision != 1 {
		t.Fatalf("conflict %+v", conflict)
	}
	exists := ok[protocol.ConnectionExists](h, protocol.OpConnectionCatalogCreate, protocol.CatalogCreateInput{
		ExpectedCatalogRevision: 1, Connection: protocol.ConnectionDraft{Slug: "alpha", ProviderType: "anthropic"}})
	if exists.Slug != "alpha" {
		t.Fatalf("exists %+v", exists)
	}
	b := h.create(1, "beta", "anthropic", false, "claude")

	// Default target: must name an enabled connection and an enabled model.
	for _, target := range []protocol.ConnectionTarget{
		{ConnectionID: a.Connection.ConnectionID, ModelID: "gpt-c"},
		{ConnectionID: b.Connection.ConnectionID, ModelID: "claude"}, // disabled
		{ConnectionID: uuid.NewString(), ModelID: "gpt-a"},
	} {
		r := ok[protocol.InvalidDefaultTarget](h, protocol.OpConnectionCatalogSetDefaultTarget,
			protocol.CatalogSetDefaultTargetInput{ExpectedCatalogRevision: 2, Target: &target})
		if r.Target != target {
			t.Fatalf("invalid target %+v, want %+v", r.Target, target)
		}
	}
	target := protocol.ConnectionTarget{ConnectionID: a.Connection.ConnectionID, ModelID: "gpt-b"}
	ok[protocol.RevisionConflict](h, protocol.OpConnectionCatalogSetDefaultTarget,
		protocol.CatalogSetDefaultTargetInput{ExpectedCatalogRevision: 1, Target: &target})
	if r := ok[protocol.CatalogCommitted](h, protocol.OpConnectionCatalogSetDefaultTarget,
		protocol.CatalogSetDefaultTargetInput{ExpectedCatalogRevision: 2, Target: &target}); r.CatalogRevision != 3 {
		t.Fatalf("set default %+v", r)
	}

	// Disabling the default connection or dropping its model is refused.
	update := func(rev int64, enabled bool, models ...string) (any, *protocol.OpError) {
		return h.do(protocol.OpConnectionCatalogUpdate, protocol.CatalogUpdateInput{
			Expected: protocol.ConnectionVersionBasis{ConnectionID: a.Connection.ConnectionID, Revision: rev},
			Changes:  protocol.ConnectionChanges{Name: "renamed", Enabled: enabled, EnabledModelIDs: models}})
	}
	for _, tc := range []struct {
		enabled bool
		models  []string
	}{{false, []string{"gpt-a", "gpt-b"}}, {true, []string{"gpt-a"}}} {
		res, opErr := update(1, tc.enabled, tc.models...)
		if r, isR := res.(protocol.InvalidDefaultTarget); opErr != nil || !isR || r.Target != target {
			t.Fatalf("update %+v: %#v %v, want invalid_default_target", tc, res, opErr)
		}
	}
	res, _ := update(7, true, "gpt-b")
	if s, isS := res.(protocol.ConnectionStale); !isS || s.Actual == nil || s.Actual.Revision != 1 || s.Expected.Revision != 7 {
		t.Fatalf("stale update %#v", res)
	}
	res, _ = update(1, true, "gpt-b", "gpt-c")
	if c, isC := res.(protocol.CatalogConnectionCommitted); !isC || c.CatalogRevision != 4 || c.Connection.Revision != 2 {
		t.Fatalf("update %#v", res)
	}

	// Base URLs are normalized against the provider default.
	res, _ = h.do(protocol.OpConnectionCatalogUpdate, protocol.CatalogUpdateInput{
		Expected: protocol.ConnectionVersionBasis{ConnectionID: b.Connection.ConnectionID, Revision: 1},
		Changes:  protocol.ConnectionChanges{Name: "relay", BaseURL: "HTTPS://Relay.Example:443/v1/../api", Enabled: false}})
	if _, isC := res.(protocol.CatalogConnectionCommitted); !isC {
		t.Fatalf("update base URL %#v", res)
	}
	copilot := h.create(5, "copilot", "github-copilot", true)
	fails(h, protocol.OpConnectionCatalogUpdate, protocol.CatalogUpdateInput{
		Expected: protocol.ConnectionVersionBasis{ConnectionID: copilot.Connection.ConnectionID, Revision: 1},
		Changes:  protocol.ConnectionChanges{BaseURL: "https://proxy.example", Enabled: true}},
		protocol.ErrInvalidRequest, MessageMutationInvalid)
	ok[protocol.CatalogConnectionCommitted](h, protocol.OpConnectionCatalogCreate, protocol.CatalogCreateInput{
		ExpectedCatalogRevision: 6, Connection: protocol.ConnectionDraft{Slug: "openai-default", ProviderType: "openai",
			BaseURL: " HTTPS://API.OPENAI.COM/v1 "}})

	items, _ := h.readCatalog()
	headers := map[string]protocol.CatalogConnectionHeader{}
	for _, it := range items {
		if hd, isH := it.(protocol.CatalogConnectionHeader); isH {
			headers[hd.Slug] = hd
		}
	}
	if got := headers["beta"].BaseURL; got != "https://relay.example/api" {
		t.Fatalf("beta baseUrl %q", got)
	}
	if got := headers["openai-default"].BaseURL; got != "" {
		t.Fatalf("a base URL equal to the provider default is kept: %q", got)
	}
	if hd := headers["alpha"]; hd.Name != "renamed" || hd.Revision != 2 || hd.EnabledModelIDCount != 2 {
		t.Fatalf("alpha header %+v", hd)
	}

	// Removing the default connection clears the default target.
	stale := ok[protocol.ConnectionStale](h, protocol.OpConnectionCatalogRemove, protocol.CatalogRemoveInput{
		Expected: protocol.ConnectionVersionBasis{ConnectionID: uuid.NewString(), Revision: 1}})
	if stale.Actual != nil {
		t.Fatalf("stale remove of a missing connection %+v", stale)
	}
	if r := ok[protocol.CatalogCommitted](h, protocol.OpConnectionCatalogRemove, protocol.CatalogRemoveInput{
		Expected: protocol.ConnectionVersionBasis{ConnectionID: a.Connection.ConnectionID, Revision: 2}}); r.CatalogRevision != 8 {
		t.Fatalf("remove %+v", r)
	}
	page := ok[protocol.CatalogPage](h, protocol.OpConnectionCatalogQuery, protocol.CatalogQueryInput{})
	if page.DefaultTarget != nil || page.ConnectionCount != 3 || page.Revision != 8 {
		t.Fatalf("page after removal: target %v, %d connections, revision %d", page.DefaultTarget, page.ConnectionCount, page.Revision)
	}
	if inv, _ := h.counts(); inv != 8 {
		t.Fatalf("%d invalidations, want one per committed mutation (8)", inv)
	}
}

// ---- catalog paging (guarantee 54) ----

// seedCatalog writes a catalog document directly (models come from model
// discovery, which no operation of this package performs).
func (h *harness) seedCatalog(conns []Connection, target *protocol.ConnectionTarget) {
	h.t.Helper()
	rev, _, _ := h.docs.Document(DocConnectionCatalog)
	body, err := encodeCatalog(Catalog{DefaultTarget: target, Connections: conns})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.docs.Store(context.Background(), DocConnectionCatalog, rev, rev+1, body); err != nil {
		h.t.Fatal(err)
	}
}

func testConnection(i, ids, models int, displayName string) Connection {
	c := Connection{ConnectionID: uuid.NewString(), Revision: int64(i + 1), Slug: fmt.Sprintf("conn-%d", i),
		Name: fmt.Sprintf("Connection %d", i), ProviderType: "openai", Enabled: i%2 == 0}
	for j := range ids {
		c.EnabledModelIDs = append(c.EnabledModelIDs, fmt.Sprintf("enabled-%d-%d", i, j))
	}
	if models > 0 {
		at := int64(1000 + i)
		c.ModelSource, c.ModelsFetchedAt = protocol.ModelSourceFetched, &at
	}
	for j := range models {
		m := protocol.ConnectionModel{ID: fmt.Sprintf("model-%d-%d", i, j)}
		if displayName != "" {
			name := displayName
			m.DisplayName = &name
		}
		c.Models = append(c.Models, m)
	}
	return c
}

// connectionsWithItems returns connections whose flattened catalog holds n
// items, mixing headers, enabled model ids and models.
func connectionsWithItems(n int) []Connection {
	var conns []Connection
	for i := 0; n > 0; i++ {
		n-- // header
		ids := min(n, 20)
		n -= ids
		models := min(n, 29)
		n -= models
		conns = append(conns, testConnection(i, ids, models, ""))
	}
	return conns
}

// flatten is the expected order of catalog items (each connection's header,
// then its enabled model ids, then its models), written independently of
// the coordinator's pager.
func flatten(conns []Connection) []protocol.CatalogItem {
	var out []protocol.CatalogItem
	for i, c := range conns {
		ci := int64(i)
		out = append(out, protocol.CatalogConnectionHeader{ConnectionIndex: ci, ConnectionID: c.ConnectionID, Revision: c.Revision,
			Slug: c.Slug, Name: c.Name, ProviderType: c.ProviderType, BaseURL: c.BaseURL, Enabled: c.Enabled,
			ModelSource: c.ModelSource, ModelsFetchedAt: c.ModelsFetchedAt, LastTest: c.LastTest,
			EnabledModelIDCount: int64(len(c.EnabledModelIDs)), ModelCount: int64(len(c.Models))})
		for j, id := range c.EnabledModelIDs {
			out = append(out, protocol.CatalogEnabledModelIDItem{ConnectionIndex: ci, ItemIndex: int64(j), ModelID: id})
		}
		for j, m := range c.Models {
			out = append(out, protocol.CatalogModelItem{ConnectionIndex: ci, ItemIndex: int64(j), Model: m})
		}
	}
	return out
}

func encodeItems(t *testing.T, items []protocol.CatalogItem) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = mustMarshal(t, it)
	}
	return out
}

// checkPages verifies that the pages reconstruct want and that each page is
// within bounds and full: the next item would break the item or byte bound.
func checkPages(t *testing.T, items []protocol.CatalogItem, pages []protocol.CatalogPage, want []protocol.CatalogItem) {
	t.Helper()
	got, exp := encodeItems(t, items), encodeItems(t, want)
	if !slices.Equal(got, exp) {
		t.Fatalf("reconstructed %d items, want %d (first difference at %d)", len(got), len(exp), firstDiff(got, exp))
	}
	sent := 0
	for i, p := range pages {
		size, err := protocol.EncodedSize(p)
		if err != nil || size > protocol.ConnectionCatalogPageMaxBytes || len(p.Items) > protocol.ConnectionCatalogPageMaxItems {
			t.Fatalf("page %d: %d items, %d bytes (%v)", i, len(p.Items), size, err)
		}
		sent += len(p.Items)
		if p.NextCursor == nil {
			if i != len(pages)-1 || sent != len(want) {
				t.Fatalf("page %d ends the catalog after %d of %d items", i, sent, len(want))
			}
			continue
		}
		if *p.NextCursor != want[sent].Position() {
			t.Fatalf("page %d next cursor %+v, want %+v", i, *p.NextCursor, want[sent].Position())
		}
		if len(p.Items) == protocol.ConnectionCatalogPageMaxItems {
			continue
		}
		fuller := p
		fuller.Items = append(slices.Clone(p.Items), want[sent])
		fuller.NextCursor = nil
		if sent+1 < len(want) {
			c := want[sent+1].Position()
			fuller.NextCursor = &c
		}
		if n, _ := protocol.EncodedSize(fuller); n <= protocol.ConnectionCatalogPageMaxBytes {
			t.Fatalf("page %d (%d items, %d bytes) could have held the next item (%d bytes)", i, len(p.Items), size, n)
		}
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestGuarantee54PagesReconstructCatalog(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 129} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			h := newHarness(t)
			conns := connectionsWithItems(n)
			if n > 0 {
				target := protocol.ConnectionTarget{ConnectionID: conns[0].ConnectionID, ModelID: "enabled-0-0"}
				h.seedCatalog(conns, &target)
			}
			items, pages := h.readCatalog()
			want := flatten(conns)
			if len(want) != n {
				t.Fatalf("test catalog has %d items, want %d", len(want), n)
			}
			checkPages(t, items, pages, want)
			wantPages := max(1, (n+127)/128)
			if len(pages) != wantPages {
				t.Fatalf("%d pages, want %d", len(pages), wantPages)
			}
			for _, p := range pages {
				if p.ConnectionCount != int64(len(conns)) {
					t.Fatalf("connectionCount %d, want %d", p.ConnectionCount, len(conns))
				}
				if (p.DefaultTarget != nil) != (n > 0) {
					t.Fatalf("defaultTarget %v", p.DefaultTarget)
				}
			}
		})
	}
}

func TestGuarantee54PagesRespectByteBound(t *testing.T) {
	h := newHarness(t)
	// Control characters encode as \u00XX: six bytes per character, so a
	// model item is about 3 KiB and a page holds far fewer than 128.
	name := strings.Repeat("\x01", 512)
	conns := []Connection{testConnection(0, 3, 40, name), testConnection(1, 0, 0, ""), testConnection(2, 5, 37, name)}
	// Items of varied medium size, so that the byte bound, not the item
	// bound, ends pages at many different offsets.
	varied := testConnection(3, 0, 1000, "")
	for j := range varied.Models {
		dn := strings.Repeat("m", 300+(j*37)%212)
		varied.Models[j].DisplayName = &dn
	}
	conns = append(conns, varied)
	h.seedCatalog(conns, nil)
	items, pages := h.readCatalog()
	checkPages(t, items, pages, flatten(conns))
	byBytes := 0
	for _, p := range pages[:len(pages)-1] {
		if len(p.Items) < protocol.ConnectionCatalogPageMaxItems {
			byBytes++
		}
	}
	if byBytes < 8 {
		t.Fatalf("only %d of %d pages were ended by the byte bound", byBytes, len(pages))
	}
}

func TestGuarantee54StaleRevisionAndUnknownCursor(t *testing.T) {
	h := newHarness(t)
	conns := connectionsWithItems(201) // the last connection has only its header
	h.seedCatalog(conns, nil)
	first := ok[protocol.CatalogPage](h, protocol.OpConnectionCatalogQuery, protocol.CatalogQueryInput{})
	if first.NextCursor == nil {
		t.Fatal("expected more than one page")
	}
	for _, cursor := range []protocol.CatalogCursor{
		{ConnectionIndex: int64(len(conns)), Part: protocol.CatalogPartConnection},
		{ConnectionIndex: 0, Part: protocol.CatalogPartEnabledModelID, ItemIndex: 20},
		{ConnectionIndex: 0, Part: protocol.CatalogPartModel, ItemIndex: 29},
		{ConnectionIndex: int64(len(conns) - 1), Part: protocol.CatalogPartModel, ItemIndex: 0}, // last connection has no models
	} {
		fails(h, protocol.OpConnectionCatalogQuery, protocol.CatalogQueryInput{Revision: first.Revision, Cursor: &cursor},
			protocol.ErrInvalidRequest, MessageInvalidCatalogCursor)
	}
	// Any cursor naming an item is accepted and starts there.
	mid := protocol.CatalogCursor{ConnectionIndex: 1, Part: protocol.CatalogPartModel, ItemIndex: 3}
	p := ok[protocol.CatalogPage](h, protocol.OpConnectionCatalogQuery, protocol.CatalogQueryInput{Revision: first.Revision, Cursor: &mid})
	if p.Items[0].Position() != mid {
		t.Fatalf("page starts at %+v", p.Items[0].Position())
	}

	h.create(first.Revision, "newcomer", "openai", true)
	changed := ok[protocol.CatalogRevisionChanged](h, protocol.OpConnectionCatalogQuery,
		protocol.CatalogQueryInput{Revision: first.Revision, Cursor: first.NextCursor})
	if changed.ExpectedRevision != first.Revision || changed.ActualRevision != first.Revision+1 {
		t.Fatalf("revision_changed %+v", changed)
	}
	// A stale revision wins over an unknown cursor.
	bad := protocol.CatalogCursor{ConnectionIndex: 1000, Part: protocol.CatalogPartConnection}
	ok[protocol.CatalogRevisionChanged](h, protocol.OpConnectionCatalogQuery, protocol.CatalogQueryInput{Revision: first.Revision, Cursor: &bad})
}

// ---- credential vault (guarantee 53) ----

func TestGuarantee53SecretsNeverReturned(t *testing.T) {
	h := newHarness(t)
	conn := h.create(0, "primary", "openai", true, "gpt")
	loc := protocol.ConnectionCredential(conn.Connection.ConnectionID, protocol.CredentialKindAPIKey)
	secret1 := "sk-first-" + strings.ReplaceAll(uuid.NewString(), "-", "")
	secret2 := "sk-second-" + strings.ReplaceAll(uuid.NewString(), "-", "")

	status := ok[protocol.CredentialStatusResult](h, protocol.OpCredentialVaultQuery, protocol.CredentialVaultQueryInput{Locator: loc})
	if status.Status.Configured {
		t.Fatalf("configured before any set: %+v", status)
	}
	set1 := ok[protocol.CredentialCommitted](h, protocol.OpCredentialVaultSet, protocol.CredentialVaultSetInput{Locator: loc, Secret: secret1})
	if set1.VaultRevision != 1 || !set1.Status.Configured || *set1.Status.Revision != 1 || *set1.Status.UpdatedAt != 1_700_000_000_000 {
		t.Fatalf("first set %+v", set1)
	}
	credID := *set1.Status.CredentialID
	if u, err := uuid.Parse(credID); err != nil || u.Version() != 4 {
		t.Fatalf("credentialId %q", credID)
	}
	set2 := ok[protocol.CredentialCommitted](h, protocol.OpCredentialVaultSet, protocol.CredentialVaultSetInput{
		Locator: loc, Expected: &protocol.CredentialExpectation{CredentialID: credID, Revision: 1}, Secret: secret2})
	if set2.VaultRevision != 2 || *set2.Status.CredentialID != credID || *set2.Status.Revision != 2 {
		t.Fatalf("second set %+v", set2)
	}
	// Stale expectations.
	stale := ok[protocol.CredentialStale](h, protocol.OpCredentialVaultSet, protocol.CredentialVaultSetInput{
		Locator: loc, Expected: &protocol.CredentialExpectation{CredentialID: credID, Revision: 1}, Secret: secret1})
	if stale.Expected == nil || stale.Expected.Revision != 1 || stale.Actual == nil || stale.Actual.Revision != 2 {
		t.Fatalf("stale %+v", stale)
	}
	stale = ok[protocol.CredentialStale](h, protocol.OpCredentialVaultSet, protocol.CredentialVaultSetInput{Locator: loc, Secret: secret1})
	if stale.Expected != nil || stale.Actual == nil || stale.Actual.CredentialID != credID {
		t.Fatalf("stale with null expectation %+v", stale)
	}
	if got, found := h.secrets.Get(loc); !found || got != secret2 {
		t.Fatal("secret file does not hold the latest secret")
	}
	reopened, err := OpenSecretFile(h.secrets.Path())
	if err != nil {
		t.Fatal(err)
	}
	if got, found := reopened.Get(loc); !found || got != secret2 {
		t.Fatal("secret not durable in the secret file")
	}
	got := ok[protocol.CredentialStatusResult](h, protocol.OpCredentialVaultQuery, protocol.CredentialVaultQueryInput{Locator: loc})
	if mustMarshal(t, got.Status) != mustMarshal(t, set2.Status) {
		t.Fatalf("query %+v, want %+v", got.Status, set2.Status)
	}
	// A failing write reports persistence_failed without the secret.
	h.docs.FailNextStore(errors.New("write failed"))
	fails(h, protocol.OpCredentialVaultSet, protocol.CredentialVaultSetInput{
		Locator: loc, Expected: &protocol.CredentialExpectation{CredentialID: credID, Revision: 2}, Secret: secret1},
		protocol.ErrPersistenceFailed, MessagePersistenceFailed)
	h.readCatalog()

	// Remove the connection: its credential is gone and its locator no
	// longer resolves.
	ok[protocol.CatalogCommitted](h, protocol.OpConnectionCatalogRemove, protocol.CatalogRemoveInput{Expected: conn.Connection})
	basis := protocol.CredentialVersionBasis{Locator: loc, CredentialID: credID, Revision: 2}
	ok[protocol.CredentialConnectionNotFound](h, protocol.OpCredentialVaultDelete, protocol.CredentialVaultDeleteInput{Expected: basis})
	ok[protocol.CredentialConnectionNotFound](h, protocol.OpCredentialVaultQuery, protocol.CredentialVaultQueryInput{Locator: loc})
	ok[protocol.CredentialConnectionNotFound](h, protocol.OpCredentialVaultSet, protocol.CredentialVaultSetInput{Locator: loc, Secret: secret1})
	if _, found := h.secrets.Get(loc); found {
		t.Fatal("secret of a removed connection kept")
	}

	h.mu.Lock()
	responses := slices.Clone(h.responses)
	h.mu.Unlock()
	if len(responses) < 10 {
		t.Fatalf("only %d responses recorded", len(responses))
	}
	for _, r := range responses {
		for _, s := range []string{secret1, secret2} {
			if bytes.Contains(r, []byte(s)) {
				t.Fatalf("response %s contains a secret", r)
			}
		}
	}
	for _, name := range []string{DocRuntimePolicy, DocConnectionCatalog, DocCredentialVault} {
		_, body, _ := h.docs.Document(name)
		if bytes.Contains(body, []byte("sk-")) {
			t.Fatalf("document %s contains a secret", name)
		}
	}
	file, err := os.ReadFile(h.secrets.Path())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(file, []byte("sk-")) {
		t.Fatal("secret file keeps the secret of a removed connection")
	}
}

func TestVaultSetDeleteCycle(t *testing.T) {
	h := newHarness(t)
	for _, loc := range []protocol.CredentialLocator{protocol.NetworkProxyCredential(), protocol.WebSearchCredential(protocol.WebSearchProviderTavily)} {
		set := ok[protocol.CredentialCommitted](h, protocol.OpCredentialVaultSet, protocol.CredentialVaultSetInput{Locator: loc, Secret: "pw-1"})
		id := *set.Status.CredentialID
		basis := protocol.CredentialVersionBasis{Locator: loc, CredentialID: id, Revision: 1}
		wrong := basis
		wrong.CredentialID = uuid.NewString()
		stale := ok[protocol.CredentialStale](h, protocol.OpCredentialVaultDelete, protocol.CredentialVaultDeleteInput{Expected: wrong})
		if stale.Actual == nil || stale.Actual.CredentialID != id {
			t.Fatalf("stale delete %+v", stale)
		}
		del := ok[protocol.CredentialCommitted](h, protocol.OpCredentialVaultDelete, protocol.CredentialVaultDeleteInput{Expected: basis})
		if del.Status.Configured || del.VaultRevision != set.VaultRevision+1 {
			t.Fatalf("delete %+v", del)
		}
		if _, found := h.secrets.Get(loc); found {
			t.Fatal("deleted secret still readable")
		}
		stale = ok[protocol.CredentialStale](h, protocol.OpCredentialVaultDelete, protocol.CredentialVaultDeleteInput{Expected: basis})
		if stale.Actual != nil {
			t.Fatalf("second delete %+v", stale)
		}
		again := ok[protocol.CredentialCommitted](h, protocol.OpCredentialVaultSet, protocol.CredentialVaultSetInput{Locator: loc, Secret: "pw-2"})
		if *again.Status.CredentialID == id || *again.Status.Revision != 1 {
			t.Fatalf("set after delete reuses the credential: %+v", again)
		}
	}
}

func TestVaultWriteFailureRestoresSecret(t *testing.T) {
	h := newHarness(t)
	loc := protocol.NetworkProxyCredential()
	set := ok[protocol.CredentialCommitted](h, protocol.OpCredentialVaultSet, protocol.CredentialVaultSetInput{Locator: loc, Secret: "old"})
	exp := &protocol.CredentialExpectation{CredentialID: *set.Status.CredentialID, Revision: 1}

	h.docs.FailNextStore(errors.New("disk full"))
	fails(h, protocol.OpCredentialVaultSet, protocol.CredentialVaultSetInput{Locator: loc, Expected: exp, Secret: "new"},
		protocol.ErrPersistenceFailed, MessagePersistenceFailed)
	reopened, err := OpenSecretFile(h.secrets.Path())
	if err != nil {
		t.Fatal(err)
	}
	for _, sf := range []*SecretFile{h.secrets, reopened} {
		if got, _ := sf.Get(loc); got != "old" {
			t.Fatalf("secret %q after a failed write, want the previous one", got)
		}
	}
	// An unknown outcome keeps the new secret and invalidates.
	h.docs.FailNextStoreUnknown(true)
	fails(h, protocol.OpCredentialVaultSet, protocol.CredentialVaultSetInput{Locator: loc, Expected: exp, Secret: "newer"},
		protocol.ErrCommitOutcomeUnknown, MessageCommitOutcomeUnknown)
	if got, _ := h.secrets.Get(loc); got != "newer" {
		t.Fatalf("secret %q after an unknown outcome", got)
	}
	if inv, _ := h.counts(); inv != 2 {
		t.Fatalf("%d invalidations, want 2", inv)
	}
}

func TestVaultCredentialKindMustFitProvider(t *testing.T) {
	h := newHarness(t)
	copilot := h.create(0, "copilot", "github-copilot", true)
	local := h.create(1, "local", "ollama", true)
	for _, loc := range []protocol.CredentialLocator{
		protocol.ConnectionCredential(copilot.Connection.ConnectionID, protocol.CredentialKindAPIKey),
		protocol.ConnectionCredential(local.Connection.ConnectionID, protocol.CredentialKindAPIKey),
	} {
		fails(h, protocol.OpCredentialVaultQuery, protocol.CredentialVaultQueryInput{Locator: loc}, protocol.ErrInvalidRequest, MessageCredentialQueryInvalid)
		fails(h, protocol.OpCredentialVaultSet, protocol.CredentialVaultSetInput{Locator: loc, Secret: "x"}, protocol.ErrInvalidRequest, MessageMutationInvalid)
	}
	loc := protocol.ConnectionCredential(copilot.Connection.ConnectionID, protocol.CredentialKindOAuthToken)
	ok[protocol.CredentialCommitted](h, protocol.OpCredentialVaultSet, protocol.CredentialVaultSetInput{Locator: loc, Secret: "token"})
}

// ---- activation gate (guarantee 55) ----

func TestGuarantee55MutationWaitsForActivations(t *testing.T) {
	h := newHarness(t)
	var log eventLog
	running := make(chan struct{})
	release := make(chan struct{})
	actDone := make(chan error, 1)
	go func() {
		actDone <- h.c.Activate(context.Background(), func() error {
			close(running)
			<-release
			log.add("activation-1 done")
			return nil
		})
	}()
	<-running

	queued := make(chan int, 1)
	h.c.gate.setHook(func(mutation bool, waits int) { queued <- waits })
	h.docs.OnStore(func(string) { log.add("store") })
	h.setInvalidate(func() error { log.add("invalidate"); return nil })
	mut := h.async(protocol.OpRuntimePolicyMutate, setMemory(0, false))
	if w := <-queued; w != 1 {
		t.Fatalf("mutation waits for %d entries, want the running activation", w)
	}
	// An activation arriving now waits for the queued mutation.
	act2Done := make(chan error, 1)
	go func() {
		act2Done <- h.c.Activate(context.Background(), func() error { log.add("activation-2"); return nil })
	}()
	if w := <-queued; w != 1 {
		t.Fatalf("later activation waits for %d entries, want the queued mutation", w)
	}
	select {
	case r := <-mut:
		t.Fatalf("mutation finished while an activation was running: %#v", r)
	default:
	}
	close(release)
	if err := <-actDone; err != nil {
		t.Fatal(err)
	}
	if r := <-mut; r.err != nil {
		t.Fatalf("mutation: %v", r.err)
	}
	if err := <-act2Done; err != nil {
		t.Fatal(err)
	}
	want := []string{"activation-1 done", "store", "invalidate", "activation-2"}
	if got := log.get(); !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestGuarantee55ActivationWaitsForRunningMutation(t *testing.T) {
	h := newHarness(t)
	var log eventLog
	storing := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	h.docs.OnStore(func(string) {
		once.Do(func() { close(storing); <-release })
		log.add("store")
	})
	h.setInvalidate(func() error { log.add("invalidate"); return nil })
	mut := h.async(protocol.OpConnectionCatalogCreate, protocol.CatalogCreateInput{
		Connection: protocol.ConnectionDraft{Slug: "gated", ProviderType: "openai"}})
	<-storing

	queued := make(chan int, 1)
	h.c.gate.setHook(func(mutation bool, waits int) { queued <- waits })
	actDone := make(chan error, 1)
	go func() {
		actDone <- h.c.Activate(context.Background(), func() error { log.add("activation"); return nil })
	}()
	if w := <-queued; w != 1 {
		t.Fatalf("activation waits for %d entries, want the running mutation", w)
	}
	select {
	case err := <-actDone:
		t.Fatalf("activation finished during a mutation (%v)", err)
	default:
	}
	close(release)
	if r := <-mut; r.err != nil {
		t.Fatal(r.err)
	}
	if err := <-actDone; err != nil {
		t.Fatal(err)
	}
	if got, want := log.get(), []string{"store", "invalidate", "activation"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestActivationsRunConcurrently(t *testing.T) {
	h := newHarness(t)
	a, b := make(chan struct{}), make(chan struct{})
	// Each activation waits for the other to have started: serialized
	// activations would never both start.
	meet := func(mine, other chan struct{}) func() error {
		return func() error {
			close(mine)
			select {
			case <-other:
				return nil
			case <-time.After(10 * time.Second):
				return errors.New("the other activation never started")
			}
		}
	}
	errs := make(chan error, 2)
	go func() { errs <- h.c.Activate(context.Background(), meet(a, b)) }()
	go func() { errs <- h.c.Activate(context.Background(), meet(b, a)) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestActivationWaitEndsWithContext(t *testing.T) {
	h := newHarness(t)
	storing := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	h.docs.OnStore(func(string) { once.Do(func() { close(storing); <-release }) })
	mut := h.async(protocol.OpRuntimePolicyMutate, setMemory(0, true))
	<-storing
	ctx, cancel := context.WithCancel(context.Background())
	h.c.gate.setHook(func(bool, int) { cancel() })
	ran := false
	if err := h.c.Activate(ctx, func() error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("err %v, ran %t", err, ran)
	}
	h.c.gate.setHook(nil)
	close(release)
	if r := <-mut; r.err != nil {
		t.Fatal(r.err)
	}
	// The abandoned entry does not hold the gate.
	if err := h.c.Activate(context.Background(), func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	ok[protocol.PolicyCommitted](h, protocol.OpRuntimePolicyMutate, setMemory(1, false))
}

// ---- secret file ----

func TestSecretFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secrets.json")
	sf, err := OpenSecretFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode() != 0o600 {
		t.Fatalf("created file mode %v (%v), want 0600", fi.Mode(), err)
	}
	loc := protocol.WebSearchCredential(protocol.WebSearchProviderTavily)
	if _, found := sf.Get(loc); found {
		t.Fatal("secret in a new file")
	}
	if err := sf.replace(map[string]string{LocatorKey(loc): "tvly-secret"}); err != nil {
		t.Fatal(err)
	}
	again, err := OpenSecretFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := again.Get(loc); got != "tvly-secret" {
		t.Fatalf("reopened secret %q", got)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("directory holds %v (%v), want only the secret file", entries, err)
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSecretFile(path); err == nil {
		t.Fatal("opened a 0644 secret file")
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}

	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSecretFile(link); err == nil {
		t.Fatal("opened a secret file through a symbolic link")
	}
	if _, err := OpenSecretFile(dir); err == nil {
		t.Fatal("opened a directory as the secret file")
	}

	bad := filepath.Join(dir, "bad.json")
	for _, content := range []string{`["sk-leaked-value"]`, `{"k":1}`, `{"k":"sk-leaked-value"`} {
		if err := os.WriteFile(bad, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := OpenSecretFile(bad)
		if err == nil {
			t.Fatalf("opened secret file %s", content)
		}
		if strings.Contains(err.Error(), "leaked") {
			t.Fatalf("error quotes the content: %v", err)
		}
	}
}

// setHook installs the arrival hook.
func (g *gate) setHook(fn func(mutation bool, waits int)) {
	g.mu.Lock()
	g.onEnqueue = fn
	g.mu.Unlock()
}
