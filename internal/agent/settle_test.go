package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/protocol"
)

type approverFunc func(ctx context.Context, req agent.PermissionRequest) (agent.PermissionAnswer, error)

func (f approverFunc) RequestPermission(ctx context.Context, req agent.PermissionRequest) (agent.PermissionAnswer, error) {
	return f(ctx, req)
}

// TestToolRound runs the two calls of one step concurrently (each waits
// until both started), lets the second finish first, and checks that the
// next request carries the assistant message with both calls followed by
// their results in call order.
func TestToolRound(t *testing.T) {
	ctx := testCtx(t)
	var started atomic.Int32
	bothStarted := make(chan struct{})
	bRecorded := make(chan struct{})
	var closeOnce sync.Once
	probe := &fakeTool{name: "Probe", run: func(tctx context.Context, env tools.Env, args json.RawMessage) (tools.Result, error) {
		if started.Add(1) == 2 {
			close(bothStarted)
		}
		if err := waitFor(tctx, bothStarted); err != nil {
			return tools.ErrorResult("the calls did not run concurrently"), nil
		}
		var a struct{ N string }
		if err := json.Unmarshal(args, &a); err != nil {
			return tools.Result{}, err
		}
		if a.N == "a" {
			if err := waitFor(tctx, bRecorded); err != nil {
				return tools.ErrorResult("b was never recorded"), nil
			}
			return tools.TextResult("result A"), nil
		}
		return tools.Result{Content: json.RawMessage(`{"kind":"json","value":1}`), ModelText: "result B", IsError: true}, nil
	}}
	sink := &recSink{hook: func(ev agent.Event) {
		if ev.Type == agent.ToolResult && ev.ToolUseID == "call-b" {
			closeOnce.Do(func() { close(bRecorded) })
		}
	}}
	p := newProvider(t,
		play(model.Finish{Reason: model.FinishToolCalls, Usage: usage(5, 5)},
			thinkingEv("plan"), model.Event{Kind: model.EventThinkingSignature, Text: "sig"}, textEv("checking"),
			callEv("call-a", "Probe", `{"n":"a"}`), callEv("call-b", "Probe", `{"n":"b"}`)),
		play(model.Finish{Reason: model.FinishStop, Usage: usage(7, 1)}, textEv("all done")))
	out := runTurn(t, ctx, agent.Turn{Provider: p, Prompt: "go", Tools: tools.NewRegistry(probe)}, sink)

	wantOutcome(t, out, agent.StatusCompleted, agent.StopEndTurn)
	if u := out.Usage; u == nil || *u != *usage(12, 6) {
		t.Errorf("usage = %+v, want 12/6", u)
	}
	results := sink.ofType(agent.ToolResult)
	if len(results) != 2 || results[0].ToolUseID != "call-b" || results[1].ToolUseID != "call-a" {
		t.Fatalf("tool results = %+v, want b then a", results)
	}
	reqs := p.requests()
	if len(reqs) != 2 {
		t.Fatalf("model called %d times, want 2", len(reqs))
	}
	want := []model.Message{
		{Role: model.RoleUser, Text: "go"},
		{Role: model.RoleAssistant, Text: "checking", Thinking: "plan", ThinkingSignature: "sig", ToolCalls: []model.ToolCall{
			{ID: "call-a", Name: "Probe", Input: json.RawMessage(`{"n":"a"}`)},
			{ID: "call-b", Name: "Probe", Input: json.RawMessage(`{"n":"b"}`)},
		}},
		{Role: model.RoleTool, ToolCallID: "call-a", ToolName: "Probe", Text: "result A"},
		{Role: model.RoleTool, ToolCallID: "call-b", ToolName: "Probe", Text: "result B", IsError: true},
	}
	if !messagesEqual(reqs[1].Messages, want) {
		t.Errorf("second request messages =\n%+v\nwant\n%+v", reqs[1].Messages, want)
	}
	if got, want := sink.ofType(agent.TextComplete), []string{"checking", "all done"}; len(got) != 2 || got[0].Text != want[0] || got[1].Text != want[1] {
		t.Errorf("text_complete = %+v, want %q", got, want)
	}
}

