package sessions

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// TestPermissionsAreDurableAndLayered sets a session's mode, sandbox and
// rules and the root's defaults, reopens the store and reads them back:
// LoadPermissions (what a turn uses) and the query agree, the session's own
// sandbox wins over the root's, and adding a rule twice keeps one.
func TestPermissionsAreDurableAndLayered(t *testing.T) {
	f := newFixture(t, func(_ *fixture, o *Options) {
		o.SandboxStatus = func() (bool, string) { return false, "kernel has no Landlock (ABI 0)" }
	})
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
	f.create(protocol.SessionCreateInput{SessionID: "s2", Workspace: ws("/w")})
	allowTest := protocol.PermissionRule{Effect: "allow", Rule: "Bash(go test ./...)"}
	denyPush := protocol.PermissionRule{Effect: "deny", Rule: "Bash(git push:*)"}

	got := expectOK[protocol.SessionPermissions](t, f.call(protocol.OpSessionPermissionsSet, protocol.SessionPermissionsSetInput{
		SessionID: "s1", PermissionMode: protocol.PermissionModeExplore, Sandbox: protocol.SandboxReadOnly,
		AddRules: []protocol.PermissionRule{allowTest, allowTest}}))
	if got.PermissionMode != protocol.PermissionModeExplore || got.Sandbox != protocol.SandboxReadOnly ||
		!slices.Equal(got.Rules, []protocol.PermissionRule{allowTest}) || got.SandboxAvailable || got.SandboxReason == "" {
		t.Fatalf("set: %+v", got)
	}
	if len(f.takeChanges()) == 0 {
		t.Error("a permission change did not republish the session")
	}
	root := expectOK[protocol.RootPermissions](t, f.call(protocol.OpRootPermissionsSet, protocol.RootPermissionsSetInput{
		Sandbox: protocol.SandboxOff, ReplaceRules: true, Rules: []protocol.PermissionRule{denyPush}}))
	if root.Sandbox != protocol.SandboxOff || len(root.Rules) != 1 {
		t.Fatalf("root set: %+v", root)
	}
	// The summary carries the new mode.
	if sum := expectOK[protocol.SessionCatalogQueryResult](t, f.call(protocol.OpSessionCatalogQuery,
		protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogGet, SessionID: "s1"})); sum.Session.PermissionMode != protocol.PermissionModeExplore {
		t.Fatalf("summary mode %s", sum.Session.PermissionMode)
	}

	// Reopen the store: everything is still there.
	if err := f.st.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.st = openTestStore(t, f.path)
	f.svc = New(f.st, f.gate, f.svc.opts)
	for _, tc := range []struct {
		id      string
		sandbox string
		rules   []protocol.PermissionRule
	}{
		{"s1", protocol.SandboxReadOnly, []protocol.PermissionRule{allowTest}},
		{"s2", protocol.SandboxOff, nil},
	} {
		var p Permissions
		if err := f.st.Read(testCtx(t), func(q store.Querier) error {
			var err error
			p, err = LoadPermissions(q, tc.id)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if p.Sandbox != tc.sandbox || !slices.Equal(p.Rules, tc.rules) || !slices.Equal(p.RootRules, []protocol.PermissionRule{denyPush}) {
			t.Fatalf("%s after reopening: %+v", tc.id, p)
		}
		rules, skipped := p.ToolRules()
		if len(skipped) != 0 || len(rules) != len(tc.rules)+1 || rules[0].String() != "Bash(git push:*)" {
			t.Fatalf("%s tool rules %v (skipped %v)", tc.id, rules, skipped)
		}
		q := expectOK[protocol.SessionPermissions](t, f.call(protocol.OpSessionPermissionsQuery, protocol.SessionPermissionsQueryInput{SessionID: tc.id}))
		if q.Sandbox != tc.sandbox || len(q.RootRules) != 1 {
			t.Fatalf("%s query: %+v", tc.id, q)
		}
	}

	// Replacing with an empty list clears the session's rules.
	got = expectOK[protocol.SessionPermissions](t, f.call(protocol.OpSessionPermissionsSet, protocol.SessionPermissionsSetInput{
		SessionID: "s1", ReplaceRules: true}))
	if len(got.Rules) != 0 {
		t.Fatalf("cleared rules: %+v", got.Rules)
	}
}

func TestPermissionsRefuseWhatDoesNotParse(t *testing.T) {
	f := newFixture(t)
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w")})
	for _, rule := range []string{"Bash(a; b:*)", "category:nope", "Read([)", "two words"} {
		out := f.call(protocol.OpSessionPermissionsSet, protocol.SessionPermissionsSetInput{SessionID: "s1",
			AddRules: []protocol.PermissionRule{{Effect: "allow", Rule: rule}}})
		if out.Err == nil || out.Err.Code != protocol.ErrInvalidRequest || !strings.HasPrefix(out.Err.Message, MessageInvalidRule) {
			t.Fatalf("%q: %+v", rule, out)
		}
		out = f.call(protocol.OpRootPermissionsSet, protocol.RootPermissionsSetInput{ReplaceRules: true,
			Rules: []protocol.PermissionRule{{Effect: "deny", Rule: rule}}})
		if out.Err == nil || out.Err.Code != protocol.ErrInvalidRequest {
			t.Fatalf("root %q: %+v", rule, out)
		}
	}
	var many []protocol.PermissionRule
	for i := range protocol.PermissionRulesMax {
		many = append(many, protocol.PermissionRule{Effect: "allow", Rule: "Bash(echo " + strings.Repeat("x", i+1) + ")"})
	}
	expectOK[protocol.SessionPermissions](t, f.call(protocol.OpSessionPermissionsSet, protocol.SessionPermissionsSetInput{SessionID: "s1", AddRules: many}))
	out := f.call(protocol.OpSessionPermissionsSet, protocol.SessionPermissionsSetInput{SessionID: "s1",
		AddRules: []protocol.PermissionRule{{Effect: "allow", Rule: "Read"}}})
	if out.Err == nil || out.Err.Code != protocol.ErrInvalidRequest {
		t.Fatalf("a 65th rule: %+v", out)
	}
	expectErr(t, f.call(protocol.OpSessionPermissionsQuery, protocol.SessionPermissionsQueryInput{SessionID: "nope"}), protocol.ErrNotFound, MessageSessionNotFound)
}

// TestPermissionsSetChangesThinking changes an existing session's reasoning
// effort: the answer and the query report it, the policy a turn loads
// carries it, it survives reopening the store, and a set without it keeps it.
func TestPermissionsSetChangesThinking(t *testing.T) {
	f := newFixture(t)
	f.create(protocol.SessionCreateInput{SessionID: "s1", Workspace: ws("/w"), Thinking: "low"})
	got := expectOK[protocol.SessionPermissions](t, f.call(protocol.OpSessionPermissionsSet, protocol.SessionPermissionsSetInput{
		SessionID: "s1", Thinking: "high"}))
	if got.Thinking != "high" {
		t.Fatalf("set answered thinking %q", got.Thinking)
	}
	if len(f.takeChanges()) == 0 {
		t.Error("a thinking change did not republish the session")
	}
	expectOK[protocol.SessionPermissions](t, f.call(protocol.OpSessionPermissionsSet, protocol.SessionPermissionsSetInput{
		SessionID: "s1", PermissionMode: protocol.PermissionModeExplore}))
	if err := f.st.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.st = openTestStore(t, f.path)
	f.svc = New(f.st, f.gate, f.svc.opts)
	var p Permissions
	if err := f.st.Read(testCtx(t), func(q store.Querier) error {
		var err error
		p, err = LoadPermissions(q, "s1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if p.Thinking != "high" || p.Mode != protocol.PermissionModeExplore {
		t.Fatalf("the policy a turn loads: %+v", p)
	}
	q := expectOK[protocol.SessionPermissions](t, f.call(protocol.OpSessionPermissionsQuery, protocol.SessionPermissionsQueryInput{SessionID: "s1"}))
	if q.Thinking != "high" {
		t.Fatalf("query thinking %q", q.Thinking)
	}
}
