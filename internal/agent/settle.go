package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/sandbox"
	"github.com/maka-agent/maka/internal/tools"
)

// modelText is a result as the model reads it.
func modelText(res tools.Result) string {
	if res.ModelText != "" {
		return res.ModelText
	}
	return string(res.Content)
}

// settle runs one tool call through the settlement pipeline: tool_start
// (recorded before anything runs), argument and loop-gate checks, the
// permission decision, the call itself with its live output, and
// tool_result. A refusal or failure is an error result; the turn goes on.
// err is the Sink's error when the start or the result could not be
// recorded (the call does not run without a recorded start); it ends the
// turn.
func (r *runner) settle(ctx context.Context, stepID string, call model.ToolCall) (res tools.Result, err error) {
	tool, known := r.lookup(call.Name)
	start := r.event(ToolStart)
	start.StepID, start.ToolUseID, start.ToolName, start.Args = stepID, call.ID, call.Name, call.Input
	if known {
		start.ToolName, start.ActivityKind, start.Summary = tool.Name(), tool.ActivityKind(), tools.Summary(tool, call.Input)
	}
	if err := r.emit(ctx, start); err != nil {
		return tools.ErrorResult("The tool call could not be recorded: " + err.Error()), err
	}
	began := r.t.Now()
	res = r.execute(ctx, tool, known, call)
	done := r.event(ToolResult)
	done.StepID, done.ToolUseID, done.ToolName = stepID, call.ID, start.ToolName
	done.Result = &res
	done.DurationMs = max(r.t.Now().Sub(began).Milliseconds(), 0)
	// The result is recorded even when the turn was stopped meanwhile.
	if err := r.emit(context.WithoutCancel(ctx), done); err != nil {
		return tools.ErrorResult("The tool result could not be recorded: " + err.Error()), err
	}
	return res, nil
}

// abandoned is the tracker of the turn's abandoned calls.
func (r *runner) abandoned() *Abandoned {
	if r.t.Abandoned != nil {
		return r.t.Abandoned
	}
	return &defaultAbandoned
}

func (r *runner) lookup(name string) (tools.Tool, bool) {
	if r.t.Tools == nil {
		return nil, false
	}
	return r.t.Tools.Lookup(name)
}

func (r *runner) execute(ctx context.Context, tool tools.Tool, known bool, call model.ToolCall) tools.Result {
	if !known {
		return tools.ErrorResult(fmt.Sprintf("Unknown tool %q. Use one of the tools you were given.", call.Name))
	}
	args := call.Input
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		return tools.ErrorResult(fmt.Sprintf("Invalid arguments for %s: expected a JSON object", tool.Name()))
	}
	if r.gate.Blocked(tool.Name(), args) {
		return tools.ErrorResult(fmt.Sprintf("Blocked: this exact %s call already failed twice in a row. Change the arguments or the approach.", tool.Name()))
	}
	box, hidden, refusal, ok := r.permit(ctx, tool, call.ID, args)
	if !ok {
		return refusal
	}
	var seq atomic.Int64
	cr := newCallRun(r.abandoned())
	env := tools.Env{
		SessionID: r.t.SessionID, RunID: r.t.RunID, TurnID: r.t.TurnID, ToolUseID: call.ID,
		Workspace: r.t.Workspace, Protected: r.t.Protected, DenyRead: r.t.Permissions.DenyRead(),
		Web: r.t.Permissions,
		// The Bash tool hides Protected from the command as well.
		Sandbox: sandbox.Policy{Mode: box, Workspace: r.t.Workspace, Hidden: hidden},
		Output: func(stream, chunk string) {
			cr.output(func() {
				ev := r.event(ToolOutputDelta)
				ev.ToolUseID, ev.ToolName, ev.Stream, ev.Chunk = call.ID, tool.Name(), stream, tools.Redact(chunk)
				ev.Seq = seq.Add(1)
				_ = r.emit(ctx, ev) // live only
			})
		},
	}
	if qa, ok := r.t.Approver.(tools.QuestionAsker); ok {
		env.Questions = qa
	}
	// A tool that ignores the stop does not hold the turn: after
	// StopGrace its call is abandoned (and tracked until it returns).
	cr.start(func() (tools.Result, error) { return tool.Run(ctx, env, args) })
	out, ok := cr.wait(ctx)
	res, err := out.res, out.err
	switch {
	case !ok:
		res = tools.ErrorResult(fmt.Sprintf("%s did not stop within %g s of the turn being stopped; its result was discarded",
			tool.Name(), StopGrace.Seconds()))
	case err != nil:
		res = tools.ErrorResult(fmt.Sprintf("%s failed: %v", tool.Name(), err))
	}
	// Whatever the tool, its result reaches the record and the model
	// redacted.
	res = tools.RedactResult(res)
	r.gate.Record(tool.Name(), args, res.IsError)
	return res
}