// TestToolEventsBracketTheRun checks that tool_start is recorded before
// the tool runs, output deltas while it runs, and tool_result after, all
// with the same ids.
func TestToolEventsBracketTheRun(t *testing.T) {
	var sink *recSink
	var seenAtRun []string
	var env tools.Env
	probe := &fakeTool{name: "Probe", run: func(_ context.Context, e tools.Env, _ json.RawMessage) (tools.Result, error) {
		seenAtRun = sink.types()
		env = e
		e.Output("stdout", "line 1\n")
		e.Output("stderr", "line 2\n")
		return tools.TextResult("fine"), nil
	}}
	sink = &recSink{}
	p := newProvider(t, calls(textEv("let me see"), callEv("c1", "probe", `{"x":1}`)), say("done"))
	out := runTurn(t, testCtx(t), agent.Turn{
		SessionID: "s1", TurnID: "t1", RunID: "r1", Workspace: "/ws",
		Provider: p, Prompt: "go", Tools: tools.NewRegistry(probe), NewID: seqIDs(),
	}, sink)
	wantOutcome(t, out, agent.StatusCompleted, agent.StopEndTurn)

	if !slices.Equal(seenAtRun, []string{agent.TextDelta, agent.TextComplete, agent.StepEnd, agent.ToolStart}) {
		t.Errorf("events recorded when the tool started: %v, want text, step_end then tool_start", seenAtRun)
	}
	if env.SessionID != "s1" || env.TurnID != "t1" || env.RunID != "r1" || env.ToolUseID != "c1" || env.Workspace != "/ws" {
		t.Errorf("tool env = %+v", env)
	}
	evs := sink.ofType(agent.ToolStart, agent.ToolOutputDelta, agent.ToolResult)
	var got []string
	for _, ev := range evs {
		got = append(got, ev.Type)
	}
	if !slices.Equal(got, []string{agent.ToolStart, agent.ToolOutputDelta, agent.ToolOutputDelta, agent.ToolResult}) {
		t.Fatalf("tool events = %v", sink.types())
	}
	stepID := sink.ofType(agent.TextComplete)[0].MessageID
	start, res := evs[0], evs[3]
	// The lower-case name resolves to the registered tool.
	if start.ToolUseID != "c1" || start.ToolName != "Probe" || start.StepID != stepID ||
		start.ActivityKind != tools.ActivityTool || string(start.Args) != `{"x":1}` {
		t.Errorf("tool_start = %+v (step %q)", start, stepID)
	}
	for i, d := range evs[1:3] {
		if d.ToolUseID != "c1" || d.ToolName != "Probe" || d.Seq != int64(i+1) {
			t.Errorf("output delta %d = %+v", i, d)
		}
	}
	if evs[1].Stream != "stdout" || evs[1].Chunk != "line 1\n" || evs[2].Stream != "stderr" || evs[2].Chunk != "line 2\n" {
		t.Errorf("output deltas = %+v / %+v", evs[1], evs[2])
	}
	if res.ToolUseID != "c1" || res.ToolName != "Probe" || res.StepID != stepID || res.Result.IsError ||
		resultText(t, res.Result) != "fine" || res.DurationMs < 0 {
		t.Errorf("tool_result = %+v", res)
	}
	if len(probe.runs()) != 1 {
		t.Errorf("tool ran %d times", len(probe.runs()))
	}
	tm := p.requests()[1].Messages[2]
	if tm.Role != model.RoleTool || tm.ToolCallID != "c1" || tm.ToolName != "Probe" || tm.Text != "fine" {
		t.Errorf("tool message = %+v", tm)
	}
}

