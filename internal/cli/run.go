package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/exitcode"
	"github.com/maka-agent/maka/internal/permsyntax"
	"github.com/maka-agent/maka/internal/providerinfo"
	"github.com/maka-agent/maka/protocol"
)

// hostFlags are the flags of every command that talks to the runtime host
// of a storage root, starting it when none runs.
//
// The hidden, repeatable --host-arg passes one argument through to the
// `maka host serve` a command spawns (only when it spawns one), e.g.
// --host-arg=--idle-grace=2s or --host-arg=--model-script=/abs/script.json
// for offline demos, tests and benchmarks. The host runs in "/", so paths
// must be absolute.
type hostFlags struct {
	root     string
	hostArgs []string
}

func (h *hostFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&h.root, "root", "", "storage root directory (default $MAKA_ROOT, else ~/.config/Maka/workspaces/default)")
	fs.StringArrayVar(&h.hostArgs, "host-arg", nil, "pass an argument to the runtime host this command starts, if it starts one (repeatable; paths must be absolute)")
	_ = fs.MarkHidden("host-arg")
}

// rootPath resolves --root (usage error when it cannot).
func (h *hostFlags) rootPath() (string, error) {
	root, err := rootFlag(h.root)
	if err != nil {
		return "", exitf(2, "%v", err)
	}
	return root, nil
}

// rootHint is the --root option to repeat in suggested commands.
func (h *hostFlags) rootHint() string {
	if h.root == "" {
		return ""
	}
	return " --root " + shellQuote(h.root)
}

// hostReadyTimeout bounds the wait for a connected host to become ready.
const hostReadyTimeout = 30 * time.Second

// connect connects to the host of the root, spawning it when needed, and
// waits until it is ready for domain operations.
func (h *hostFlags) connect(ctx context.Context, surface protocol.Surface) (*client.Conn, error) {
	root, err := h.rootPath()
	if err != nil {
		return nil, err
	}
	exe, err := hostExecutable()
	if err != nil {
		// Without maka-host a host that is already up still serves.
		if res, cerr := client.ConnectExisting(ctx, client.Options{RootPath: root, Surface: surface}); cerr == nil && res.Kind == client.Connected {
			return h.ready(ctx, root, res.Conn)
		} else if res.Conn != nil {
			res.Conn.Close()
		}
		return nil, exitf(1, "cannot start the runtime host: %v", err)
	}
	res, err := client.ConnectOrSpawn(ctx, client.Options{RootPath: root, Surface: surface},
		client.SpawnOptions{Executable: exe, ExtraArgs: h.hostArgs})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, exitf(1, "cannot use storage root %s: %v", root, err)
	}
	switch res.Kind {
	case client.Connected:
	case client.Incompatible:
		return nil, exitf(1, "%s; stop it with 'maka host stop%s' once its work is done", res, h.rootHint())
	default:
		return nil, exitf(1, "%s; see the host log %s and 'maka host status%s'", res, res.LogFile, h.rootHint())
	}
	return h.ready(ctx, root, res.Conn)
}

// ready waits until the host of conn is ready and says when it runs
// another build; it closes conn on failure.
func (h *hostFlags) ready(ctx context.Context, root string, conn *client.Conn) (*client.Conn, error) {
	if err := waitReady(ctx, conn); err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, exitf(1, "the runtime host of %s did not become ready: %v; see 'maka host status%s'", root, err, h.rootHint())
	}
	if pid, err := conn.PeerPID(); err == nil {
		if same, known := sameBuild(pid); known && !same {
			fmt.Fprintln(notices, otherBuildNotice(pid, h.rootHint()))
		}
	}
	return conn, nil
}

// notices receives the one-line notices of commands that are not their
// output (a host running another build).
var notices io.Writer = os.Stderr

// open connects for one command (surface inspect): ctx ends on Ctrl-C or
// SIGTERM, and done closes the connection and stops listening for them.
func (h *hostFlags) open(cmd *cobra.Command) (ctx context.Context, conn *client.Conn, done func(), err error) {
	ctx, stop := interruptible(cmd.Context())
	if conn, err = h.connect(ctx, protocol.SurfaceInspect); err != nil {
		stop()
		return ctx, nil, nil, err
	}
	return ctx, conn, func() { conn.Close(); stop() }, nil
}

// Polling of a host that is not ready yet: every readyPollFast (after 1, 2
// and 4 ms) during its first readyFastFor, the usual start-up of a fresh
// host (the store's open and recovery take tens of milliseconds), then
// every readyPollSlow. host.status is answered on the connection's reader,
// so a fast poll costs the host little; a longer one (the recovery of many
// sessions) does not need it.
const (
	readyPollFast = 8 * time.Millisecond
	readyFastFor  = time.Second
	readyPollSlow = 100 * time.Millisecond
)

