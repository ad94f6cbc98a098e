package tools

import (
	"context"
	"encoding/json"
	"testing"
)

// fakeTool is a configurable Tool for registry and permission tests.
type fakeTool struct {
	name     string
	perm     bool
	category string // returned through Categorizer when set
}

func (f fakeTool) Name() string                { return f.name }
func (f fakeTool) Description() string         { return "fake " + f.name }
func (f fakeTool) Parameters() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (f fakeTool) PermissionRequired() bool    { return f.perm }
func (f fakeTool) ActivityKind() string        { return ActivityTool }
func (f fakeTool) Run(context.Context, Env, json.RawMessage) (Result, error) {
	return TextResult(f.name), nil
}

// categorizedTool is a fakeTool that classifies its own calls.
type categorizedTool struct{ fakeTool }

func (c categorizedTool) Category(json.RawMessage) string { return c.category }

func TestRegistry(t *testing.T) {
	r := NewRegistry(Builtins()...)
	specs := r.Specs()
	want := []string{NameRead, NameWrite, NameEdit, NameBash, NameGlob, NameGrep, NameWebFetch}
	if len(specs) != len(want) {
		t.Fatalf("%d specs", len(specs))
	}
	for i, s := range specs {
		if s.Name != want[i] || s.Description == "" || !json.Valid(s.Parameters) {
			t.Errorf("spec %d: %+v", i, s)
		}
	}
	for _, q := range []struct {
		name, want string
		ok         bool
	}{{"Read", "Read", true}, {"read", "Read", true}, {"BASH", "Bash", true}, {"Nope", "", false}} {
		tool, ok := r.Lookup(q.name)
		if ok != q.ok || (ok && tool.Name() != q.want) {
			t.Errorf("Lookup(%q) = %v, %v", q.name, tool, ok)
		}
	}

	// Exact match wins over case-insensitive; a repeated name replaces the
	// earlier tool in place.
	r = NewRegistry(fakeTool{name: "x"}, fakeTool{name: "X"}, fakeTool{name: "y"}, fakeTool{name: "x", perm: true})
	if tool, _ := r.Lookup("X"); tool.Name() != "X" {
		t.Errorf("exact lookup returned %s", tool.Name())
	}
	if tool, _ := r.Lookup("x"); !tool.PermissionRequired() {
		t.Error("duplicate did not replace")
	}
	names := []string{}
	for _, s := range r.Specs() {
		names = append(names, s.Name)
	}
	if len(names) != 3 || names[0] != "x" || names[1] != "X" || names[2] != "y" {
		t.Errorf("order %v", names)
	}
	if got := len(r.Tools()); got != 3 {
		t.Errorf("Tools() = %d", got)
	}
}
