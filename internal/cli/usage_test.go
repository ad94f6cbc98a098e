package cli_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/maka-agent/maka/internal/modeltest"
)

// usageModel answers the first request of each turn with a Glob call and
// the next with text, each step reporting its usage.
func usageModel(t *testing.T) *modeltest.Server {
	var calls atomic.Int32
	return modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
		if len(req.ToolResultsSinceUser()) == 0 {
			n := calls.Add(1)
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Call: &modeltest.Call{ID: "g" + string(rune('0'+n)), Name: "Glob", Arguments: `{"pattern":"*.go"}`}}},
				Usage: &modeltest.Usage{Prompt: 1200, Completion: 45}}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "done"}}, Usage: &modeltest.Usage{Prompt: 11300, Completion: 800}}
	})
}

// The result event of `maka run --json` carries the turn's token usage,
// summed over its model steps, and how it ended; --usage prints the same
// on stderr in text mode, and text mode says nothing of it without the
// flag.
func TestRunReportsUsageAndStopReason(t *testing.T) {
	srv := usageModel(t)
	s := newSandbox(t)
	root := spawnedRoot(t)
	addFakeConnection(t, s, root, srv.BaseURL(), "sk-test")

	j := s.run("run", "--root", root, "--json", "list the go files")
	if j.code != 0 {
		t.Fatalf("run --json = %d\nstderr %s", j.code, j.stderr)
	}
	events := parseEvents(t, j.stdout)
	last := events[len(events)-1]
	want := map[string]any{"inputTokens": 12500.0, "outputTokens": 845.0, "cacheReadTokens": 0.0, "reasoningTokens": 0.0}
	usage, _ := last["usage"].(map[string]any)
	if last["type"] != "result" || last["stopReason"] != "end_turn" || len(usage) != len(want) {
		t.Fatalf("result event %v, want usage %v and stopReason end_turn", last, want)
	}
	for k, v := range want {
		if usage[k] != v {
			t.Errorf("usage.%s = %v, want %v", k, usage[k], v)
		}
	}
	for _, ev := range events[:len(events)-1] {
		if ev["usage"] != nil || ev["stopReason"] != nil {
			t.Errorf("a %v event carries usage: %v", ev["type"], ev)
		}
	}

	plain := s.run("run", "--root", root, "--continue", "again")
	if plain.code != 0 || strings.Contains(plain.stderr, " in · ") || strings.Contains(plain.stderr, "end_turn") {
		t.Fatalf("run = %d; text mode without --usage speaks of usage:\n%s", plain.code, plain.stderr)
	}
	r := s.run("run", "--root", root, "--continue", "--usage", "once more")
	if r.code != 0 || !strings.Contains(r.stderr, "\nmaka: 12.5k in · 845 out · end_turn\n") {
		t.Fatalf("run --usage = %d; stderr lacks the usage line:\n%s", r.code, r.stderr)
	}
	if strings.Contains(r.stdout, "12.5k") {
		t.Errorf("the usage line went to stdout: %q", r.stdout)
	}
}

// A turn that fails says so in its result's stopReason; the provider
// reported no usage, so there is none.
func TestRunFailedTurnStopReason(t *testing.T) {
	srv := modeltest.New(t, func(*modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Status: 401, Body: `{"error":{"message":"bad key"}}`}
	})
	s := newSandbox(t)
	root := spawnedRoot(t)
	addFakeConnection(t, s, root, srv.BaseURL(), "sk-test")
	j := s.run("run", "--root", root, "--json", "hello")
	events := parseEvents(t, j.stdout)
	last := events[len(events)-1]
	if j.code != 1 || last["type"] != "result" || last["stopReason"] != "failed" || last["usage"] != nil {
		t.Fatalf("run --json = %d, result %v; want stopReason failed without usage", j.code, last)
	}
}

// maka attach ends a followed turn's line with its usage and stop reason.
func TestAttachShowsUsage(t *testing.T) {
	srv := usageModel(t)
	s := newSandbox(t)
	root := spawnedRoot(t)
	addFakeConnection(t, s, root, srv.BaseURL(), "sk-test")
	first := s.run("run", "--root", root, "--json", "one")
	sessionID, _ := parseEvents(t, first.stdout)[0]["sessionId"].(string)
	att := s.startLines("attach", sessionID, "--root", root, "--exit-after-turn")
	waitStderr(t, att, "attached to session "+sessionID)
	if r := s.run("run", "--root", root, "--session", sessionID, "two"); r.code != 0 {
		t.Fatalf("run = %d %q", r.code, r.stderr)
	}
	if _, code := att.rest(t); code != 0 || !strings.Contains(att.stderrText(), " completed · 12.5k in · 845 out · end_turn\n") {
		t.Fatalf("attach = %d; stderr lacks the usage:\n%s", code, att.stderrText())
	}
}

// TestRunUsageLineWhenTimedOut: --usage's line ends a turn stopped by
// --timeout too, with the usage of the steps that ended.
func TestRunUsageLineWhenTimedOut(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	srv := modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
		if len(req.ToolResultsSinceUser()) == 0 {
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Call: &modeltest.Call{ID: "g1", Name: "Glob", Arguments: `{"pattern":"*.go"}`}}},
				Usage: &modeltest.Usage{Prompt: 1200, Completion: 45}}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "thinking"}, {Wait: hold}}}
	})
	s := newSandbox(t)
	root := spawnedRoot(t)
	addFakeConnection(t, s, root, srv.BaseURL(), "sk-test")
	r := s.run("run", "--root", root, "--usage", "--timeout", "5s", "--permission-mode", "bypass", "list the go files")
	if r.code != 1 || !strings.Contains(r.stderr, "timed out after 5s") {
		t.Fatalf("run = %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "maka: 1.2k in · 45 out · cancelled") {
		t.Errorf("run --usage --timeout: no usage line:\n%s", r.stderr)
	}
}
