package e2e_test

import (
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// gates holds model streams per prompt until the test releases them.
type gates struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func (g *gates) of(prompt string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]chan struct{}{}
	}
	if g.m[prompt] == nil {
		g.m[prompt] = make(chan struct{})
	}
	return g.m[prompt]
}

func (g *gates) release(prompt string) { close(g.of(prompt)) }

func submit(t *testing.T, c *client.Conn, sid, mid, text string, placement protocol.MessagePlacement) protocol.TurnMessageSubmitResult {
	t.Helper()
	res, err := c.SubmitMessage(opCtx(t), protocol.TurnMessageSubmitInput{
		OriginHostEpoch: c.HostEpoch(), SessionID: sid, MessageID: mid,
		Content: protocol.MessageContent{Text: text}, Placement: placement,
	})
	if err != nil {
		t.Fatalf("submit %s: %v", mid, err)
	}
	return res
}

func rootOf(frames []any) *protocol.TurnSnapshot {
	for i := len(frames) - 1; i >= 0; i-- {
		if p, ok := frames[i].(protocol.ProjectionFrame); ok {
			return p.Snapshot.RootTurn
		}
	}
	return nil
}

// A steering message sent while a tool-using turn runs reaches the model at
// the next step; a follow-up becomes exactly one next turn; retries of
// both are idempotent.
func TestSteeringAndFollowUp(t *testing.T) {
	var g gates
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		switch user := req.LastUser(); {
		case user == "long task" && len(req.ToolResultsSinceUser()) == 0:
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "working "}, {Wait: g.of("long task")},
				{Call: &modeltest.Call{ID: "call_glob", Name: "Glob", Arguments: `{"pattern":"*"}`}}}}
		case strings.Contains(user, "The user sent a message while you were working:"):
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "steered: " + user[strings.Index(user, "<user_query>"):]}}}
		case user == "then summarise":
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "summary done"}}}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "unexpected: " + req.LastUser()}}}
	})
	c := h.conn
	createSession(t, c, "steer", protocol.PermissionModeBypass)
	w := watch(t, c, "steer")
	startTurn(t, c, "steer", "turn-1", "long task")
	w.until(t, "the first delta", hasText("turn-1", "working "))

	other := h.dial()
	s1 := submit(t, other, "steer", "m-steer", "also look at the tests", protocol.PlacementCurrentTurn)
	f1 := submit(t, other, "steer", "m-follow", "then summarise", protocol.PlacementNextTurn)
	if s1.Disposition != protocol.DispositionSteering || f1.Disposition != protocol.DispositionFollowup || f1.QueueRevision != s1.QueueRevision+1 {
		t.Fatalf("submits: %+v %+v", s1, f1)
	}
	// Retries, from another connection, answer the same.
	if again := submit(t, c, "steer", "m-steer", "also look at the tests", protocol.PlacementCurrentTurn); again != s1 {
		t.Fatalf("steering retry %+v, want %+v", again, s1)
	}
	if _, err := c.SubmitMessage(opCtx(t), protocol.TurnMessageSubmitInput{OriginHostEpoch: c.HostEpoch(), SessionID: "steer",
		MessageID: "m-steer", Content: protocol.MessageContent{Text: "different"}, Placement: protocol.PlacementCurrentTurn}); !client.IsCode(err, protocol.ErrOperationConflict) {
		t.Fatalf("a different payload for m-steer: %v", err)
	}
	g.release("long task")
	frames := w.untilTerminal(t, "turn-1")
	if got := terminals(frames, "turn-1")[0].Snapshot.RootTurn.Status; got != protocol.TurnCompleted {
		t.Fatalf("turn-1 ended %s", got)
	}
	// The steering message reached the model at the step after the tool
	// call, inside the envelope.
	var steered bool
	for _, r := range h.model.Seen() {
		u := r.LastUser()
		if strings.Contains(u, "The user sent a message while you were working:") && strings.Contains(u, "also look at the tests") {
			steered = len(r.ToolResultsSinceUser()) == 0 && strings.Contains(describeMessages(r), "call_glob")
		}
	}
	if !steered {
		t.Fatal("the steering message did not reach the model after the tool step")
	}
	// The follow-up became exactly one successor turn.
	frames = w.until(t, "the successor's terminal", func(frames []any) bool {
		r := rootOf(frames)
		return r != nil && r.TurnID != "turn-1" && r.Status.Terminal()
	})
	succ := rootOf(frames)
	if succ.Status != protocol.TurnCompleted {
		t.Fatalf("successor %+v", succ)
	}
	if !strings.Contains(deltaText(frames, succ.TurnID), "summary done") {
		t.Fatalf("successor streamed %q", deltaText(frames, succ.TurnID))
	}
	var successors []string
	for _, f := range frames {
		if p, ok := f.(protocol.ProjectionFrame); ok && p.Snapshot.RootTurn != nil && p.Snapshot.RootTurn.TurnID != "turn-1" {
			if len(successors) == 0 || successors[len(successors)-1] != p.Snapshot.RootTurn.TurnID {
				successors = append(successors, p.Snapshot.RootTurn.TurnID)
			}
		}
	}
	if len(successors) != 1 {
		t.Fatalf("successor turns %v, want exactly one", successors)
	}
	// The follow-up's retry still answers followup with its revision.
	if again := submit(t, other, "steer", "m-follow", "then summarise", protocol.PlacementNextTurn); again != f1 {
		t.Fatalf("follow-up retry %+v, want %+v", again, f1)
	}
	// The transcript holds the steering message as a user message.
	if !strings.Contains(strings.Join(textsOf(transcript(t, c, "steer"), protocol.TranscriptRoleUser), "|"), "also look at the tests") {
		t.Fatal("the steering message is not in the transcript")
	}
}

