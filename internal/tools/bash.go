package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/maka-agent/maka/internal/permsyntax"
	"github.com/maka-agent/maka/internal/sandbox"
)

// NameBash is the name of the Bash tool.
const NameBash = permsyntax.NameBash

// Bash timing.
const (
	// BashDefaultTimeout applies when timeout_ms is absent.
	BashDefaultTimeout = 120 * time.Second
	// BashMaxTimeout is the largest timeout; larger requests are clamped.
	BashMaxTimeout = 600 * time.Second
	// bashKillGrace is how long the processes of a call have between
	// SIGTERM and SIGKILL.
	bashKillGrace = 2 * time.Second
	// bashDrainGrace is how long output pipes may stay open after the
	// call ended (held by a process outside it) before they are cut.
	bashDrainGrace = time.Second
)

// Exit codes reported for commands that were stopped.
const (
	ExitCodeTimedOut = 124
	ExitCodeAborted  = 130
)

// Terminal statuses of a Bash result.
const (
	TerminalCompleted = "completed"
	TerminalFailed    = "failed"
	TerminalTimedOut  = "timed_out"
	TerminalAborted   = "aborted"
)

// shellPath is bash if it is on PATH, else sh.
var shellPath = sync.OnceValues(func() (string, error) {
	if p, err := exec.LookPath("bash"); err == nil {
		return p, nil
	}
	return exec.LookPath("sh")
})

type bashTool struct{}

func (bashTool) Name() string { return NameBash }

func (bashTool) Description() string {
	return "Run a shell command (bash -c) in the workspace directory. stdin is empty. " +
		"timeout_ms defaults to 120000 and is capped at 600000; on timeout every process of the " +
		"command is stopped (SIGTERM, then SIGKILL 2 s later). Nothing the command starts outlives " +
		"the call: background jobs (&), setsid and daemonised processes are killed when the command " +
		"returns, is stopped or times out, so start no servers meant to keep running. When the " +
		"session is sandboxed, the command may read the whole file system except the host's own " +
		"files, write only in the workspace and the temporary directory (workspace-write) or " +
		"nowhere but /dev/null (read-only), has no network, and cannot signal processes outside " +
		"the call; set sandbox to false to ask the user to run it outside. Output is tail-truncated to 2000 lines / 50 KiB per stream."
}

func (bashTool) Parameters() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"command":{"type":"string","description":"The shell command to run."},` +
		`"timeout_ms":{"type":"integer","minimum":1,"maximum":600000,"description":"Timeout in milliseconds (default 120000)."},` +
		`"sandbox":{"type":"boolean","description":"false runs the command outside the sandbox, after the user approves that once. Ask only when the sandbox refused something the task needs (a write outside the workspace, the network)."}},` +
		`"required":["command"],"additionalProperties":false}`)
}

func (bashTool) PermissionRequired() bool { return true }
func (bashTool) ActivityKind() string     { return ActivityCommand }

type bashArgs struct {
	Command   *string `json:"command"`
	TimeoutMS *int64  `json:"timeout_ms"`
	// Sandbox false asks to leave the sandbox; the permission engine
	// decides it (Verdict.Escalation) and the call runs with the policy
	// the engine chose (Env.Sandbox).
	Sandbox *bool `json:"sandbox"`
}

// terminalContent is the content of a "terminal" result.
type terminalContent struct {
	Kind       string         `json:"kind"`
	Cwd        string         `json:"cwd"`
	Cmd        string         `json:"cmd"`
	Status     string         `json:"status"`
	ExitCode   int            `json:"exitCode"`
	DurationMS int64          `json:"durationMs"`
	Output     terminalOutput `json:"output"`
}

type terminalOutput struct {
	Mode            string `json:"mode"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdoutTruncated"`
	StderrTruncated bool   `json:"stderrTruncated"`
	Redacted        bool   `json:"redacted"`
}

func (bashTool) Run(ctx context.Context, env Env, raw json.RawMessage) (Result, error) {
	var a bashArgs
	if err := decodeArgs(raw, &a); err != nil {
		return invalidArgs(NameBash, err), nil
	}
	if err := requireString("command", a.Command); err != nil {
		return invalidArgs(NameBash, err), nil
	}
	if strings.TrimSpace(*a.Command) == "" {
		return invalidArgs(NameBash, errors.New("command must not be empty")), nil
	}
	timeout, err := bashTimeout(a.TimeoutMS)
	if err != nil {
		return invalidArgs(NameBash, err), nil
	}
	if env.Workspace == "" {
		return ErrorResult("Bash: no workspace directory is set for this session"), nil
	}
	run := &commandRun{status: TerminalAborted, exitCode: ExitCodeAborted,
		stdout: newStreamSink(nil), stderr: newStreamSink(nil)}
	if ctx.Err() == nil {
		if run, err = runCommand(ctx, env, *a.Command, timeout); err != nil {
			return ErrorResult(fmt.Sprintf("Bash: cannot start the command: %v", err)), nil
		}
	}
	return run.result(env.Workspace, *a.Command, timeout), nil
}

