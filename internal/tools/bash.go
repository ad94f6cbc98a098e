package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// NameBash is the name of the Bash tool.
const NameBash = "Bash"

// Bash timing.
const (
	// BashDefaultTimeout applies when timeout_ms is absent.
	BashDefaultTimeout = 120 * time.Second
	// BashMaxTimeout is the largest timeout; larger requests are clamped.
	BashMaxTimeout = 600 * time.Second
	// bashKillGrace is how long a process group has between SIGTERM and
	// SIGKILL.
	bashKillGrace = 2 * time.Second
	// bashDrainGrace is how long output pipes may stay open after the
	// shell exited (held by background processes) before they are cut.
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
		"timeout_ms defaults to 120000 and is capped at 600000; on timeout the whole process " +
		"group is killed. Background jobs (&) are stopped when the command returns. Output is " +
		"tail-truncated to 2000 lines / 50 KiB per stream."
}

func (bashTool) Parameters() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"command":{"type":"string","description":"The shell command to run."},` +
		`"timeout_ms":{"type":"integer","minimum":1,"maximum":600000,"description":"Timeout in milliseconds (default 120000)."}},` +
		`"required":["command"],"additionalProperties":false}`)
}

func (bashTool) PermissionRequired() bool { return true }
func (bashTool) ActivityKind() string     { return ActivityCommand }

type bashArgs struct {
	Command   *string `json:"command"`
	TimeoutMS *int64  `json:"timeout_ms"`
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
}

// runCommand runs command with the shell in its own process group and
// returns once the shell has exited and both output pipes are drained.
// Timeout and ctx cancellation terminate the whole group: SIGTERM, then
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

	cmd := exec.Command(shell, "-c", command)
	cmd.Dir = env.Workspace
	cmd.Stdout = outW
	cmd.Stderr = errW
	// cmd.Stdin stays nil: the command reads /dev/null.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		return nil, err
	}
	pgid := cmd.Process.Pid

	var emitMu sync.Mutex
	run := &commandRun{
		stdout: newStreamSink(liveEmitter(env, "stdout", &emitMu)),
		stderr: newStreamSink(liveEmitter(env, "stderr", &emitMu)),
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); run.stdout.copyFrom(outR) }()
	go func() { defer readers.Done(); run.stderr.copyFrom(errR) }()
	readersDone := make(chan struct{})
	go func() { readers.Wait(); close(readersDone) }()
	waitDone := make(chan error, 1)
	go func() { waitDone <- cmd.Wait() }()
	cutPipes := func() {
		for _, r := range []*os.File{outR, errR} {
			if r.SetReadDeadline(time.Now()) != nil {
				r.Close()
			}
		}
	}

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var waitErr error
	exited := false
	select {
	case waitErr = <-waitDone:
		exited = true
	case <-deadline.C:
		run.status = TerminalTimedOut
	case <-ctx.Done():
		run.status = TerminalAborted
	}

	if exited {
		// Background processes may still hold the pipes; give them a
		// moment, then stop reading.
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
		// Background jobs of the command do not outlive the call: nothing
		// would own them (and a host that stops would leave them behind).
		signalGroup(pgid, syscall.SIGKILL)
	} else {
		signalGroup(pgid, syscall.SIGTERM)
		kill := time.NewTimer(bashKillGrace)
		defer kill.Stop()
		var cut *time.Timer
		var killC, cutC <-chan time.Time = kill.C, nil
		waitC, readC := (<-chan error)(waitDone), (<-chan struct{})(readersDone)
		for waitC != nil || readC != nil {
			select {
			case waitErr = <-waitC:
				waitC = nil
			case <-readC:
				readC = nil
			case <-killC:
				killC = nil
				signalGroup(pgid, syscall.SIGKILL)
				// Processes that left the group may keep the pipes open.
				cut = time.NewTimer(bashDrainGrace)
				cutC = cut.C
			case <-cutC:
				cutC = nil
				cutPipes()
			}
		}
		if cut != nil {
			cut.Stop()
		}
		// Nothing of the group may outlive the call.
		signalGroup(pgid, syscall.SIGKILL)
	}
	run.duration = time.Since(start)

	switch run.status {
	case TerminalTimedOut:
		run.exitCode = ExitCodeTimedOut
	case TerminalAborted:
		run.exitCode = ExitCodeAborted
	default:
		run.exitCode = exitCode(cmd.ProcessState, waitErr)
		run.status = TerminalCompleted
		if run.exitCode != 0 {
			run.status = TerminalFailed
		}
	}
	return run, nil
}

// signalGroup sends sig to the process group pgid; a group that is already
// gone is not an error.
func signalGroup(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
}

// exitCode is the shell's exit status, 128+n for death by signal n.
func exitCode(ps *os.ProcessState, waitErr error) int {
	if ps == nil {
		if waitErr != nil {
			return -1
		}
		return 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
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
		fmt.Fprintf(&b, " (timed out after %d ms; the process group was killed)", timeout.Milliseconds())
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
	return contentResult(c, strings.TrimSuffix(b.String(), "\n"), r.status != TerminalCompleted)
}