func TestCallWithoutIDGetsOne(t *testing.T) {
	p := newProvider(t, calls(callEv("", "Probe", `{}`)), say("done"))
	sink := &recSink{}
	out := runTurn(t, testCtx(t), agent.Turn{Provider: p, Prompt: "go", Tools: tools.NewRegistry(&fakeTool{name: "Probe"})}, sink)
	wantOutcome(t, out, agent.StatusCompleted, agent.StopEndTurn)
	start := sink.ofType(agent.ToolStart)
	if len(start) != 1 || start[0].ToolUseID == "" {
		t.Fatalf("tool_start = %+v, want one with an id", start)
	}
	msgs := p.requests()[1].Messages
	if id := start[0].ToolUseID; msgs[1].ToolCalls[0].ID != id || msgs[2].ToolCallID != id {
		t.Errorf("call id %q not used in %+v", id, msgs)
	}
}

// settleOne runs a turn whose first step makes one call and whose second
// step ends the turn, and returns the call's tool_result.
func settleOne(t *testing.T, turn agent.Turn, call model.Event) (agent.Event, *recSink) {
	t.Helper()
	p := newProvider(t, calls(call), say("done"))
	turn.Provider, turn.Prompt = p, "go"
	sink := &recSink{}
	out := runTurn(t, testCtx(t), turn, sink)
	wantOutcome(t, out, agent.StatusCompleted, agent.StopEndTurn)
	res := sink.ofType(agent.ToolResult)
	if len(res) != 1 {
		t.Fatalf("tool results = %+v, want one", res)
	}
	if tm := p.requests()[1].Messages[2]; tm.ToolCallID != call.ToolCall.ID || tm.IsError != res[0].Result.IsError {
		t.Errorf("tool message %+v does not match the result %+v", tm, res[0].Result)
	}
	return res[0], sink
}

func wantError(t *testing.T, res agent.Event, substr string) {
	t.Helper()
	if !res.Result.IsError {
		t.Fatalf("result %s is not an error", res.Result.Content)
	}
	if txt := resultText(t, res.Result); !strings.Contains(txt, substr) {
		t.Fatalf("error %q does not contain %q", txt, substr)
	}
}

func TestUnknownToolIsAnErrorResult(t *testing.T) {
	probe := &fakeTool{name: "Probe"}
	res, sink := settleOne(t, agent.Turn{Tools: tools.NewRegistry(probe)}, callEv("c1", "Prob", `{}`))
	wantError(t, res, `Unknown tool "Prob"`)
	if len(probe.runs()) != 0 {
		t.Error("a tool ran for an unknown name")
	}
	if s := sink.ofType(agent.ToolStart); len(s) != 1 || s[0].ToolName != "Prob" || s[0].ActivityKind != "" {
		t.Errorf("tool_start = %+v", s)
	}
	// No registry at all.
	res, _ = settleOne(t, agent.Turn{}, callEv("c1", "Probe", `{}`))
	wantError(t, res, "Unknown tool")
}

func TestArguments(t *testing.T) {
	tests := []struct {
		name    string
		args    string
		invalid bool
		runWith string
	}{
		{"object", `{"a": 1}`, false, `{"a": 1}`},
		{"absent", ``, false, `{}`},
		{"broken JSON", `{"a": `, true, ""},
		{"array", `[1, 2]`, true, ""},
		{"null", `null`, true, ""},
		{"string", `"a"`, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			probe := &fakeTool{name: "Probe"}
			res, _ := settleOne(t, agent.Turn{Tools: tools.NewRegistry(probe)}, callEv("c1", "Probe", tc.args))
			if tc.invalid {
				wantError(t, res, "Invalid arguments for Probe")
				if len(probe.runs()) != 0 {
					t.Errorf("the tool ran with invalid arguments %s", tc.args)
				}
				return
			}
			if got := probe.runs(); len(got) != 1 || got[0] != tc.runWith {
				t.Errorf("runs = %q, want one with %s", got, tc.runWith)
			}
		})
	}
}

func TestGoErrorOfAToolIsAnErrorResult(t *testing.T) {
	probe := &fakeTool{name: "Probe", run: func(context.Context, tools.Env, json.RawMessage) (tools.Result, error) {
		return tools.Result{}, errors.New("exploded")
	}}
	res, _ := settleOne(t, agent.Turn{Tools: tools.NewRegistry(probe)}, callEv("c1", "Probe", `{}`))
	wantError(t, res, "Probe failed: exploded")
}

