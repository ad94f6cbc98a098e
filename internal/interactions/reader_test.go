package interactions

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/protocol"
)

// countingReads is a store stand-in for the decision cache: it answers
// ids in found, fails ids in failing, and counts reads per id. When gate
// is set, every read waits for it.
type countingReads struct {
	mu      sync.Mutex
	reads   map[string]int
	found   map[string]bool
	failing map[string]bool
	gate    chan struct{}
	started chan string
}

func (c *countingReads) read(ctx context.Context, id string) (PermissionDecision, bool, error) {
	c.mu.Lock()
	c.reads[id]++
	gate, started := c.gate, c.started
	found, failing := c.found[id], c.failing[id]
	c.mu.Unlock()
	if started != nil {
		started <- id
	}
	if gate != nil {
		<-gate
	}
	switch {
	case failing:
		return PermissionDecision{}, false, errors.New("disk on fire")
	case found:
		return PermissionDecision{RequestID: id, RunID: "run-of-" + id}, true, nil
	}
	return PermissionDecision{}, false, nil
}

func (c *countingReads) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[id]
}

func newCountingReads(found ...string) *countingReads {
	c := &countingReads{reads: map[string]int{}, found: map[string]bool{}, failing: map[string]bool{}}
	for _, id := range found {
		c.found[id] = true
	}
	return c
}

// Guarantee 40: the cache holds the configured number of decisions, a hit
// refreshes recency, and the least recently used one is evicted first.
func TestDecisionCacheIsAnLRU(t *testing.T) {
	ctx := testCtx(t)
	reads := newCountingReads("a", "b", "c")
	d := newDecisionCache(2, reads.read)
	get := func(id string) {
		t.Helper()
		v, ok, err := d.get(ctx, id)
		if err != nil || !ok || v.RequestID != id || v.RunID != "run-of-"+id {
			t.Fatalf("get(%s) = %+v, %v, %v", id, v, ok, err)
		}
	}
	get("a")
	get("b")
	get("a") // hit: a is now the most recent
	get("c") // evicts b, the least recently used
	get("a")
	get("c")
	if n := reads.count("a"); n != 1 {
		t.Fatalf("a was read %d times, want 1 (hits must not read)", n)
	}
	get("b")
	if n := reads.count("b"); n != 2 {
		t.Fatalf("b was read %d times, want 2 (it was evicted)", n)
	}
	// b came back as the most recent and evicted a, the least recent.
	get("c")
	if n := reads.count("c"); n != 1 {
		t.Fatalf("c was read %d times, want 1", n)
	}
	get("a")
	if n := reads.count("a"); n != 2 {
		t.Fatalf("a was read %d times, want 2 (it was the least recent when b came back)", n)
	}
	if got := newDecisionCache(0, reads.read).capacity; got != DefaultPermissionCacheSize {
		t.Fatalf("default capacity = %d, want %d", got, DefaultPermissionCacheSize)
	}
}

// Guarantee 40: absent decisions and failed reads are not cached.
func TestDecisionCacheRereadsAbsentAndFailed(t *testing.T) {
	ctx := testCtx(t)
	reads := newCountingReads()
	reads.failing["broken"] = true
	d := newDecisionCache(4, reads.read)
	for range 3 {
		if _, ok, err := d.get(ctx, "missing"); ok || err != nil {
			t.Fatalf("get(missing) = %v, %v", ok, err)
		}
		if _, ok, err := d.get(ctx, "broken"); ok || err == nil {
			t.Fatalf("get(broken) = %v, %v; want the read's failure", ok, err)
		}
	}
	if a, b := reads.count("missing"), reads.count("broken"); a != 3 || b != 3 {
		t.Fatalf("reads: missing %d, broken %d; want 3 each", a, b)
	}
	// Once the decision exists, the next call finds it and keeps it.
	reads.mu.Lock()
	reads.found["missing"], reads.failing["broken"] = true, false
	reads.found["broken"] = true
	reads.mu.Unlock()
	for range 2 {
		for _, id := range []string{"missing", "broken"} {
			if _, ok, err := d.get(ctx, id); !ok || err != nil {
				t.Fatalf("get(%s) = %v, %v", id, ok, err)
			}
		}
	}
	if a, b := reads.count("missing"), reads.count("broken"); a != 4 || b != 4 {
		t.Fatalf("reads: missing %d, broken %d; want 4 each", a, b)
	}
}

