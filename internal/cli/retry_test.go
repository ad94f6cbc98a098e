package cli_test

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maka-agent/maka/internal/modeltest"
)

// addConnectionWith is addFakeConnection with extra flags (--host-arg for
// the host that the command starts).
func addConnectionWith(t *testing.T, s *sandbox, root, baseURL string, flags ...string) {
	t.Helper()
	args := append([]string{"connection", "add", "--root", root, "--provider", "openai-compatible",
		"--base-url", baseURL, "--model", "m1"}, flags...)
	if r := s.runWith("sk-test-key\n", args...); r.code != 0 {
		t.Fatalf("connection add = %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}

// fastRetries makes the host a command starts retry from a 10 ms base
// (cap 320 ms).
const fastRetries = "--host-arg=--retry-base=10ms"

const serverErrorBody = `upstream exploded: the database is on fire (request 7f3a)`

// Every retry of a failing provider is a line on stderr with the attempt,
// the delay, the HTTP status and the body; the final explanation names
// them too. In --json mode each is a retry event.
func TestRunShowsEachRetry(t *testing.T) {
	srv := modeltest.New(t, func(*modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Status: 500, Body: serverErrorBody}
	})
	s := newSandbox(t)
	root := spawnedRoot(t)
	addConnectionWith(t, s, root, srv.BaseURL(), fastRetries)

	r := s.run("run", "--root", root, "hello")
	if r.code != 1 {
		t.Fatalf("run = %d, want 1; stderr %q", r.code, r.stderr)
	}
	what := "HTTP 500 Internal Server Error: " + serverErrorBody
	line := regexp.MustCompile(`(?m)^maka: attempt (\d+)/10 in \d+ ms: (.*)$`)
	got := line.FindAllStringSubmatch(r.stderr, -1)
	if len(got) != 9 {
		t.Fatalf("%d retry lines, want 9; stderr:\n%s", len(got), r.stderr)
	}
	for i, m := range got {
		if m[1] != fmt.Sprint(i+2) || m[2] != what {
			t.Errorf("retry line %d = %q, want attempt %d: %s", i, m[0], i+2, what)
		}
	}
	if want := "maka: the turn failed (provider_unavailable): " + what + "; "; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr does not explain the failure with %q:\n%s", want, r.stderr)
	}
	if n := len(srv.Seen()); n != 10 {
		t.Errorf("the model saw %d requests, want 10", n)
	}

	j := s.run("run", "--root", root, "--json", "hello")
	var retries []map[string]any
	events := parseEvents(t, j.stdout)
	for _, ev := range events {
		if ev["type"] == "retry" {
			retries = append(retries, ev)
		}
	}
	if len(retries) != 9 {
		t.Fatalf("%d retry events, want 9: %v", len(retries), eventTypes(events))
	}
	for i, ev := range retries {
		msg, _ := ev["message"].(string)
		if ev["attempt"] != float64(i+2) || ev["maxAttempts"] != 10.0 || ev["delayMs"] == nil || !strings.HasSuffix(msg, ": "+what) {
			t.Errorf("retry event %d = %v", i, ev)
		}
	}
	last := events[len(events)-1]
	if msg, _ := last["message"].(string); last["type"] != "result" || !strings.Contains(msg, what) {
		t.Errorf("result event %v does not carry %q", last, what)
	}
}

// A retry is shown while the turn still runs, not when it ends: the
// second attempt is held until the retry's line and event have arrived.
func TestRunShowsARetryAtOnce(t *testing.T) {
	hold := make(chan struct{})
	var calls atomic.Int32
	srv := modeltest.New(t, func(*modeltest.Request) modeltest.Reply {
		if calls.Add(1) == 1 {
			return modeltest.Reply{Status: 503, Body: "busy, try again"}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Wait: hold}, {Text: "recovered"}}}
	})
	s := newSandbox(t)
	root := spawnedRoot(t)
	addConnectionWith(t, s, root, srv.BaseURL(), fastRetries)

	lp := s.startLines("run", "--root", root, "--json", "hello")
	ev := lp.until(t, "retry")
	if ev["attempt"] != 2.0 || ev["maxAttempts"] != 10.0 || !strings.HasSuffix(ev["message"].(string), ": HTTP 503 Service Unavailable: busy, try again") {
		t.Fatalf("retry event %v", ev)
	}
	deadline := time.After(turnTimeout)
	for !strings.Contains(lp.stderrText(), "maka: attempt 2/10 in ") {
		select {
		case <-lp.stderrChanged():
		case <-deadline:
			t.Fatalf("no retry line on stderr while the turn runs: %q", lp.stderrText())
		}
	}
	close(hold)
	lines, code := lp.rest(t)
	if code != 0 || len(lines) == 0 || !strings.Contains(lines[len(lines)-1], `"status":"completed"`) {
		t.Fatalf("run = %d, last lines %q", code, lines)
	}
}

// A base URL where nothing listens gives up within 5 s (two retries, at
// the real delays) and says so, naming the URL.
func TestRunRefusedConnectionGivesUpWithinFiveSeconds(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + l.Addr().String() + "/v1"
	_ = l.Close()
	s := newSandbox(t)
	root := spawnedRoot(t)
	addConnectionWith(t, s, root, base)

	start := time.Now()
	r := s.run("run", "--root", root, "hello")
	took := time.Since(start)
	if r.code != 1 {
		t.Fatalf("run = %d, want 1; stderr %q", r.code, r.stderr)
	}
	what := "connection refused at " + base
	for _, want := range []string{
		"maka: attempt 2/3 in 1", ": " + what + "\n",
		"maka: attempt 3/3 in 2",
		"maka: the turn failed (network): " + what + "; ",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if n := strings.Count(r.stderr, "maka: attempt "); n != 2 {
		t.Errorf("%d retry lines, want 2:\n%s", n, r.stderr)
	}
	if took > 5*time.Second {
		t.Errorf("maka run took %v, want at most 5s", took)
	}
}