func TestPermissions(t *testing.T) {
	errGone := errors.New("client went away")
	denyWrite, err := tools.ParseRule(tools.RuleDeny, tools.NameWrite)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		mode     tools.Mode
		rules    []tools.Rule
		answer   *agent.PermissionAnswer // nil: no approver
		answerEr error
		asked    bool
		ran      bool
		errText  string
		decision string // "" when no permission_decision is recorded
		by       string
	}{
		{name: "explore blocks a write", mode: tools.ModeExplore, errText: "is not allowed", decision: "deny", by: "mode"},
		{name: "deny rule", mode: tools.ModeBypass, rules: []tools.Rule{denyWrite}, errText: "is not allowed", decision: "deny", by: "rule"},
		{name: "execute allows a write", mode: tools.ModeExecute, ran: true},
		{name: "prompt without approver", mode: tools.ModeAsk, errText: "needs approval", decision: "deny", by: "no_approver"},
		{name: "approver allows", mode: tools.ModeAsk, answer: &agent.PermissionAnswer{Allow: true}, asked: true, ran: true, decision: "allow", by: "user"},
		{name: "approver denies", mode: tools.ModeAsk, answer: &agent.PermissionAnswer{}, asked: true, errText: "declined", decision: "deny", by: "user"},
		{name: "approver fails", mode: tools.ModeAsk, answer: &agent.PermissionAnswer{Allow: true}, answerEr: errGone, asked: true,
			errText: "client went away", decision: "deny", by: "user"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &fakeTool{name: tools.NameWrite, perm: true}
			var reqs []agent.PermissionRequest
			turn := agent.Turn{Tools: tools.NewRegistry(w), Permissions: tools.NewEngine(tools.Policy{Mode: tc.mode, Rules: tc.rules})}
			if tc.answer != nil {
				turn.Approver = approverFunc(func(_ context.Context, req agent.PermissionRequest) (agent.PermissionAnswer, error) {
					reqs = append(reqs, req)
					return *tc.answer, tc.answerEr
				})
			}
			args := `{"path":"notes.txt","content":"x"}`
			res, sink := settleOne(t, turn, callEv("c1", tools.NameWrite, args))

			if tc.ran != (len(w.runs()) == 1) {
				t.Errorf("tool runs = %d, want ran=%v", len(w.runs()), tc.ran)
			}
			if tc.errText != "" {
				wantError(t, res, tc.errText)
			} else if res.Result.IsError {
				t.Errorf("unexpected error result %s", res.Result.Content)
			}
			if tc.asked != (len(reqs) == 1) {
				t.Fatalf("approver asked %d times, want asked=%v", len(reqs), tc.asked)
			}
			if tc.asked {
				r := reqs[0]
				if r.ToolUseID != "c1" || r.ToolName != tools.NameWrite || r.Category != protocol.ToolCategoryFileWrite ||
					string(r.Args) != args || !r.RememberAllowed || r.Reason == "" {
					t.Errorf("permission request = %+v", r)
				}
			}
			ds := sink.ofType(agent.PermissionDenied)
			if tc.decision == "" {
				if len(ds) != 0 {
					t.Errorf("permission decisions = %+v, want none", ds)
				}
				return
			}
			if len(ds) != 1 || ds[0].Decision == nil {
				t.Fatalf("permission decisions = %+v, want one", ds)
			}
			d := ds[0].Decision
			if d.Decision != tc.decision || d.By != tc.by || d.Category != protocol.ToolCategoryFileWrite || ds[0].ToolUseID != "c1" {
				t.Errorf("decision = %+v on %q, want %s by %s", d, ds[0].ToolUseID, tc.decision, tc.by)
			}
			// The decision is recorded between the call's start and result.
			types := sink.types()
			if i, j, k := slices.Index(types, agent.ToolStart), slices.Index(types, agent.PermissionDenied), slices.Index(types, agent.ToolResult); !(i < j && j < k) {
				t.Errorf("events out of order: %v", types)
			}
		})
	}
}

