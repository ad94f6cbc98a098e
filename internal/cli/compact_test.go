package cli_test

import (
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/maka-agent/maka/internal/modeltest"
)

// TestCompactCommandAndRunNotice: a connection added with a small
// --context-window makes a long session compact; 'maka run' says so on
// stderr, and 'maka compact' compacts on demand.
func TestCompactCommandAndRunNotice(t *testing.T) {
	var summaries atomic.Int64
	srv := modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
		if strings.Contains(req.LastUser(), "Write a summary of the conversation above") {
			summaries.Add(1)
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "SUMMARY of the long turns."}}}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "ok " + strings.Repeat("answer ", 150)}}}
	})
	s := newSandbox(t)
	root := spawnedRoot(t)
	r := s.runWith("sk-key\n", "connection", "add", "--root", root, "--provider", "openai-compatible",
		"--base-url", srv.BaseURL(), "--model", "m1", "--context-window", "100000")
	if r.code != 0 {
		t.Fatalf("connection add = %d %q", r.code, r.stderr)
	}
	if r := s.run("connection", "edit", "openai-compatible", "--root", root, "--context-window", "8000"); r.code != 0 ||
		r.stdout != "connection openai-compatible: context window 8000 tokens\n" {
		t.Fatalf("connection edit = %d %q %q", r.code, r.stdout, r.stderr)
	}
	prompt := func(i int) string { return fmt.Sprintf("turn %d ", i) + strings.Repeat("keep this in mind. ", 110) }
	first := s.run("run", "--root", root, "--json", prompt(1))
	if first.code != 0 {
		t.Fatalf("run = %d %q", first.code, first.stderr)
	}
	sessionID := parseEvents(t, first.stdout)[0]["sessionId"].(string)
	notice := regexp.MustCompile(`(?m)^maka: context compacted \((\d+) → (\d+) tokens\)$`)
	noticed := false
	for i := 2; i <= 8 && !noticed; i++ {
		r := s.run("run", "--root", root, "--session", sessionID, prompt(i))
		if r.code != 0 || !strings.HasPrefix(r.stdout, "ok ") {
			t.Fatalf("run %d = %d %q %q", i, r.code, r.stdout, r.stderr)
		}
		noticed = notice.MatchString(r.stderr)
	}
	if !noticed || summaries.Load() != 1 {
		t.Fatalf("no compaction notice on stderr in 8 turns (%d summaries)", summaries.Load())
	}

	c := s.run("compact", sessionID, "--root", root)
	if c.code != 0 || !regexp.MustCompile(`^context compacted \(\d+ → \d+ tokens\)\n$`).MatchString(c.stdout) || summaries.Load() != 2 {
		t.Fatalf("compact = %d %q %q (%d summaries)", c.code, c.stdout, c.stderr, summaries.Load())
	}
	if c := s.run("compact", "0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90", "--root", root); c.code != 1 || !strings.Contains(c.stderr, "no session") {
		t.Fatalf("compact of a missing session = %d %q", c.code, c.stderr)
	}
}