// waitReady polls host.status until the host is ready (a freshly started
// host recovers its sessions first).
func waitReady(ctx context.Context, c *client.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, hostReadyTimeout)
	defer cancel()
	begin := time.Now()
	delay := time.Millisecond
	for {
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		switch st.State {
		case protocol.StateReady:
			return nil
		case protocol.StateDraining:
			return errors.New("the host is shutting down")
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("host still %s: %w", st.State, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, readyPollFast)
		if time.Since(begin) > readyFastFor {
			delay = readyPollSlow
		}
	}
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_./:=@%+,", r)))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ---------------------------------------------------------------------------
// maka run

type runOptions struct {
	host           hostFlags
	cwd            string
	session        string
	cont           bool
	connection     string
	model          string
	permissionMode string
	sandbox        string
	thinking       string
	allow, deny    []string
	json           bool
	usage          bool
	timeout        string
}

func newRunCommand() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run [PROMPT | -]",
		Short: "Run one agent turn non-interactively and stream its answer",
		Long: `Run one turn of an agent session and stream the assistant's text to stdout
as it arrives; tool activity goes to stderr, one line per tool start and
result. The runtime host of the storage root is started when none runs.

Without --session or --continue a new session is created whose workspace is
--cwd (default: the current directory). --permission-mode, --sandbox, --allow
and --deny are sent to the host and become the session's durable policy (the
host decides every call with it, for every client); a tool call that still
needs approval is denied (the message says which --allow would permit it) and
questions are declined.

Rules (--allow, --deny, repeatable; a matching --deny wins):
  Read                    a tool by name (Read, Write, Edit, Bash, Glob, Grep)
  'Bash(git status)'      one exact shell command
  'Bash(npm run test:*)'  one simple command starting with these words
  'Read(src/**)'          Read, Glob and Grep of paths matching a glob
  'Edit(docs/*.md)'       Edit and Write of matching paths
  category:file_write     a tool category (read, file_write, shell_safe,
                          shell_unsafe, fs_destructive, git_destructive,
                          network_send, web_read, ...)

Sandbox (--sandbox): workspace-write (the default: commands may write only in
the workspace and the temporary directory, and have no network), read-only,
or off. In execute mode a sandboxed command runs without asking.

Exit status: 0 completed, 1 failed or timed out, 2 usage error, 130 when
interrupted (Ctrl-C stops the turn first).`,
		Example: `  maka run "explain the build in this repository"
  git diff | maka run -                            # the prompt from stdin
  maka run --continue "now add tests for it"       # latest session of this directory
  maka run --permission-mode ask --allow Read --allow 'Bash(go test ./...)' "fix the failing test"
  maka run --connection openai --model gpt-4.1 --timeout 5m "summarise CHANGES.md"
  maka run --json "list the TODOs" | jq -r 'select(.type=="text").text'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTurnCommand(cmd, o, args)
		},
	}
	f := cmd.Flags()
	o.host.register(f)
	f.StringVar(&o.cwd, "cwd", "", "workspace directory of a new session, and the directory --continue looks for (default: the current directory)")
	f.StringVar(&o.session, "session", "", "continue the session with this id")
	f.BoolVar(&o.cont, "continue", false, "continue the most recently used session whose workspace is --cwd")
	f.StringVar(&o.connection, "connection", "", "model connection (slug) of a new session (default: the catalog's default target)")
	f.StringVar(&o.model, "model", "", "model id of a new session (default: the connection's first enabled model)")
	f.StringVar(&o.permissionMode, "permission-mode", "", "permission mode of the session: explore, ask, execute or bypass (default for a new session: the host's policy)")
	f.StringVar(&o.sandbox, "sandbox", "", "sandbox of the session's commands: workspace-write, read-only or off (default: the root's, workspace-write)")
	f.StringVar(&o.thinking, "thinking", "", "reasoning effort of a new session: off, low, medium or high (default: the model's own)")
	f.StringArrayVar(&o.allow, "allow", nil, "add a rule allowing matching tool calls to the session (repeatable)")
	f.StringArrayVar(&o.deny, "deny", nil, "add a rule denying matching tool calls to the session (repeatable; wins over --allow)")
	f.BoolVar(&o.json, "json", false, "write one JSON object per line: session, turn_started, text, thinking, tool_start, tool_result, interaction, retry, result")
	f.BoolVar(&o.usage, "usage", false, "print the turn's token usage and stop reason on stderr when it ends (--json always has them in its result)")
	f.StringVar(&o.timeout, "timeout", "", "stop the turn and exit 1 after this long (e.g. 90s, 5m; a plain number is seconds)")
	cmd.MarkFlagsMutuallyExclusive("session", "continue")
	_ = cmd.RegisterFlagCompletionFunc("permission-mode", cobra.FixedCompletions(
		[]string{"explore", "ask", "execute", "bypass"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("thinking", cobra.FixedCompletions(
		protocol.SessionThinkingLevels, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("sandbox", cobra.FixedCompletions(
		[]string{protocol.SandboxWorkspaceWrite, protocol.SandboxReadOnly, protocol.SandboxOff}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("session", completeSessionIDs(&o.host))
	_ = cmd.RegisterFlagCompletionFunc("connection", completeConnectionSlugs(&o.host))
	_ = cmd.MarkFlagDirname("cwd")
	return cmd
}

// runRequest is a validated `maka run` invocation.
type runRequest struct {
	opts    runOptions
	prompt  string
	cwd     string // canonical (symlinks resolved)
	cwdAbs  string // absolute, as given
	mode    protocol.PermissionMode
	rules   []protocol.PermissionRule
	timeout time.Duration
}

// parseRunRequest validates everything that can be checked without the
// host; every failure is a usage error (exit 2).
func parseRunRequest(o runOptions, args []string, stdin io.Reader) (runRequest, error) {
	r := runRequest{opts: o}
	if len(args) == 0 {
		return r, exitf(2, "no prompt: give it as an argument, or '-' to read it from stdin (see 'maka run --help')")
	}
	r.prompt = args[0]
	if r.prompt == "-" {
		b, err := io.ReadAll(io.LimitReader(stdin, protocol.MessageTextMaxBytes+1))
		if err != nil {
			return r, exitf(2, "cannot read the prompt from stdin: %v", err)
		}
		r.prompt = strings.TrimRight(string(b), "\r\n")
	}
	if strings.TrimSpace(r.prompt) == "" {
		return r, exitf(2, "the prompt is empty")
	}
	if len(r.prompt) > protocol.MessageTextMaxBytes {
		return r, exitf(2, "the prompt is larger than %d KiB; put the material in a file of the workspace and refer to it", protocol.MessageTextMaxBytes/1024)
	}
	if o.session != "" && !protocol.IsEntityID(o.session) {
		return r, exitf(2, "invalid --session %q: session ids are letters, digits, '-' and '_' (see 'maka sessions list')", o.session)
	}
	if o.permissionMode != "" {
		m, err := permsyntax.ParseMode(o.permissionMode)
		if err != nil {
			return r, exitf(2, "invalid --permission-mode: %v", err)
		}
		r.mode = protocol.PermissionMode(m)
	}
	if o.sandbox != "" {
		if !permsyntax.ValidSandboxMode(o.sandbox) {
			return r, exitf(2, "invalid --sandbox %q (want workspace-write, read-only or off)", o.sandbox)
		}
	}
	if err := providerinfo.CheckEffort(o.thinking); err != nil {
		return r, exitf(2, "invalid --thinking %q (want off, low, medium or high)", o.thinking)
	}
	if o.connection != "" && !protocol.IsConnectionSlug(o.connection) {
		return r, exitf(2, "invalid --connection %q: see 'maka connection list'", o.connection)
	}
	if o.model != "" && (strings.TrimSpace(o.model) != o.model || utf8.RuneCountInString(o.model) > protocol.ModelTargetModelMaxLen) {
		return r, exitf(2, "invalid --model %q", o.model)
	}
	for _, rs := range []struct {
		effect string
		list   []string
	}{{permsyntax.RuleDeny, o.deny}, {permsyntax.RuleAllow, o.allow}} {
		for _, s := range rs.list {
			rule, err := permsyntax.ParseRule(rs.effect, s)
			if err != nil {
				return r, exitf(2, "invalid --%s: %v (examples: Read, 'Bash(git status)', 'Read(src/**)', category:file_write)", rs.effect, err)
			}
			r.rules = append(r.rules, protocol.PermissionRule{Effect: rule.Effect, Rule: rule.String()})
		}
	}
	if o.timeout != "" {
		d, err := parseTimeout(o.timeout)
		if err != nil {
			return r, exitf(2, "invalid --timeout %q: %v", o.timeout, err)
		}
		r.timeout = d
	}
	cwd, err := canonicalDir(o.cwd)
	if err != nil {
		return r, exitf(2, "invalid --cwd: %v", err)
	}
	r.cwd, r.cwdAbs = cwd, cwd
	if o.cwd != "" {
		if abs, err := filepath.Abs(o.cwd); err == nil {
			r.cwdAbs = abs
		}
	} else if wd, err := os.Getwd(); err == nil {
		r.cwdAbs = wd
	}
	return r, nil
}

// parseTimeout accepts a Go duration or a positive number of seconds.
func parseTimeout(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return 0, errors.New("want a duration such as 90s or 5m")
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 {
		return 0, errors.New("must be positive")
	}
	return d, nil
}

// canonicalDir returns the absolute, symlink-free path of dir (default:
// the current directory), which must be a directory.
func canonicalDir(dir string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		dir = wd
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("%s does not exist", dir)
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	if len(real) > protocol.WorkspacePathMaxBytes {
		return "", fmt.Errorf("%s is longer than %d bytes", dir, protocol.WorkspacePathMaxBytes)
	}
	return real, nil
}

// signalCause is the cancellation cause of a command interrupted by a
// signal.
type signalCause struct{ sig os.Signal }

func (s *signalCause) Error() string { return "interrupted by " + s.sig.String() }

// exitCode is the conventional exit status of a command ended by the
// signal: 128 + its number.
func (s *signalCause) exitCode() int {
	if n, ok := s.sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 130
}

var errTimedOut = errors.New("timed out")

// interruptible returns ctx cancelled with a *signalCause on the first
// SIGINT or SIGTERM. stop releases the signals and ends the watcher.
func interruptible(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case s := <-sigs:
			cancel(&signalCause{sig: s})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		<-exited
		cancel(nil)
	}
}

// stopTimeout bounds turn.stop after an interrupt or a timeout.
const stopTimeout = 10 * time.Second

func runTurnCommand(cmd *cobra.Command, o runOptions, args []string) error {
	req, err := parseRunRequest(o, args, cmd.InOrStdin())
	if err != nil {
		return err
	}
	ctx, stop := interruptible(cmd.Context())
	defer stop()
	if req.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, req.timeout, errTimedOut)
		defer cancel()
	}
	p := newPrinter(cmd.OutOrStdout(), cmd.ErrOrStderr(), o.json)
	p.showUsage = o.usage
	r := &turnRun{req: req, p: p}
	defer func() {
		if r.conn != nil {
			r.conn.Close()
		}
	}()
	code, err := r.execute(ctx)
	if err != nil {
		if cause := context.Cause(ctx); ctx.Err() != nil && cause != nil {
			return r.interrupted(cause)
		}
		return err
	}
	if code != 0 {
		return &exitcode.Error{Code: code, Err: errors.New("")}
	}
	return nil
}

// turnRun is one `maka run`.
type turnRun struct {
	req  runRequest
	p    *printer
	conn *client.Conn

	sessionID, turnID, runID string
	started                  time.Time
}

// interrupted reports a command ended by a signal or its timeout before
// the turn's end was seen, stopping the turn if it started.
func (r *turnRun) interrupted(cause error) error {
	var snap *protocol.TurnSnapshot
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if r.conn != nil && r.turnID != "" && r.runID == "" {
		// Interrupted while turn.start was in flight: the turn may exist.
		if q, err := r.conn.QueryTurn(ctx, protocol.TurnQueryInput{SessionID: r.sessionID, TurnID: r.turnID}); err == nil {
			r.runID = q.RunID
		}
	}
	if r.conn != nil && r.runID != "" {
		s, err := r.conn.StopTurn(ctx, protocol.TurnStopInput{SessionID: r.sessionID, TurnID: r.turnID, RunID: r.runID})
		if err == nil {
			snap = &s
		} else {
			r.p.notef("maka: could not stop turn %s: %v", r.turnID, err)
		}
	}
	r.p.endText()
	var status protocol.TurnStatus
	if snap != nil {
		status = snap.Status
	}
	r.printUsage(status)
	var sc *signalCause
	if errors.As(cause, &sc) {
		r.p.result(r.resultEvent(snap, "interrupted", sc.exitCode()))
		r.p.notef("maka: interrupted; turn %s stopped", r.turnID)
		return &exitcode.Error{Code: sc.exitCode(), Err: errors.New("")}
	}
	if snap != nil && snap.Status == protocol.TurnCompleted {
		r.p.result(r.resultEvent(snap, "", 0))
		return nil
	}
	r.p.result(r.resultEvent(snap, "timed out", 1))
	if r.runID == "" {
		return exitf(1, "timed out after %v before the turn started; see 'maka host status%s'", r.req.timeout, r.req.opts.host.rootHint())
	}
	return exitf(1, "timed out after %v; the turn was stopped (continue it with 'maka run --session %s%s ...')",
		r.req.timeout, r.sessionID, r.req.opts.host.rootHint())
}

func (r *turnRun) resultEvent(snap *protocol.TurnSnapshot, message string, code int) event {
	ev := event{Type: "result", SessionID: r.sessionID, TurnID: r.turnID, RunID: r.runID, Message: message, ExitCode: &code}
	if snap != nil {
		ev.Status = string(snap.Status)
		ev.FailureClass, ev.AbortSource = snap.FailureClass, snap.AbortSource
	}
	if !r.started.IsZero() {
		ms := time.Since(r.started).Milliseconds()
		ev.DurationMs = &ms
	}
	return ev
}

// execute runs the turn and returns the exit code; an error return is a
// failure before or around the turn (ctx errors included).
func (r *turnRun) execute(ctx context.Context) (int, error) {
	conn, err := r.req.opts.host.connect(ctx, protocol.SurfaceRun)
	if err != nil {
		return 0, err
	}
	r.conn = conn
	sum, created, err := r.selectSession(ctx)
	if err != nil {
		return 0, err
	}
	r.sessionID = sum.SessionID
	r.p.output = toolOutputs(ctx, conn, sum.SessionID)
	sum, box, err := r.applyPermissions(ctx, sum, created)
	if err != nil {
		return 0, err
	}
	r.p.emit(event{Type: "session", SessionID: sum.SessionID, Workspace: sum.Workspace.Path, Created: &created,
		PermissionMode: string(sum.PermissionMode), Sandbox: box})
	sub, err := conn.OpenSubscription(ctx, sum.SessionID, client.WithNotices())
	if err != nil {
		return 0, callError(ctx, "cannot follow session "+sum.SessionID, err)
	}
	if rt := sub.Open.Snapshot.RootTurn; rt != nil && !rt.Status.Terminal() {
		return 0, exitf(1, "session %s is running turn %s; follow it with 'maka attach %s%s'",
			sum.SessionID, rt.TurnID, sum.SessionID, r.req.opts.host.rootHint())
	}
	r.turnID = uuid.NewString()
	r.started = time.Now()
	snap, err := conn.StartTurn(ctx, protocol.TurnStartInput{
		SessionID: sum.SessionID, TurnID: r.turnID, Content: protocol.MessageContent{Text: r.req.prompt},
	})
	if err != nil {
		switch {
		case client.IsCode(err, protocol.ErrSessionBusy):
			return 0, exitf(1, "session %s is running another turn; follow it with 'maka attach %s%s'", sum.SessionID, sum.SessionID, r.req.opts.host.rootHint())
		case client.IsCode(err, protocol.ErrSessionArchived):
			return 0, exitf(1, "session %s is archived; restore it with 'maka sessions unarchive %s%s'", sum.SessionID, sum.SessionID, r.req.opts.host.rootHint())
		}
		return 0, callError(ctx, "cannot start the turn", err)
	}
	r.runID = snap.RunID
	r.p.emit(event{Type: "turn_started", SessionID: r.sessionID, TurnID: r.turnID, RunID: r.runID, Status: string(snap.Status)})
	f := &follower{conn: conn, p: r.p, sessionID: r.sessionID, turnID: r.turnID, answer: r.answerInteraction}
	final, err := f.follow(ctx, sub)
	if err != nil {
		return 0, err
	}
	return r.finish(ctx, final), nil
}

// printUsage prints --usage's stderr line for the turn, however it ended.
func (r *turnRun) printUsage(status protocol.TurnStatus) {
	if !r.p.showUsage {
		return
	}
	if line := r.p.usageLine(r.turnID, status); line != "" {
		r.p.notef("maka: %s", line)
	}
}

// finish reports the terminal snapshot and returns the exit code.
func (r *turnRun) finish(ctx context.Context, snap protocol.TurnSnapshot) int {
	r.p.endText()
	r.printUsage(snap.Status)
	switch snap.Status {
	case protocol.TurnCompleted:
		r.p.result(r.resultEvent(&snap, "", 0))
		return 0
	case protocol.TurnCancelled:
		msg := "the turn was cancelled (" + snap.AbortSource + ")"
		r.p.result(r.resultEvent(&snap, msg, 1))
		r.p.notef("maka: %s", msg)
		return 1
	default:
		msg := explainFailureWith(ctx, r.conn, snap, r.req.opts.host.rootHint(), r.p.failure)
		r.p.result(r.resultEvent(&snap, msg, 1))
		r.p.notef("maka: %s", msg)
		return 1
	}
}

// selectSession resumes --session, finds the --continue session, or
// creates a new one.
func (r *turnRun) selectSession(ctx context.Context) (protocol.SessionSummary, bool, error) {
	o := r.req.opts
	hint := o.host.rootHint()
	switch {
	case o.session != "":
		sum, err := getSession(ctx, r.conn, o.session)
		if err != nil {
			return sum, false, err
		}
		r.warnCreationFlags(sum)
		return sum, false, nil
	case o.cont:
		found, err := listSessions(ctx, r.conn, false, 1, func(s protocol.SessionSummary) bool {
			return s.Workspace.Path == r.req.cwd || s.Workspace.Path == r.req.cwdAbs
		})
		if err != nil {
			return protocol.SessionSummary{}, false, callError(ctx, "cannot list sessions", err)
		}
		if len(found) == 0 {
			return protocol.SessionSummary{}, false, exitf(2, "no session has the workspace %s; run without --continue to start one (or see 'maka sessions list%s')", r.req.cwd, hint)
		}
		r.warnCreationFlags(found[0])
		return found[0], false, nil
	}
	in := protocol.SessionCreateInput{
		SessionID: uuid.NewString(), Workspace: protocol.HostPathWorkspace(r.req.cwd),
		Name: sessionName(r.req.prompt), PermissionMode: r.req.mode, Thinking: o.thinking,
	}
	if o.connection != "" || o.model != "" {
		target, err := resolveModelTarget(ctx, r.conn, o.connection, o.model, hint)
		if err != nil {
			return protocol.SessionSummary{}, false, err
		}
		in.ModelTarget = &target
	}
	res, err := r.conn.Call(ctx, protocol.OpSessionCreate, in)
	if err != nil {
		return protocol.SessionSummary{}, false, callError(ctx, "cannot create a session", err)
	}
	sum, ok := res.(protocol.SessionSummary)
	if !ok {
		return sum, false, exitf(1, "session.create: unexpected result %T", res)
	}
	return sum, true, nil
}

// applyPermissions sends --permission-mode (to an existing session),
// --sandbox, --allow and --deny to the host as the session's policy (or
// reads the policy when none is given) and returns the summary with the
// mode in force and the sandbox its commands run in.
func (r *turnRun) applyPermissions(ctx context.Context, sum protocol.SessionSummary, created bool) (protocol.SessionSummary, string, error) {
	o := r.req.opts
	in := protocol.SessionPermissionsSetInput{SessionID: sum.SessionID, Sandbox: o.sandbox, AddRules: r.req.rules}
	if !created {
		in.Thinking = o.thinking
	}
	inherited := ""
	switch {
	case !created && r.req.mode != "":
		in.PermissionMode = r.req.mode
	case !created && sum.PermissionMode == protocol.PermissionModeBypass:
		// bypass is kept only when asked for again: this run, and the
		// session from now on, use the root's default mode.
		def, err := r.defaultMode(ctx)
		if err != nil {
			return sum, "", err
		}
		if def != protocol.PermissionModeBypass {
			in.PermissionMode, inherited = def, string(def)
		}
	}
	var res any
	var err error
	if in.PermissionMode == "" && in.Sandbox == "" && len(in.AddRules) == 0 && in.Thinking == "" {
		res, err = r.conn.Call(ctx, protocol.OpSessionPermissionsQuery, protocol.SessionPermissionsQueryInput{SessionID: sum.SessionID})
	} else {
		res, err = r.conn.Call(ctx, protocol.OpSessionPermissionsSet, in)
	}
	if err != nil {
		return sum, "", callError(ctx, "cannot set the session's permissions", err)
	}
	perms, ok := res.(protocol.SessionPermissions)
	if !ok {
		return sum, "", exitf(1, "session permissions: unexpected result %T", res)
	}
	switch {
	case inherited != "":
		r.p.notef("maka: permission mode: %s (the session was in bypass, which is kept only with --permission-mode bypass)", perms.PermissionMode)
	case perms.PermissionMode != sum.PermissionMode:
		r.p.notef("maka: permission mode: %s (was %s)", perms.PermissionMode, sum.PermissionMode)
	default:
		r.p.notef("maka: permission mode: %s", perms.PermissionMode)
	}
	if in.Thinking != "" {
		r.p.notef("maka: reasoning effort: %s", perms.Thinking)
	}
	sum.PermissionMode = perms.PermissionMode
	box := perms.SandboxInForce()
	switch {
	case o.sandbox != "" && box == protocol.SandboxUnavailable:
		r.p.notef("maka: sandbox: unavailable here (%s); commands run unconfined and ask in execute mode", perms.SandboxReason)
	case o.sandbox != "":
		r.p.notef("maka: sandbox: %s", box)
	}
	return sum, box, nil
}

// defaultMode is the permission mode the root gives new sessions (its
// runtime policy's chat default).
func (r *turnRun) defaultMode(ctx context.Context) (protocol.PermissionMode, error) {
	snap, err := r.conn.QueryRuntimePolicy(ctx)
	if err != nil {
		return "", callError(ctx, "cannot read the root's default permission mode", err)
	}
	return protocol.PermissionMode(snap.Policy.ChatDefaults.PermissionMode), nil
}

// warnCreationFlags says that the model options of a new session do not
// change an existing one (--thinking does: applyPermissions sends it).
func (r *turnRun) warnCreationFlags(sum protocol.SessionSummary) {
	o := r.req.opts
	if o.connection != "" || o.model != "" {
		r.p.notef("maka: session %s keeps its model (--connection and --model apply to new sessions)", sum.SessionID)
	}
}

// sessionName derives a session's name from its first prompt: its first
// line, whitespace collapsed, at most 80 characters.
func sessionName(prompt string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(prompt), "\n")
	line = strings.Join(strings.FieldsFunc(line, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	if utf8.RuneCountInString(line) > 80 {
		rs := []rune(line)
		line = strings.TrimSpace(string(rs[:79])) + "…"
	}
	return line
}

// answerInteraction answers a pending interaction of the run: every
// permission request is denied (the host allowed what the rules allow) and
// questions are declined.
func (r *turnRun) answerInteraction(ctx context.Context, in protocol.InteractionSnapshot) {
	var answer protocol.InteractionAnswer
	ev := event{Type: "interaction", SessionID: r.sessionID, TurnID: in.TurnID, InteractionID: in.InteractionID, Kind: in.Request.Kind}
	if in.Request.Kind == protocol.InteractionKindQuestion {
		answer = protocol.InteractionAnswer{Kind: protocol.InteractionKindQuestion, Answers: make([]*string, len(in.Request.Questions))}
		ev.Decision = "declined"
		q := ""
		if len(in.Request.Questions) > 0 {
			q = in.Request.Questions[0].Question
		}
		r.p.notef("? declined a question (%s); 'maka run' cannot answer questions, use 'maka attach' to answer them", oneLine(q, 120))
	} else {
		pr := describePermission(in.Request)
		r.p.knowTool(in.Request.ToolUseID, pr.tool)
		ev.ToolName, ev.Category, ev.Command = pr.tool, pr.category, pr.command
		// The host already applied the session's rules: what reaches
		// here needs a person, and a non-interactive run has none.
		answer = protocol.InteractionAnswer{Kind: protocol.InteractionKindPermission, Decision: protocol.InteractionDecisionDeny}
		ev.Decision = "deny"
		if rule := pr.suggestRule(); rule != "" {
			ev.Message = "no rule allows it; to allow it run again with --allow " + shellQuote(rule)
			r.p.notef("✗ denied %s: no rule allows it; to allow it, run again with --allow %s", pr, shellQuote(rule))
		} else {
			ev.Message = "it needs approval; answer it with 'maka attach' or the terminal UI"
			r.p.notef("✗ denied %s: it needs approval; answer it from 'maka attach' or the terminal UI", pr)
		}
	}
	r.p.emit(ev)
	if _, err := r.conn.AnswerInteraction(ctx, protocol.InteractionAnswerInput{InteractionID: in.InteractionID, Answer: answer}); err != nil &&
		!client.IsCode(err, protocol.ErrAlreadyResolved) && ctx.Err() == nil {
		r.p.notef("maka: could not answer interaction %s: %v", in.InteractionID, err)
	}
}

// callError turns a failed host call into a command error.
func callError(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var oe *client.OperationError
	if errors.As(err, &oe) {
		return exitf(1, "%s: %s (%s)", what, oe.Message, oe.Code)
	}
	return exitf(1, "%s: %v", what, err)
}

// oneLine shortens s to one line of at most n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > n {
		rs := []rune(s)
		s = string(rs[:n-1]) + "…"
	}
	return s
}

// ---------------------------------------------------------------------------
// Following a session

// maxResubscribe bounds how often a follower reopens a failed subscription.
const maxResubscribe = 3

// follower prints the frames of one turn of a session and answers the
// turn's pending interactions, until the turn is terminal.
type follower struct {
	conn      *client.Conn
	p         *printer
	sessionID string
	turnID    string
	// answer handles a pending interaction of the turn seen for the first
	// time; nil leaves interactions alone.
	answer func(ctx context.Context, in protocol.InteractionSnapshot)
	seen   map[string]bool
}

// follow reads frames until the followed turn is terminal and returns its
// snapshot.
func (f *follower) follow(ctx context.Context, sub *client.Subscription) (protocol.TurnSnapshot, error) {
	f.seen = map[string]bool{}
	defer func() {
		if sub == nil {
			return // a reopen failed
		}
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = sub.Close(cctx)
		cancel()
	}()
	reopened := 0
	// The first subscription was opened before the turn started: its
	// snapshot predates the turn, whose frames all follow.
	if snap, done := f.projection(ctx, sub.Open.Snapshot, false); done {
		return snap, nil
	}
	for {
		frame, err := sub.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return protocol.TurnSnapshot{}, ctx.Err()
			}
			var se *client.SubscriptionError
			if (errors.As(err, &se) || errors.Is(err, io.EOF)) && f.conn.Err() == nil && reopened < maxResubscribe {
				reopened++
				f.p.notef("maka: live output interrupted (%v); resuming", err)
				sub, err = f.conn.OpenSubscription(ctx, f.sessionID, client.WithNotices())
				if err == nil {
					// Frames may have been missed: ask for the turn.
					if snap, done := f.projection(ctx, sub.Open.Snapshot, true); done {
						return snap, nil
					}
					continue
				}
			}
			if ctx.Err() != nil {
				return protocol.TurnSnapshot{}, ctx.Err()
			}
			return protocol.TurnSnapshot{}, exitf(1, "lost the session's live output: %v; the turn may still finish: see 'maka sessions show %s'", err, f.sessionID)
		}
		switch fr := frame.(type) {
		case protocol.DeltaFrame:
			if fr.Delta.TurnID == f.turnID {
				f.p.delta(fr.Delta)
			}
		case protocol.EventFrame:
			if fr.Event.TurnID == f.turnID {
				f.p.tool(fr.Event)
			}
		case protocol.NoticeFrame:
			if fr.Notice.TurnID == f.turnID || fr.Notice.TurnID == "" {
				f.p.notice(fr.Notice)
			}
		case protocol.ProjectionFrame:
			if snap, done := f.projection(ctx, fr.Snapshot, true); done {
				return snap, nil
			}
		case protocol.ClosedFrame:
			if fr.Reason == protocol.CloseSessionRemoved {
				return protocol.TurnSnapshot{}, exitf(1, "session %s was removed", f.sessionID)
			}
			// slow_consumer: Next returns io.EOF next and the
			// subscription is reopened.
		}
	}
}

// projection handles a snapshot; done reports that the followed turn is
// terminal (its snapshot is returned). When the snapshot names no turn or
// another one and query is set, the followed turn is looked up (it may
// have ended while frames were missed).
func (f *follower) projection(ctx context.Context, snap protocol.SessionContinuitySnapshot, query bool) (protocol.TurnSnapshot, bool) {
	if f.answer != nil {
		// seen keeps only what is still pending: an answered interaction
		// never becomes pending again.
		still := make(map[string]bool, len(snap.Interactions.Pending))
		for _, in := range snap.Interactions.Pending {
			if in.Status != protocol.InteractionStatusPending || in.TurnID != f.turnID {
				continue
			}
			still[in.InteractionID] = true
			if !f.seen[in.InteractionID] {
				f.answer(ctx, in)
			}
		}
		f.seen = still
	}
	if rt := snap.RootTurn; rt != nil && rt.TurnID == f.turnID {
		return *rt, rt.Status.Terminal()
	}
	if !query {
		return protocol.TurnSnapshot{}, false
	}
	q, err := f.conn.QueryTurn(ctx, protocol.TurnQueryInput{SessionID: f.sessionID, TurnID: f.turnID})
	if err == nil && q.Status.Terminal() {
		return q, true
	}
	return protocol.TurnSnapshot{}, false
}

// ---------------------------------------------------------------------------
// Output

// event is one line of --json output.
type event struct {
	// V is the version of the event schema (eventSchemaVersion), on every
	// event.
	V              int    `json:"v"`
	Type           string `json:"type"`
	SessionID      string `json:"sessionId,omitempty"`
	TurnID         string `json:"turnId,omitempty"`
	RunID          string `json:"runId,omitempty"`
	Text           string `json:"text,omitempty"`
	Workspace      string `json:"workspace,omitempty"`
	Created        *bool  `json:"created,omitempty"`
	PermissionMode string `json:"permissionMode,omitempty"`
	Sandbox        string `json:"sandbox,omitempty"`
	ToolUseID      string `json:"toolUseId,omitempty"`
	ToolName       string `json:"toolName,omitempty"`
	// Input is a tool call's one-line summary (its command, path or
	// pattern), on tool_start.
	Input string `json:"input,omitempty"`
	// Output is what a tool returned (at most toolOutputMax bytes;
	// OutputTruncated when cut), on tool_result.
	Output          string `json:"output,omitempty"`
	OutputTruncated bool   `json:"outputTruncated,omitempty"`
	Status          string `json:"status,omitempty"`
	DurationMs      *int64 `json:"durationMs,omitempty"`
	InteractionID   string `json:"interactionId,omitempty"`
	Kind            string `json:"kind,omitempty"`
	Category        string `json:"category,omitempty"`
	Command         string `json:"command,omitempty"`
	Decision        string `json:"decision,omitempty"`
	Rule            string `json:"rule,omitempty"`
	FailureClass    string `json:"failureClass,omitempty"`
	AbortSource     string `json:"abortSource,omitempty"`
	Message         string `json:"message,omitempty"`
	ExitCode        *int   `json:"exitCode,omitempty"`
	// Attempt of MaxAttempts starts after DelayMs, on retry.
	Attempt     int64  `json:"attempt,omitempty"`
	MaxAttempts int64  `json:"maxAttempts,omitempty"`
	DelayMs     *int64 `json:"delayMs,omitempty"`
	// Usage is the turn's token usage and StopReason how it ended
	// (end_turn, max_tokens, content_filter, cancelled, failed, other), on
	// result; usage is absent when the provider did not report it.
	Usage      *protocol.TokenUsage `json:"usage,omitempty"`
	StopReason string               `json:"stopReason,omitempty"`
}

// toolOutputs reads a finished tool use's output from the session's
// transcript (its result is recorded before it is published).
func toolOutputs(ctx context.Context, conn *client.Conn, sessionID string) func(turnID, toolUseID string) (string, bool) {
	return func(_, toolUseID string) (string, bool) {
		msgs, err := transcriptTail(ctx, conn, sessionID, 64)
		if err != nil {
			return "", false
		}
		for i := len(msgs) - 1; i >= 0; i-- {
			if m := msgs[i]; m.Role == protocol.TranscriptRoleTool && m.ToolUseID == toolUseID {
				out := protocol.TruncateUTF8(m.Output, toolOutputMax)
				return out, m.Truncated || len(out) < len(m.Output)
			}
		}
		return "", false
	}
}

// eventSchemaVersion is the version of the --json event schema (README,
// "Scripting with --json"). It changes when a field changes meaning or
// goes away; new fields do not change it.
const eventSchemaVersion = 1

// toolOutputMax bounds the tool output a tool_result event carries.
const toolOutputMax = 4096

// finalTextMax bounds the final text a result event carries.
const finalTextMax = 64 * 1024

// printer renders a session's live output: assistant text to stdout as it
// arrives, tool activity and notes to stderr; or, in JSON mode, one event
// per line to stdout.
type printer struct {
	stdout, stderr io.Writer
	enc            *json.Encoder // JSON mode
	stdoutTTY      bool
	atLineStart    bool
	// tools maps a tool use to its name and start time, for its result
	// line; entries are removed at the result.
	tools map[string]*toolStart
	// output, when set, reads what a finished tool use returned (JSON
	// mode, for tools that streamed no output).
	output func(turnID, toolUseID string) (text string, truncated bool)
	// text is the turn's assistant text so far (JSON mode), for the
	// result event.
	text strings.Builder
	// failure is what the last failed model request of the turn said
	// (model_failed, else the last model_retry notice), for the final
	// explanation.
	failure string
	// usage is the token usage of usageTurn (nil: unknown) and
	// stopReason how it ended, from its turn_usage notices.
	usage      *protocol.TokenUsage
	usageTurn  string
	stopReason string
	// showUsage prints the turn's usage on stderr at its end (text mode).
	showUsage bool
}

type toolStart struct {
	name      string
	ts        int64
	out       strings.Builder // streamed output, at most toolOutputMax bytes
	truncated bool
}

// maxTrackedTools bounds the tool uses a printer remembers.
const maxTrackedTools = 1024

func newPrinter(stdout, stderr io.Writer, jsonMode bool) *printer {
	p := &printer{stdout: stdout, stderr: stderr, atLineStart: true, tools: map[string]*toolStart{}}
	if jsonMode {
		p.enc = json.NewEncoder(stdout)
		p.enc.SetEscapeHTML(false)
	}
	if f, ok := stdout.(*os.File); ok {
		p.stdoutTTY = isTerminal(f)
	}
	return p
}

func (p *printer) emit(ev event) {
	if p.enc != nil {
		ev.V = eventSchemaVersion
		_ = p.enc.Encode(ev)
	}
}

// result emits the final event (JSON mode only) with the turn's text,
// usage and stop reason.
func (p *printer) result(ev event) {
	if ev.Text == "" {
		ev.Text = p.text.String()
	}
	if ev.TurnID != "" && ev.TurnID == p.usageTurn {
		ev.Usage = p.usage
	}
	ev.StopReason = p.turnStopReason(ev.TurnID, protocol.TurnStatus(ev.Status))
	p.emit(ev)
}

// turnStopReason is how turnID ended: what its final turn_usage notice
// said, else what its status says.
func (p *printer) turnStopReason(turnID string, status protocol.TurnStatus) string {
	if turnID != "" && turnID == p.usageTurn && p.stopReason != "" {
		return p.stopReason
	}
	switch status {
	case protocol.TurnCancelled:
		return protocol.StopReasonCancelled
	case protocol.TurnFailed:
		return protocol.StopReasonFailed
	}
	return ""
}

// usageLine is the one-line summary of turnID's usage, "12.3k in · 845
// out · end_turn", or "" when nothing is known.
func (p *printer) usageLine(turnID string, status protocol.TurnStatus) string {
	reason := p.turnStopReason(turnID, status)
	var parts []string
	if p.usage != nil && turnID == p.usageTurn {
		parts = append(parts, compactTokens(p.usage.InputTokens)+" in")
		if p.usage.CacheReadTokens > 0 {
			parts[0] += " (" + compactTokens(p.usage.CacheReadTokens) + " cached)"
		}
		parts = append(parts, compactTokens(p.usage.OutputTokens)+" out")
	}
	if reason != "" {
		parts = append(parts, reason)
	}
	return strings.Join(parts, " · ")
}

// compactTokens writes a token count as 845, 12.3k or 1.2M.
func compactTokens(n int64) string {
	switch {
	case n < 1000:
		return strconv.FormatInt(n, 10)
	case n < 1_000_000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
}

// notef writes a line to stderr in text mode. When stdout is a terminal
// in the middle of a line, that line is ended first so that the two
// streams do not share a line.
// notice prints a session notice ("context compacted (N → M tokens)") on
// stderr, in --json mode too: it is not part of the turn's output.
//
// A model_retry notice prints "maka: attempt 2/10 in 4 s: <what failed>"
// (and, in --json mode, a retry event); a model_failed notice prints
// nothing: its message goes into the turn's final explanation.
func (p *printer) notice(n protocol.SessionNotice) {
	switch n.Kind {
	case protocol.NoticeTurnUsage:
		// Usage is not a notice of its own: the result event carries it
		// (and, with --usage, a line at the turn's end).
		if n.TurnID != p.usageTurn {
			p.usageTurn, p.usage, p.stopReason = n.TurnID, nil, ""
		}
		p.usage = nil
		if n.HasUsage {
			u := n.Usage
			p.usage = &u
		}
		if n.Final {
			p.stopReason = n.StopReason
		}
		return
	case protocol.NoticeModelFailed:
		p.failure = n.Message
		return
	case protocol.NoticeModelRetry:
		if _, what, ok := strings.Cut(n.Message, ": "); ok {
			p.failure = what
		}
		delay := n.DelayMs
		p.emit(event{Type: "retry", TurnID: n.TurnID, Attempt: n.Attempt, MaxAttempts: n.MaxAttempts, DelayMs: &delay, Message: n.Message})
	}
	if p.stdoutTTY && !p.atLineStart && p.enc == nil {
		fmt.Fprintln(p.stdout)
		p.atLineStart = true
	}
	fmt.Fprintf(p.stderr, "maka: %s\n", n.Message)
}

func (p *printer) notef(format string, args ...any) {
	if p.enc != nil {
		return
	}
	if p.stdoutTTY && !p.atLineStart {
		fmt.Fprintln(p.stdout)
		p.atLineStart = true
	}
	fmt.Fprintf(p.stderr, format+"\n", args...)
}

func (p *printer) delta(d protocol.SessionAssistantDelta) {
	switch {
	case p.enc != nil:
		typ := "text"
		if d.Kind == protocol.DeltaThinking {
			typ = "thinking"
		}
		p.emit(event{Type: typ, TurnID: d.TurnID, Text: d.Text})
		if typ == "text" && p.text.Len()+len(d.Text) <= finalTextMax {
			p.text.WriteString(d.Text)
		}
	case d.Kind == protocol.DeltaText && d.Text != "":
		_, _ = io.WriteString(p.stdout, d.Text)
		p.atLineStart = strings.HasSuffix(d.Text, "\n")
	}
}

func (p *printer) tool(ev protocol.SessionToolEvent) {
	switch ev.Type {
	case protocol.ToolStart:
		if len(p.tools) < maxTrackedTools {
			p.tools[ev.ToolUseID] = &toolStart{name: ev.ToolName, ts: ev.TS}
		}
		p.emit(event{Type: "tool_start", TurnID: ev.TurnID, ToolUseID: ev.ToolUseID, ToolName: ev.ToolName, Input: ev.DisplayName})
		line := "▸ " + ev.ToolName
		if ev.DisplayName != "" && ev.DisplayName != ev.ToolName {
			line += " " + oneLine(ev.DisplayName, 160)
		}
		p.notef("%s", line)
	case protocol.ToolOutputDelta:
		if st := p.tools[ev.ToolUseID]; st != nil && !st.truncated {
			room := toolOutputMax - st.out.Len()
			chunk := ev.Chunk
			if len(chunk) > room {
				chunk, st.truncated = protocol.TruncateUTF8(chunk, room), true
			}
			st.out.WriteString(chunk)
		}
	case protocol.ToolResult:
		st, known := p.tools[ev.ToolUseID]
		delete(p.tools, ev.ToolUseID)
		if st == nil {
			st = &toolStart{}
		}
		name := st.name
		if name == "" {
			name = "tool"
		}
		var ms *int64
		switch {
		case ev.DurationMs != nil:
			ms = ev.DurationMs
		case known && st.ts >= 0 && ev.TS >= st.ts:
			d := ev.TS - st.ts
			ms = &d
		}
		res := event{Type: "tool_result", TurnID: ev.TurnID, ToolUseID: ev.ToolUseID, ToolName: name, Status: ev.Status, DurationMs: ms,
			Output: st.out.String(), OutputTruncated: st.truncated}
		if p.enc != nil && res.Output == "" && p.output != nil {
			res.Output, res.OutputTruncated = p.output(ev.TurnID, ev.ToolUseID)
		}
		p.emit(res)
		mark := "✓"
		if ev.Status != "completed" {
			mark = "✗"
		}
		line := mark + " " + name
		if ms != nil {
			line += fmt.Sprintf(" (%d ms)", *ms)
		}
		if ev.Status != "completed" {
			line += " " + ev.Status
		}
		p.notef("%s", line)
	}
}

// knowTool records the name of a tool use whose start was not seen (a
// follower that joined while the call waited for approval).
func (p *printer) knowTool(toolUseID, name string) {
	if _, ok := p.tools[toolUseID]; !ok && toolUseID != "" && len(p.tools) < maxTrackedTools {
		p.tools[toolUseID] = &toolStart{name: name, ts: -1}
	}
}

// endText ends the streamed text with a newline (text mode).
func (p *printer) endText() {
	if p.enc == nil && !p.atLineStart {
		fmt.Fprintln(p.stdout)
		p.atLineStart = true
	}
}

// ---------------------------------------------------------------------------
// Permissions

// permissionRequest is what a permission interaction asks for.
type permissionRequest struct {
	tool, category, command string
	// remember reports whether the prompt allows "for the rest of the
	// turn".
	remember bool
	// escalation marks a request to run a command outside the sandbox.
	escalation bool
}

func (p permissionRequest) String() string {
	s := p.tool
	if p.command != "" {
		s += " `" + oneLine(p.command, 200) + "`"
	}
	if p.category != "" {
		s += " [" + p.category + "]"
	}
	return s
}

// suggestRule is the narrowest --allow rule that permits the request, or
// "" for a sandbox escalation, which only a person can approve.
func (p permissionRequest) suggestRule() string {
	if p.escalation {
		return ""
	}
	if strings.EqualFold(p.tool, permsyntax.NameBash) && p.command != "" {
		rule := permsyntax.NameBash + "(" + permsyntax.CanonicalCommand(p.command) + ")"
		if parsed, err := permsyntax.ParseRule(permsyntax.RuleAllow, rule); err == nil && parsed.String() == rule {
			return rule
		}
	}
	if p.tool != "" && !strings.ContainsAny(p.tool, " \t\n:()") {
		return p.tool
	}
	return "category:" + p.category
}

func describePermission(req protocol.InteractionRequest) permissionRequest {
	switch pr := req.Prompt.(type) {
	case protocol.ToolPermissionPrompt:
		out := permissionRequest{tool: pr.ToolName, category: pr.Category, remember: pr.RememberForTurnAllowed}
		switch rv := pr.Review.(type) {
		case protocol.CommandReview:
			out.command = rv.Command
		case protocol.PathReview:
			out.command = rv.Operation + " " + rv.Path
		case protocol.WebReview:
			out.command = rv.Target
		}
		return out
	case protocol.SandboxEscalationPrompt:
		return permissionRequest{tool: permsyntax.NameBash, category: pr.Category, command: pr.Command, escalation: true}
	case protocol.AdditionalPermissionsPrompt:
		return permissionRequest{tool: pr.ToolName, category: pr.Category}
	}
	return permissionRequest{tool: "tool"}
}