func TestRememberForTurn(t *testing.T) {
	args := `{"path":"notes.txt","content":"x"}`
	for _, remember := range []bool{true, false} {
		name := "remembered"
		if !remember {
			name = "not remembered"
		}
		t.Run(name, func(t *testing.T) {
			w := &fakeTool{name: tools.NameWrite, perm: true}
			asked := 0
			approver := approverFunc(func(context.Context, agent.PermissionRequest) (agent.PermissionAnswer, error) {
				asked++
				return agent.PermissionAnswer{Allow: true, RememberForTurn: remember}, nil
			})
			p := newProvider(t,
				calls(callEv("c1", tools.NameWrite, args)),
				calls(callEv("c2", tools.NameWrite, args)),
				say("done"))
			sink := &recSink{}
			out := runTurn(t, testCtx(t), agent.Turn{Provider: p, Prompt: "go", Tools: tools.NewRegistry(w),
				Permissions: tools.NewEngine(tools.Policy{Mode: tools.ModeAsk}), Approver: approver}, sink)
			wantOutcome(t, out, agent.StatusCompleted, agent.StopEndTurn)
			if len(w.runs()) != 2 {
				t.Errorf("tool ran %d times, want 2", len(w.runs()))
			}
			want := 2
			if remember {
				want = 1
			}
			if asked != want {
				t.Errorf("approver asked %d times, want %d", asked, want)
			}
		})
	}
}

func TestLoopGate(t *testing.T) {
	x, y := `{"path":"x"}`, `{"path":"y"}`
	tests := []struct {
		name     string
		args     []string // one call per step
		failures []bool   // outcome of each run, in order
		blocked  []bool   // per call
	}{
		{"third identical failure is blocked", []string{x, x, x, x}, []bool{true, true},
			[]bool{false, false, true, true}},
		{"argument order does not matter", []string{x, x, `{ "path" : "x" }`}, []bool{true, true},
			[]bool{false, false, true}},
		{"a success resets", []string{x, x, x, x}, []bool{true, false, true, true},
			[]bool{false, false, false, false}},
		{"a different call resets", []string{x, y, x, x}, []bool{true, true, true, true},
			[]bool{false, false, false, false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int32
			tool := &fakeTool{name: "Flaky", run: func(context.Context, tools.Env, json.RawMessage) (tools.Result, error) {
				i := int(n.Add(1)) - 1
				if i < len(tc.failures) && tc.failures[i] {
					return tools.ErrorResult("failed"), nil
				}
				return tools.TextResult("ok"), nil
			}}
			var steps []stepFunc
			for i, a := range tc.args {
				steps = append(steps, calls(callEv("c"+string(rune('1'+i)), "Flaky", a)))
			}
			steps = append(steps, say("done"))
			p := newProvider(t, steps...)
			sink := &recSink{}
			out := runTurn(t, testCtx(t), agent.Turn{Provider: p, Prompt: "go", Tools: tools.NewRegistry(tool)}, sink)
			wantOutcome(t, out, agent.StatusCompleted, agent.StopEndTurn)
			results := sink.ofType(agent.ToolResult)
			if len(results) != len(tc.args) {
				t.Fatalf("%d results, want %d", len(results), len(tc.args))
			}
			runs := 0
			for i, r := range results {
				isBlocked := r.Result.IsError && strings.HasPrefix(resultText(t, r.Result), "Blocked:")
				if isBlocked != tc.blocked[i] {
					t.Errorf("call %d blocked = %v, want %v (%s)", i+1, isBlocked, tc.blocked[i], r.Result.Content)
				}
				if !isBlocked {
					runs++
				}
			}
			if got := len(tool.runs()); got != runs {
				t.Errorf("tool ran %d times, want %d", got, runs)
			}
		})
	}
}