// ErrNoApprover is the reason a call that needs approval is refused when
// nobody can approve it.
var ErrNoApprover = errors.New("no client can approve this call")

// permit applies the permission decision: ok reports whether the call may
// run, box is the sandbox it runs in with hidden the paths the rules hide
// from it, and refusal is the error result of a call that may not.
func (r *runner) permit(ctx context.Context, tool tools.Tool, toolUseID string, args json.RawMessage) (box sandbox.Mode, hidden []string, refusal tools.Result, ok bool) {
	v := r.t.Permissions.Evaluate(tool, args)
	decide := func(allow bool, by string) {
		ev := r.event(PermissionDenied)
		ev.ToolUseID, ev.ToolName = toolUseID, tool.Name()
		d := "deny"
		if allow {
			d = "allow"
		}
		ev.Decision = &Decision{Decision: d, Category: v.Category, Reason: v.Reason, By: by}
		_ = r.emit(context.WithoutCancel(ctx), ev)
	}
	switch v.Decision {
	case tools.Allow:
		return v.Sandbox, v.Hidden, tools.Result{}, true
	case tools.Block:
		by := "mode"
		if v.Rule != nil {
			by = "rule"
		}
		decide(false, by)
		msg := fmt.Sprintf("Permission denied: %s (%s) is not allowed by the session's permission settings", tool.Name(), v.Category)
		if v.Explanation != "" {
			msg += ": " + v.Explanation
		}
		return "", nil, tools.ErrorResult(msg + "."), false
	}
	if r.t.Approver == nil {
		decide(false, "no_approver")
		return "", nil, tools.ErrorResult(fmt.Sprintf("Permission denied: %s (%s) needs approval and %v. Allow it with a permission rule or a more permissive mode.", tool.Name(), v.Category, ErrNoApprover)), false
	}
	req := PermissionRequest{
		ToolUseID: toolUseID, ToolName: tool.Name(), Category: v.Category, Reason: v.Reason,
		Args: args, RememberAllowed: v.RememberAllowed, ScopeKey: v.ScopeKey,
		Escalation: v.Escalation, Cwd: r.t.Workspace,
	}
	if h, ok := tool.(tools.ServerHinted); ok {
		hint := h.ReadOnlyHint()
		req.ServerReadOnlyHint = &hint
	}
	ans, err := r.t.Approver.RequestPermission(ctx, req)
	if err != nil {
		decide(false, "user")
		return "", nil, tools.ErrorResult("Permission flow aborted: " + err.Error()), false
	}
	decide(ans.Allow, "user")
	if !ans.Allow {
		return "", nil, tools.ErrorResult(fmt.Sprintf("Permission denied: the user declined %s.", tool.Name())), false
	}
	if ans.RememberForTurn && v.RememberAllowed && v.ScopeKey != "" {
		r.t.Permissions.Remember(v.ScopeKey)
	}
	return v.Sandbox, v.Hidden, tools.Result{}, true
}