func describeMessages(r *modeltest.Request) string {
	var sb strings.Builder
	for _, m := range r.Messages {
		sb.WriteString(m.Role + ":" + m.Text())
		for _, c := range m.ToolCalls {
			sb.WriteString(" " + c.ID)
		}
		sb.WriteString(" " + m.ToolCallID + "\n")
	}
	return sb.String()
}

// An interrupt stops the turn at once and retracts the queue; its retry
// answers a deep-equal result; retract is idempotent too.
func TestInterruptAndRetract(t *testing.T) {
	var g gates
	t.Cleanup(func() { g.release("hold") })
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "holding "}, {Wait: g.of(req.LastUser())}, {Text: "released"}}}
	})
	c := h.conn
	createSession(t, c, "intr", protocol.PermissionModeBypass)
	w := watch(t, c, "intr")
	turn := startTurn(t, c, "intr", "turn-1", "hold")
	w.until(t, "the first delta", hasText("turn-1", "holding "))

	submit(t, c, "intr", "m1", "first follow-up", protocol.PlacementNextTurn)
	submit(t, c, "intr", "m2", "second follow-up", protocol.PlacementNextTurn)
	r1, err := c.RetractQueue(opCtx(t), protocol.QueueRetractInput{OriginHostEpoch: c.HostEpoch(), SessionID: "intr", RetractID: "r1"})
	if err != nil || len(r1.Retracted) != 2 {
		t.Fatalf("retract: %+v %v", r1, err)
	}
	r1again, err := h.dial().RetractQueue(opCtx(t), protocol.QueueRetractInput{OriginHostEpoch: c.HostEpoch(), SessionID: "intr", RetractID: "r1"})
	if err != nil || !reflect.DeepEqual(r1again, r1) {
		t.Fatalf("retract retry: %+v %v, want %+v", r1again, err, r1)
	}
	submit(t, c, "intr", "m3", "third follow-up", protocol.PlacementNextTurn)
	in := protocol.TurnInterruptInput{OriginHostEpoch: c.HostEpoch(), SessionID: "intr", InterruptID: "i1", TurnID: "turn-1", RunID: turn.RunID}
	res, err := c.InterruptTurn(opCtx(t), in)
	if err != nil {
		t.Fatalf("interrupt: %v", err)
	}
	if res.Turn.Status != protocol.TurnCancelled || len(res.Retracted) != 1 || res.Retracted[0].MessageID != "m3" {
		t.Fatalf("interrupt result %+v", res)
	}
	again, err := h.dial().InterruptTurn(opCtx(t), in)
	if err != nil || !reflect.DeepEqual(again, res) {
		t.Fatalf("interrupt retry %+v %v, want %+v", again, err, res)
	}
	in.TurnID = "other"
	if _, err := c.InterruptTurn(opCtx(t), protocol.TurnInterruptInput{OriginHostEpoch: c.HostEpoch(), SessionID: "intr", InterruptID: "i2", TurnID: "other", RunID: turn.RunID}); !client.IsCode(err, protocol.ErrOperationConflict) {
		t.Fatalf("interrupt of a turn that is not active: %v", err)
	}
	// No successor was built from the retracted messages: the session is
	// idle, and a new submit starts a fresh turn.
	started := submit(t, c, "intr", "m4", "fresh start", protocol.PlacementNextTurn)
	if started.Disposition != protocol.DispositionTurnStarted {
		t.Fatalf("submit after the interrupt: %+v", started)
	}
	frames := w.until(t, "the fresh turn's first delta", hasText(started.TurnID, "holding "))
	for _, f := range frames {
		if p, ok := f.(protocol.ProjectionFrame); ok && p.Snapshot.RootTurn != nil {
			if id := p.Snapshot.RootTurn.TurnID; id != "turn-1" && id != started.TurnID {
				t.Fatalf("an unexpected turn %s was started", id)
			}
		}
	}
	g.release("fresh start")
	w.untilTerminal(t, started.TurnID)
	// The turn started by the message has the message as its user message.
	if again := submit(t, c, "intr", "m4", "fresh start", protocol.PlacementNextTurn); again != started {
		t.Fatalf("retry of the starting submit %+v, want %+v", again, started)
	}
}