// TestEveryToolResultIsRedacted checks that the result of any tool, not
// only Bash, reaches the record and the model with its secrets masked:
// the model text, every string value of the content (which stays valid
// JSON with its other values), and the content the model reads when a
// tool gives no model text.
func TestEveryToolResultIsRedacted(t *testing.T) {
	t.Cleanup(tools.AddKnownSecrets(func() []string { return []string{"vault-plain-value"} }))
	const key = "sk-abcdefghijklmnopqrstuvwx"
	probe := &fakeTool{name: "Probe", run: func(_ context.Context, env tools.Env, args json.RawMessage) (tools.Result, error) {
		env.Output("stdout", "progress "+key+"\n")
		if strings.Contains(string(args), "bare") {
			return tools.Result{Content: json.RawMessage(`{"kind":"json","value":{"token":"` + key + `"}}`)}, nil
		}
		return tools.Result{
			Content:   json.RawMessage(`{"kind":"json","value":{"env":"OPENAI_API_KEY=` + key + `","n":12,"vault":["vault-plain-value"],"sha":"4b825dc642cb6eb9a060e54bf8d69288fbee4904"}}`),
			ModelText: "env OPENAI_API_KEY=" + key + " and vault-plain-value",
		}, nil
	}}
	p := newProvider(t, calls(callEv("c1", "Probe", `{}`), callEv("c2", "Probe", `{"bare":true}`)), say("done"))
	sink := &recSink{}
	out := runTurn(t, testCtx(t), agent.Turn{Provider: p, Prompt: "go", Tools: tools.NewRegistry(probe)}, sink)
	wantOutcome(t, out, agent.StatusCompleted, agent.StopEndTurn)

	results := sink.ofType(agent.ToolResult)
	if len(results) != 2 {
		t.Fatalf("tool results = %+v, want two", results)
	}
	// Results are recorded as the calls finish; c1's first.
	slices.SortFunc(results, func(a, b agent.Event) int { return strings.Compare(a.ToolUseID, b.ToolUseID) })
	msgs := p.requests()[1].Messages
	for i, ev := range results {
		res := ev.Result
		if res.IsError {
			t.Errorf("result %d became an error", i)
		}
		if !json.Valid(res.Content) {
			t.Fatalf("result %d content is not JSON: %s", i, res.Content)
		}
		for _, shown := range []string{string(res.Content), res.ModelText, msgs[2+i].Text} {
			if strings.Contains(shown, "abcdefghijklmnop") || strings.Contains(shown, "vault-plain-value") {
				t.Errorf("result %d shows a secret: %s", i, shown)
			}
		}
	}
	if got, want := string(results[0].Result.Content),
		`{"kind":"json","value":{"env":"OPENAI_API_KEY=[REDACTED]","n":12,"vault":["[REDACTED]"],"sha":"4b825dc642cb6eb9a060e54bf8d69288fbee4904"}}`; got != want {
		t.Errorf("content = %s\nwant      %s", got, want)
	}
	if got, want := msgs[2].Text, "env OPENAI_API_KEY=[REDACTED] and [REDACTED]"; got != want {
		t.Errorf("the model read %q, want %q", got, want)
	}
	if got, want := msgs[3].Text, `{"kind":"json","value":{"token":"[REDACTED]"}}`; got != want {
		t.Errorf("the model read %q, want %q", got, want)
	}
	deltas := sink.ofType(agent.ToolOutputDelta)
	if len(deltas) != 2 {
		t.Fatalf("output deltas = %+v, want two", deltas)
	}
	for _, ev := range deltas {
		if ev.Chunk != "progress [REDACTED]\n" {
			t.Errorf("live output %q, want it redacted", ev.Chunk)
		}
	}
}

// TestReadOfANamedPipeDoesNotHoldTheTurn has the model Read a named pipe
// in the workspace with the built-in tools: the call is refused at once
// and the turn goes on to its answer.
func TestReadOfANamedPipeDoesNotHoldTheTurn(t *testing.T) {
	ws := t.TempDir()
	fifo := filepath.Join(ws, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Releases a Read blocked on the pipe, if any; never blocks.
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = w.Close()
		}
	})
	res, _ := settleOne(t, agent.Turn{Workspace: ws, Tools: tools.NewRegistry(tools.Builtins()...)},
		callEv("c1", tools.NameRead, `{"path":"pipe"}`))
	wantError(t, res, "Read pipe: not a regular file: it is a named pipe (FIFO)")
}
