package domain_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/domaintest"
	"github.com/maka-agent/maka/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runHost starts the full composition on root (a fresh one when root is
// "") and returns it with a connected client.
func runHost(t *testing.T, root string) (*domaintest.Host, *client.Conn) {
	t.Helper()
	h := domaintest.Start(t, root, domain.Options{})
	return h, h.Connect(t, protocol.SurfaceTUI, 10*time.Second)
}

// stop shuts h down cleanly before a restart on its root.
func stop(t *testing.T, h *domaintest.Host) {
	t.Helper()
	if err := h.Stop(); err != nil {
		t.Errorf("host close: %v", err)
	}
}

func call[T any](t *testing.T, c *client.Conn, op protocol.Operation, in any) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Call(ctx, op, in)
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	out, ok := res.(T)
	if !ok {
		t.Fatalf("%s: result %T", op, res)
	}
	return out
}

func TestSessionsSurviveARestartAndSubscribersSeeLifecycleChanges(t *testing.T) {
	h, c := runHost(t, "")

	in := protocol.SessionCreateInput{SessionID: "s1", Workspace: protocol.HostPathWorkspace("/work/s1"), Name: "first"}
	created := call[protocol.SessionSummary](t, c, protocol.OpSessionCreate, in)
	if created.SessionID != "s1" || created.Status != protocol.SessionActive || created.IsArchived {
		t.Fatalf("created %+v", created)
	}
	again := call[protocol.SessionSummary](t, c, protocol.OpSessionCreate, in)
	if again.CreatedAt != created.CreatedAt {
		t.Fatalf("idempotent create returned another session: %+v", again)
	}
	in.Name = "different"
	if _, err := c.Call(context.Background(), protocol.OpSessionCreate, in); !client.IsCode(err, protocol.ErrOperationConflict) {
		t.Fatalf("conflicting create: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := c.OpenSubscription(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if sub.Open.Snapshot.Session.SessionID != "s1" || sub.Open.Snapshot.ProjectionRevision != 1 || sub.Open.Snapshot.RootTurn != nil {
		t.Fatalf("snapshot %+v", sub.Open.Snapshot)
	}
	archived := call[protocol.SessionSummary](t, c, protocol.OpSessionLifecycleSet,
		protocol.SessionLifecycleSetInput{SessionID: "s1", Action: protocol.SessionActionArchive})
	if !archived.IsArchived || archived.ArchivedAt == nil {
		t.Fatalf("archive %+v", archived)
	}
	frame, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pf, ok := frame.(protocol.ProjectionFrame)
	if !ok || !pf.Snapshot.Session.IsArchived || pf.Snapshot.ProjectionRevision != 2 || pf.Sequence != 1 {
		t.Fatalf("projection after archive: %#v", frame)
	}

	if _, err := c.Call(ctx, protocol.OpSessionCatalogQuery, protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogGet, SessionID: "s1"}); err != nil {
		t.Fatal(err)
	}
	stop(t, h)

	_, c2 := runHost(t, h.Root)
	got := call[protocol.SessionCatalogQueryResult](t, c2, protocol.OpSessionCatalogQuery,
		protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogGet, SessionID: "s1"})
	if got.Session == nil || got.Session.Name != "first" || !got.Session.IsArchived {
		t.Fatalf("after restart: %+v", got.Session)
	}
}

func TestConfigurationIsDurableAndSecretsAreNeverReturned(t *testing.T) {
	h, c := runHost(t, "")
	ctx := context.Background()

	pol, err := c.QueryRuntimePolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	priv := protocol.PrivacyPolicy{IncognitoActive: true}
	res, err := c.MutateRuntimePolicy(ctx, protocol.RuntimePolicyMutateInput{
		ExpectedRevision: pol.Revision, Operation: protocol.RuntimePolicyOperation{Value: priv},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.(protocol.PolicyCommitted); !ok {
		t.Fatalf("mutate %#v", res)
	}
	// The same expected revision again loses.
	res, err = c.MutateRuntimePolicy(ctx, protocol.RuntimePolicyMutateInput{
		ExpectedRevision: pol.Revision, Operation: protocol.RuntimePolicyOperation{Value: priv},
	})
	if _, ok := res.(protocol.RevisionConflict); err != nil || !ok {
		t.Fatalf("stale mutate %#v %v", res, err)
	}

	const secret = "proxy-password-never-echoed-7f3a"
	set, err := c.SetCredential(ctx, protocol.CredentialVaultSetInput{
		Locator: protocol.NetworkProxyCredential(), Secret: secret,
	})
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := protocol.Marshal(set)
	if bytes.Contains(enc, []byte(secret)) {
		t.Fatal("credential.vault.set echoed the secret")
	}
	stop(t, h)
	db, err := os.ReadFile(filepath.Join(h.Root, domain.DatabaseFile))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(db, []byte(secret)) {
		t.Fatal("the secret is in the database")
	}
	if fi, err := os.Stat(filepath.Join(h.Root, domain.SecretsFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secrets file: %v %v", fi, err)
	}

	_, c2 := runHost(t, h.Root)
	pol2, err := c2.QueryRuntimePolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !pol2.Policy.Privacy.IncognitoActive || pol2.Revision <= pol.Revision {
		t.Fatalf("policy after restart %+v", pol2)
	}
	q, err := c2.QueryCredential(ctx, protocol.CredentialVaultQueryInput{Locator: protocol.NetworkProxyCredential()})
	if err != nil {
		t.Fatal(err)
	}
	st, ok := q.(protocol.CredentialStatusResult)
	if !ok || !st.Status.Configured {
		t.Fatalf("credential after restart %#v", q)
	}
	enc, _ = protocol.Marshal(q)
	if bytes.Contains(enc, []byte(secret)) {
		t.Fatal("credential.vault.query echoed the secret")
	}
	ledger, err := c2.QueryTaskLedger(ctx, protocol.TaskLedgerQueryInput{Kind: protocol.TaskQueryListStart, SessionID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if ledger.Kind != protocol.TaskResultPage || len(ledger.Tasks) != 0 {
		t.Fatalf("task ledger %#v", ledger)
	}
}