// bashTimeout is the timeout for a timeout_ms argument: the default when
// absent, clamped to BashMaxTimeout.
func bashTimeout(ms *int64) (time.Duration, error) {
	switch {
	case ms == nil:
		return BashDefaultTimeout, nil
	case *ms <= 0:
		return 0, errors.New("timeout_ms must be > 0")
	case *ms >= int64(BashMaxTimeout/time.Millisecond):
		return BashMaxTimeout, nil
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

// commandRun is a finished command.
type commandRun struct {
	status         string
	exitCode       int
	duration       time.Duration
	stdout, stderr *streamSink
	// sandbox is the mode that confined the command ("" when it ran
	// unconfined).
	sandbox sandbox.Mode
}

// callPolicy is the sandbox policy of a call in env: env.Sandbox, with the
// session workspace when the policy names none and the host's protected
// paths hidden besides the policy's own.
func callPolicy(env Env) sandbox.Policy {
	p := env.Sandbox
	if !p.Confined() {
		return p
	}
	if p.Workspace == "" {
		p.Workspace = env.Workspace
	}
	p.Hidden = append(slices.Clone(env.Protected), p.Hidden...)
	return p
}

// callExit is what a call's Wait returned.
type callExit struct {
	code int
	err  error
}

// runCommand runs command with the shell under a sandbox helper
// (sandbox.Start) and returns once the call is over and both output pipes
// are drained. Nothing the command starts outlives the call. Timeout and
// ctx cancellation terminate every process of the call: SIGTERM, then
// SIGKILL after bashKillGrace.
func runCommand(ctx context.Context, env Env, command string, timeout time.Duration) (*commandRun, error) {
	shell, err := shellPath()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	defer outR.Close()
	defer errR.Close()

	policy := callPolicy(env)
	start := time.Now()
	call, err := sandbox.Start(ctx, sandbox.Spec{
		Shell: shell, Command: command, Dir: env.Workspace, Policy: policy,
		Stdout: outW, Stderr: errW,
	})
	outW.Close()
	errW.Close()
	if err != nil {
		if ctx.Err() != nil {
			return &commandRun{status: TerminalAborted, exitCode: ExitCodeAborted,
				duration: time.Since(start), stdout: newStreamSink(nil), stderr: newStreamSink(nil)}, nil
		}
		return nil, err
	}

	var emitMu sync.Mutex
	run := &commandRun{
		stdout: newStreamSink(liveEmitter(env, "stdout", &emitMu)),
		stderr: newStreamSink(liveEmitter(env, "stderr", &emitMu)),
	}
	if policy.Confined() {
		run.sandbox = policy.Mode
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); run.stdout.copyFrom(outR) }()
	go func() { defer readers.Done(); run.stderr.copyFrom(errR) }()
	readersDone := make(chan struct{})
	go func() { readers.Wait(); close(readersDone) }()
	// The call's Wait returns once no process of the call is left: after
	// the shell exits (the helper kills what remains) or after Kill.
	waitDone := make(chan callExit, 1)
	go func() {
		code, _, err := call.Wait()
		waitDone <- callExit{code, err}
	}()
	cutPipes := func() {
		for _, r := range []*os.File{outR, errR} {
			if r.SetReadDeadline(time.Now()) != nil {
				r.Close()
			}
		}
	}

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var exit callExit
	exited := false
	select {
	case exit = <-waitDone:
		exited = true
	case <-deadline.C:
		run.status = TerminalTimedOut
	case <-ctx.Done():
		run.status = TerminalAborted
	}

	if exited {
		// Every process of the call is gone, so the pipes are at EOF
		// unless a process outside the call holds them (one the command
		// handed them to); give that a moment, then stop reading.
		drain := time.NewTimer(bashDrainGrace)
		select {
		case <-readersDone:
		case <-drain.C:
			cutPipes()
		case <-ctx.Done():
			cutPipes()
		}
		drain.Stop()
		<-readersDone
	} else {
		call.Terminate()
		kill := time.NewTimer(bashKillGrace)
		defer kill.Stop()
		var cut *time.Timer
		var killC, cutC <-chan time.Time = kill.C, nil
		waitC, readC := (<-chan callExit)(waitDone), (<-chan struct{})(readersDone)
		for waitC != nil || readC != nil {
			select {
			case exit = <-waitC:
				waitC = nil
				if readC != nil && cutC == nil {
					// As above: only a process outside the call can
					// still hold the pipes.
					cut = time.NewTimer(bashDrainGrace)
					cutC = cut.C
				}
			case <-readC:
				readC = nil
			case <-killC:
				killC = nil
				call.Kill()
			case <-cutC:
				cutC = nil
				cutPipes()
			}
		}
		if cut != nil {
			cut.Stop()
		}
	}
	run.duration = time.Since(start)

	switch run.status {
	case TerminalTimedOut:
		run.exitCode = ExitCodeTimedOut
	case TerminalAborted:
		run.exitCode = ExitCodeAborted
	default:
		run.exitCode = exit.code
		if exit.err != nil {
			run.exitCode = -1
		}
		run.status = TerminalCompleted
		if run.exitCode != 0 {
			run.status = TerminalFailed
		}
	}
	return run, nil
}

// sandboxRefusals are the stderr phrases of a refused file or socket
// operation.
var sandboxRefusals = []string{"Permission denied", "Operation not permitted"}

// sandboxHint is the model-text line added when a confined command failed
// with a refusal on stderr, or "".
func (r *commandRun) sandboxHint(stderr string) string {
	if r.sandbox == "" || r.status != TerminalFailed {
		return ""
	}
	for _, s := range sandboxRefusals {
		if strings.Contains(stderr, s) {
			return fmt.Sprintf("Note: the command ran in the %s sandbox, which may have refused this "+
				"(%s); if it needs more, re-run it with \"sandbox\": false to ask the user.",
				r.sandbox, sandboxAllows(r.sandbox))
		}
	}
	return ""
}

// sandboxAllows says what a sandbox mode lets a command do.
func sandboxAllows(m sandbox.Mode) string {
	if m == sandbox.ReadOnly {
		return "it may read files but write none, and has no network"
	}
	return "it may write only in the workspace and the temporary directory, and has no network"
}

// liveEmitter returns the function that forwards redacted output chunks of
// stream to env.Output, or nil when env.Output is nil. mu serialises the
// calls for both streams of a command.
func liveEmitter(env Env, stream string, mu *sync.Mutex) func([]byte) {
	if env.Output == nil {
		return nil
	}
	return func(chunk []byte) {
		text := Redact(string(chunk))
		mu.Lock()
		defer mu.Unlock()
		for _, piece := range splitChunk(text, BashChunkBytes) {
			env.Output(stream, piece)
		}
	}
}

// result renders the run as a terminal result.
func (r *commandRun) result(cwd, command string, timeout time.Duration) Result {
	outRaw, outDropped := r.stdout.tail.bytes()
	errRaw, errDropped := r.stderr.tail.bytes()
	stdout, stderr := Redact(string(outRaw)), Redact(string(errRaw))
	redacted := stdout != string(outRaw) || stderr != string(errRaw)
	stdout, outTrunc := tailTruncate(stdout, BashResultLines, BashResultBytes, outDropped)
	stderr, errTrunc := tailTruncate(stderr, BashResultLines, BashResultBytes, errDropped)
	c := terminalContent{
		Kind: "terminal", Cwd: cwd, Cmd: Redact(command), Status: r.status, ExitCode: r.exitCode,
		DurationMS: r.duration.Milliseconds(),
		Output: terminalOutput{Mode: "pipes", Stdout: stdout, Stderr: stderr,
			StdoutTruncated: outTrunc, StderrTruncated: errTrunc, Redacted: redacted},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Exit code: %d", r.exitCode)
	switch r.status {
	case TerminalTimedOut:
		fmt.Fprintf(&b, " (timed out after %d ms; every process of the command was killed)", timeout.Milliseconds())
	case TerminalAborted:
		b.WriteString(" (aborted)")
	}
	b.WriteByte('\n')
	if stdout != "" {
		b.WriteString("stdout:\n" + strings.TrimSuffix(stdout, "\n") + "\n")
	}
	if stderr != "" {
		b.WriteString("stderr:\n" + strings.TrimSuffix(stderr, "\n") + "\n")
	}
	if stdout == "" && stderr == "" {
		b.WriteString("(no output)\n")
	}
	if hint := r.sandboxHint(stderr); hint != "" {
		b.WriteString(hint + "\n")
	}
	return contentResult(c, strings.TrimSuffix(b.String(), "\n"), r.status != TerminalCompleted)
}

// ShellPath is the shell Bash commands run with: bash if it is on PATH,
// else sh.
func ShellPath() (string, error) { return shellPath() }