// Guarantee 40: concurrent reads of one id share one store read, and a
// caller that gives up does not fail the others.
func TestDecisionCacheSharesOneReadPerID(t *testing.T) {
	ctx := testCtx(t)
	reads := newCountingReads("x")
	reads.gate, reads.started = make(chan struct{}), make(chan string, 1)
	d := newDecisionCache(4, reads.read)
	joined := make(chan struct{}, 16)
	d.joined = func() { joined <- struct{}{} }

	const callers = 8
	results := make(chan error, callers)
	leaderCtx, cancelLeader := context.WithCancel(ctx)
	go func() {
		_, _, err := d.get(leaderCtx, "x")
		results <- err
	}()
	if id := recv(t, reads.started); id != "x" {
		t.Fatalf("read started for %q", id)
	}
	for range callers - 1 {
		go func() {
			v, ok, err := d.get(ctx, "x")
			if err == nil && (!ok || v.RequestID != "x") {
				err = fmt.Errorf("get = %+v, %v", v, ok)
			}
			results <- err
		}()
	}
	for range callers - 1 {
		recv(t, joined)
	}
	cancelLeader()
	if err := recv(t, results); !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled caller got %v, want context.Canceled", err)
	}
	close(reads.gate)
	for range callers - 1 {
		if err := recv(t, results); err != nil {
			t.Fatal(err)
		}
	}
	if n := reads.count("x"); n != 1 {
		t.Fatalf("x was read %d times by %d concurrent callers, want 1", n, callers)
	}
	if _, ok, err := d.get(ctx, "x"); !ok || err != nil || reads.count("x") != 1 {
		t.Fatalf("after the shared read: get = %v, %v with %d reads", ok, err, reads.count("x"))
	}
}

// The coordinator's reader returns only answered permission requests,
// from the durable record, across a restart.
func TestPermissionDecisionReadsTheCanonicalAnswer(t *testing.T) {
	f := newFixture(t)
	f.session("s1", "t1", "r1")
	o := f.c.BindRun("s1", "t1", "r1")
	ctx := testCtx(t)

	res := request(ctx, o, bash("tu-1", "make"))
	f.waitPending("s1", "i-0001")
	if _, ok, err := f.c.PermissionDecision(ctx, "i-0001"); ok || err != nil {
		t.Fatalf("decision of a pending request = %v, %v; want absent", ok, err)
	}
	answered := wantOK[protocol.InteractionAnsweredSnapshot](t, f.answer("i-0001", allow(true)))
	recv(t, res)
	got, ok, err := f.c.PermissionDecision(ctx, "i-0001")
	if err != nil || !ok || got.SessionID != "s1" || got.TurnID != "t1" || got.RunID != "r1" || got.RequestID != "i-0001" ||
		got.Request.ToolUseID != "tu-1" || got.Outcome.Decision != protocol.InteractionDecisionAllow ||
		!got.Outcome.RememberForTurn || got.Outcome.CommittedAt != answered.Outcome.CommittedAt {
		t.Fatalf("decision = %+v, %v, %v", got, ok, err)
	}

	qa := o.(tools.QuestionAsker)
	qres := make(chan error, 1)
	go func() {
		_, err := qa.AskQuestions(ctx, "tu-2", []tools.Question{{Question: "Go?", Options: []tools.QuestionOption{{Label: "yes"}, {Label: "no"}}}})
		qres <- err
	}()
	f.waitPending("s1", "i-0002")
	wantOK[protocol.InteractionAnsweredSnapshot](t, f.answer("i-0002", answers(str("yes"))))
	if err := recv(t, qres); err != nil {
		t.Fatal(err)
	}
	res3 := request(ctx, o, bash("tu-3", "rm -rf build"))
	f.waitPending("s1", "i-0003")
	if err := f.closeRun("s1", "r1", protocol.InteractionClosureTurnStopped); err != nil {
		t.Fatal(err)
	}
	recv(t, res3)
	o.Release()
	for _, id := range []string{"i-0002", "i-0003", "i-9999"} {
		if _, ok, err := f.c.PermissionDecision(ctx, id); ok || err != nil {
			t.Fatalf("decision of %s = %v, %v; want absent (a question, a closure, unknown)", id, ok, err)
		}
	}

	f.restart()
	again, ok, err := f.c.PermissionDecision(testCtx(t), "i-0001")
	if err != nil || !ok || again.Outcome.CommittedAt != got.Outcome.CommittedAt || again.Outcome.Decision != got.Outcome.Decision {
		t.Fatalf("decision after restart = %+v, %v, %v", again, ok, err)
	}
}
