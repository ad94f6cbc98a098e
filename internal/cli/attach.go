package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/exitcode"
	"github.com/maka-agent/maka/protocol"
)

type attachOptions struct {
	host          hostFlags
	json          bool
	exitAfterTurn bool
	noInput       bool
}

func newAttachCommand() *cobra.Command {
	var o attachOptions
	cmd := &cobra.Command{
		Use:   "attach SESSION",
		Short: "Follow a session live and answer its approval prompts",
		Long: `Follow a session live: the assistant's text goes to stdout as it arrives,
tool activity to stderr, as 'maka run' prints them; a running turn is shown
from its beginning. When stdin is a terminal,
the permission prompts and questions of the session are asked there:
y (allow once), n (deny), a (allow for the rest of the turn). Pending prompts
are asked right away. Any number of clients may follow a session at once;
the first answer wins.

Ctrl-C detaches (exit 0) and leaves the session running.`,
		Example: `  maka attach 3f2a…
  maka attach 3f2a… --exit-after-turn     # wait for the running turn; its exit status
  maka attach 3f2a… --json --no-input     # events as JSON lines, never prompt`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSessionIDs(&o.host),
		RunE:              func(cmd *cobra.Command, args []string) error { return attach(cmd, o, args[0]) },
	}
	f := cmd.Flags()
	o.host.register(f)
	f.BoolVar(&o.json, "json", false, "write one JSON object per line, as 'maka run --json'")
	f.BoolVar(&o.exitAfterTurn, "exit-after-turn", false, "exit when the running (or next) turn ends: 0 completed, 1 otherwise")
	f.BoolVar(&o.noInput, "no-input", false, "never prompt, even on a terminal")
	return cmd
}

func attach(cmd *cobra.Command, o attachOptions, sessionID string) error {
	if err := sessionIDArg(sessionID); err != nil {
		return err
	}
	ctx, stop := interruptible(cmd.Context())
	defer stop()
	conn, err := o.host.connect(ctx, protocol.SurfaceTUI)
	if err != nil {
		return detachedOr(ctx, err)
	}
	defer conn.Close()
	sum, err := getSession(ctx, conn, sessionID)
	if err != nil {
		return detachedOr(ctx, missingSessionExits1(err))
	}
	sessionID = sum.SessionID
	p := newPrinter(cmd.OutOrStdout(), cmd.ErrOrStderr(), o.json)
	p.output = toolOutputs(ctx, conn, sessionID)
	a := &attachment{conn: conn, p: p, sessionID: sessionID, exitAfterTurn: o.exitAfterTurn, rootHint: o.host.rootHint(),
		turns: map[string]protocol.TurnStatus{}}
	if in, ok := cmd.InOrStdin().(*os.File); ok && !o.noInput && isTerminal(in) {
		lr := startLineReader(in)
		defer lr.stop()
		a.prompts = &prompter{w: cmd.ErrOrStderr(), lines: lr.lines}
	}
	name := ""
	if sum.Name != "" {
		name = " (" + oneLine(sum.Name, 60) + ")"
	}
	a.header = fmt.Sprintf("attached to session %s%s in %s; Ctrl-C detaches", sum.SessionID, name, sum.Workspace.Path)
	code, err := a.run(ctx)
	p.endText()
	if err != nil {
		if err = detachedOr(ctx, err); err == nil {
			p.notef("detached from session %s; it goes on in the runtime host", sessionID)
		}
		return err
	}
	if code != 0 {
		return &exitcode.Error{Code: code, Err: errors.New("")}
	}
	return nil
}

// detachedOr treats an interrupt as a normal detach.
func detachedOr(ctx context.Context, err error) error {
	var sc *signalCause
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &sc) {
		return nil
	}
	return err
}

// attachment follows one session for `maka attach`.
type attachment struct {
	conn          *client.Conn
	p             *printer
	sessionID     string
	exitAfterTurn bool
	rootHint      string
	prompts       *prompter // nil: not interactive
	// header is printed once the session is followed.
	header string
	// send, if set, answers interactions instead of the connection.
	send func(ctx context.Context, id string, ans protocol.InteractionAnswer) error

	// turns holds the last status printed per root turn (bounded: only
	// the current root turn is kept).
	turns map[string]protocol.TurnStatus
	// waitTurn is the turn --exit-after-turn waits for, once known.
	waitTurn string
	// started is set by the first snapshot; baseline is its root turn when
	// that had already ended (never reported).
	started  bool
	baseline string
	// noticed holds the pending interactions already reported (the
	// non-interactive notice), bounded by the pending list.
	noticed map[string]bool
	// seen is what was printed of the current root turn, so that the
	// replay of a reopened subscription is not printed twice.
	seen seenTurn
}

// pushed is a frame or the error ending a subscription.
type pushed struct {
	frame any
	err   error
}

// pump forwards a subscription's frames until it ends or ctx is done.
func pump(ctx context.Context, sub *client.Subscription, out chan<- pushed, done chan<- struct{}) {
	defer close(done)
	for {
		f, err := sub.Next(ctx)
		select {
		case out <- pushed{f, err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// run follows the session until ctx ends (detach), the followed turn ends
// (--exit-after-turn) or the session goes away.
func (a *attachment) run(ctx context.Context) (int, error) {
	sub, err := a.conn.OpenSubscription(ctx, a.sessionID, client.WithNotices())
	if err != nil {
		return 0, callError(ctx, "cannot follow session "+a.sessionID, err)
	}
	a.p.notef("%s", a.header)
	a.p.emit(event{Type: "attached", SessionID: a.sessionID, Status: string(sub.Open.Snapshot.Session.Status)})
	reopened := 0
	var lines <-chan string
	if a.prompts != nil {
		lines = a.prompts.lines
	}
	for {
		if code, done := a.projection(ctx, sub.Open.Snapshot); done {
			a.closeSub(sub)
			return code, nil
		}
		frames := make(chan pushed)
		pctx, cancelPump := context.WithCancel(ctx)
		pumpDone := make(chan struct{})
		go pump(pctx, sub, frames, pumpDone)
		code, done, err := a.loop(ctx, frames, &lines)
		cancelPump()
		<-pumpDone
		a.closeSub(sub)
		if done {
			return code, err
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		var se *client.SubscriptionError
		if (errors.As(err, &se) || errors.Is(err, io.EOF)) && a.conn.Err() == nil && reopened < maxResubscribe {
			reopened++
			a.p.notef("maka: live output interrupted (%v); resuming", err)
			if sub, err = a.conn.OpenSubscription(ctx, a.sessionID, client.WithNotices()); err == nil {
				a.seen.resumed()
				continue
			}
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, exitf(1, "lost session %s: %v", a.sessionID, err)
	}
}

func (a *attachment) closeSub(sub *client.Subscription) {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	_ = sub.Close(ctx)
}

// loop handles frames and typed lines; it returns when the attachment is
// done (code, true) or the subscription ended (err).
func (a *attachment) loop(ctx context.Context, frames <-chan pushed, lines *<-chan string) (int, bool, error) {
	for {
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case line, ok := <-*lines:
			if !ok {
				*lines = nil // stdin closed: no more prompts
				a.prompts.closed = true
				continue
			}
			a.prompts.input(ctx, a, line)
		case pf := <-frames:
			if pf.err != nil {
				return 0, false, pf.err
			}
			switch fr := pf.frame.(type) {
			case protocol.NoticeFrame:
				// Retries, failures and compactions, as maka run shows them.
				a.p.notice(fr.Notice)
			case protocol.DeltaFrame:
				if fr.Delta.Text = a.seen.delta(fr.Delta); fr.Delta.Text != "" {
					a.p.delta(fr.Delta)
				}
			case protocol.EventFrame:
				if !a.seen.tool(fr.Event) {
					continue
				}
				// A tool line printed under a shown prompt (the replay of
				// the turn's start after a pending approval, or a sibling
				// call) ends the prompt's line; the prompt is shown again.
				reprompt := a.prompts != nil && a.prompts.asked != "" && a.p.enc == nil &&
					(fr.Event.Type == protocol.ToolStart || fr.Event.Type == protocol.ToolResult)
				if reprompt {
					fmt.Fprintln(a.prompts.w)
				}
				a.p.tool(fr.Event)
				if reprompt {
					a.prompts.again(a)
				}
			case protocol.ProjectionFrame:
				if code, done := a.projection(ctx, fr.Snapshot); done {
					return code, true, nil
				}
			case protocol.ClosedFrame:
				if fr.Reason == protocol.CloseSessionRemoved {
					a.p.endText()
					return 1, true, exitf(1, "session %s was removed", a.sessionID)
				}
			}
		}
	}
}

// projection reports turn changes and pending interactions; done reports
// that --exit-after-turn is satisfied, with the exit code.
func (a *attachment) projection(ctx context.Context, snap protocol.SessionContinuitySnapshot) (int, bool) {
	// Turn changes are reported before prompts, which then stay last.
	code, done := a.turn(ctx, snap.RootTurn)
	if !done {
		a.interactions(ctx, snap.Interactions.Pending)
	}
	return code, done
}

// turn reports a change of the root turn; done reports that
// --exit-after-turn is satisfied, with the exit code.
func (a *attachment) turn(ctx context.Context, rt *protocol.TurnSnapshot) (int, bool) {
	if !a.started {
		// The turn of the first snapshot is reported only if it runs.
		a.started = true
		if rt != nil && rt.Status.Terminal() {
			a.baseline = rt.TurnID
			a.turns[rt.TurnID] = rt.Status
		}
	}
	if rt == nil {
		return 0, false
	}
	prev, known := a.turns[rt.TurnID]
	if known && prev == rt.Status {
		return 0, false
	}
	clear(a.turns)
	a.turns[rt.TurnID] = rt.Status
	if !rt.Status.Terminal() {
		if !known {
			a.p.endText()
			a.p.notef("── turn %s %s", rt.TurnID, rt.Status)
			a.p.emit(event{Type: "turn_started", SessionID: a.sessionID, TurnID: rt.TurnID, RunID: rt.RunID, Status: string(rt.Status)})
		}
		if a.waitTurn == "" {
			a.waitTurn = rt.TurnID
		}
		return 0, false
	}
	if rt.TurnID == a.baseline {
		return 0, false
	}
	a.p.endText()
	code := 0
	msg := ""
	switch rt.Status {
	case protocol.TurnFailed:
		code, msg = 1, explainFailure(ctx, a.conn, *rt, a.rootHint)
	case protocol.TurnCancelled:
		code, msg = 1, "("+rt.AbortSource+")"
	}
	line := strings.TrimSpace(string(rt.Status) + " " + msg)
	if u := a.p.usageLine(rt.TurnID, ""); u != "" {
		line += " · " + u
	}
	a.p.notef("── turn %s %s", rt.TurnID, line)
	a.p.result(event{Type: "result", SessionID: a.sessionID, TurnID: rt.TurnID, RunID: rt.RunID, Status: string(rt.Status),
		FailureClass: rt.FailureClass, AbortSource: rt.AbortSource, Message: msg, ExitCode: &code})
	if a.exitAfterTurn && (a.waitTurn == "" || a.waitTurn == rt.TurnID) {
		return code, true
	}
	return 0, false
}

// interactions prompts for (or reports) pending interactions.
func (a *attachment) interactions(ctx context.Context, pending []protocol.InteractionSnapshot) {
	for _, in := range pending {
		if in.Request.Kind == protocol.InteractionKindPermission {
			a.p.knowTool(in.Request.ToolUseID, describePermission(in.Request).tool)
		}
	}
	if a.prompts != nil && !a.prompts.closed {
		a.prompts.update(ctx, a, pending)
		return
	}
	still := map[string]bool{}
	for _, in := range pending {
		if in.Status != protocol.InteractionStatusPending {
			continue
		}
		still[in.InteractionID] = true
		if a.noticed[in.InteractionID] {
			continue
		}
		ev := event{Type: "interaction", SessionID: a.sessionID, TurnID: in.TurnID, InteractionID: in.InteractionID,
			Kind: in.Request.Kind, Status: in.Status}
		what := "an answer to a question"
		if in.Request.Kind == protocol.InteractionKindPermission {
			pr := describePermission(in.Request)
			what = "approval of " + pr.String()
			ev.ToolName, ev.Category, ev.Command = pr.tool, pr.category, pr.command
		}
		a.p.notef("… turn %s waits for %s (answer it with 'maka attach %s' in a terminal)", in.TurnID, what, a.sessionID)
		a.p.emit(ev)
	}
	a.noticed = still
}

func (a *attachment) answer(ctx context.Context, id string, ans protocol.InteractionAnswer) {
	var err error
	if a.send != nil {
		err = a.send(ctx, id, ans)
	} else {
		_, err = a.conn.AnswerInteraction(ctx, protocol.InteractionAnswerInput{InteractionID: id, Answer: ans})
	}
	switch {
	case client.IsCode(err, protocol.ErrAlreadyResolved):
		a.p.notef("  (already answered elsewhere)")
	case err != nil && ctx.Err() == nil:
		a.p.notef("maka: could not answer: %v", err)
	}
}

// ---------------------------------------------------------------------------
// Terminal prompts

// prompter asks the session's pending interactions on the terminal, one
// at a time, in the order they became pending.
type prompter struct {
	w      io.Writer
	lines  <-chan string
	closed bool // stdin ended

	queue   []protocol.InteractionSnapshot // pending, not yet answered; queue[0] is asked
	asked   string                         // id of the interaction whose prompt is shown
	answers []*string                      // answers given so far to queue[0]'s questions
}

// update syncs the queue with the pending list and shows the next prompt.
func (pr *prompter) update(ctx context.Context, a *attachment, pending []protocol.InteractionSnapshot) {
	ids := map[string]bool{}
	for _, in := range pending {
		if in.Status == protocol.InteractionStatusPending {
			ids[in.InteractionID] = true
		}
	}
	kept := pr.queue[:0]
	for _, in := range pr.queue {
		if ids[in.InteractionID] {
			kept = append(kept, in)
			delete(ids, in.InteractionID)
		} else if in.InteractionID == pr.asked {
			fmt.Fprintln(pr.w, "\n  (answered elsewhere)")
			pr.asked, pr.answers = "", nil
		}
	}
	pr.queue = kept
	for _, in := range pending {
		if ids[in.InteractionID] {
			pr.queue = append(pr.queue, in)
			delete(ids, in.InteractionID)
		}
	}
	pr.show(a)
}

// show prints the prompt of queue[0] unless it is already shown.
func (pr *prompter) show(a *attachment) {
	if len(pr.queue) == 0 {
		return
	}
	in := pr.queue[0]
	if pr.asked == in.InteractionID {
		return
	}
	pr.asked, pr.answers = in.InteractionID, nil
	a.p.endText()
	pr.prompt(in)
}

func (pr *prompter) prompt(in protocol.InteractionSnapshot) {
	if in.Request.Kind == protocol.InteractionKindPermission {
		req := describePermission(in.Request)
		opts := "[y]es / [n]o"
		if req.remember {
			opts += " / [a]lways this turn"
		}
		fmt.Fprintf(pr.w, "? Allow %s  %s: ", req, opts)
		return
	}
	q := in.Request.Questions[len(pr.answers)]
	fmt.Fprintf(pr.w, "? %s\n", q.Question)
	for i, o := range q.Options {
		line := fmt.Sprintf("  %d. %s", i+1, o.Label)
		if o.Description != "" {
			line += " — " + o.Description
		}
		fmt.Fprintln(pr.w, line)
	}
	fmt.Fprint(pr.w, "  number, your own answer, or empty to decline: ")
}

// input handles a typed line.
func (pr *prompter) input(ctx context.Context, a *attachment, line string) {
	if len(pr.queue) == 0 || pr.asked != pr.queue[0].InteractionID {
		return
	}
	in := pr.queue[0]
	line = strings.TrimSpace(line)
	if in.Request.Kind == protocol.InteractionKindPermission {
		ans := protocol.InteractionAnswer{Kind: protocol.InteractionKindPermission}
		switch strings.ToLower(line) {
		case "y", "yes":
			ans.Decision = protocol.InteractionDecisionAllow
		case "n", "no":
			ans.Decision = protocol.InteractionDecisionDeny
		case "a", "always":
			ans.Decision = protocol.InteractionDecisionAllow
			ans.RememberForTurn = describePermission(in.Request).remember
		default:
			pr.asked = ""
			pr.show(a)
			return
		}
		pr.done()
		a.answer(ctx, in.InteractionID, ans)
		pr.show(a)
		return
	}
	q := in.Request.Questions[len(pr.answers)]
	var ans *string
	if line != "" {
		text := line
		if n, err := strconv.Atoi(line); err == nil && n >= 1 && n <= len(q.Options) {
			text = q.Options[n-1].Label
		}
		if len(text) > protocol.InteractionAnswerTextMaxBytes {
			text = text[:protocol.InteractionAnswerTextMaxBytes]
		}
		ans = &text
	}
	pr.answers = append(pr.answers, ans)
	if len(pr.answers) < len(in.Request.Questions) {
		pr.prompt(in)
		return
	}
	answers := pr.answers
	pr.done()
	a.answer(ctx, in.InteractionID, protocol.InteractionAnswer{Kind: protocol.InteractionKindQuestion, Answers: answers})
	pr.show(a)
}

// again shows the prompt being asked once more, after other output.
func (pr *prompter) again(a *attachment) {
	if len(pr.queue) == 0 || pr.asked != pr.queue[0].InteractionID {
		return
	}
	a.p.endText()
	pr.prompt(pr.queue[0])
}

// done drops queue[0] once answered.
func (pr *prompter) done() {
	pr.queue = pr.queue[1:]
	pr.asked, pr.answers = "", nil
}

// lineReader delivers the lines typed on a terminal until it is stopped
// or stdin ends. Its goroutine polls the descriptor so that stop ends it
// without waiting for input.
type lineReader struct {
	lines  chan string
	done   chan struct{}
	exited chan struct{}
}

// maxLineBytes bounds a typed line; longer input is dropped.
const maxLineBytes = 16 << 10

func startLineReader(f *os.File) *lineReader {
	lr := &lineReader{lines: make(chan string), done: make(chan struct{}), exited: make(chan struct{})}
	fd := int(f.Fd())
	go func() {
		defer close(lr.exited)
		defer close(lr.lines)
		var buf []byte
		tmp := make([]byte, 512)
		for {
			select {
			case <-lr.done:
				return
			default:
			}
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, 200)
			if errors.Is(err, unix.EINTR) || (err == nil && n == 0) {
				continue
			}
			if err != nil {
				return
			}
			k, err := unix.Read(fd, tmp)
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			if err != nil || k <= 0 {
				return
			}
			buf = append(buf, tmp[:k]...)
			for {
				i := bytes.IndexByte(buf, '\n')
				if i < 0 {
					break
				}
				line := string(buf[:i])
				buf = buf[i+1:]
				select {
				case lr.lines <- line:
				case <-lr.done:
					return
				}
			}
			if len(buf) > maxLineBytes {
				buf = buf[:0]
			}
		}
	}()
	return lr
}

func (lr *lineReader) stop() {
	close(lr.done)
	<-lr.exited
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// readHidden prints prompt to w and reads one line from the terminal f
// without echoing it.
func readHidden(f *os.File, w io.Writer, prompt string) (string, error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return "", err
	}
	quiet := *old
	quiet.Lflag &^= unix.ECHO
	quiet.Lflag |= unix.ICANON | unix.ISIG
	fmt.Fprint(w, prompt)
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &quiet); err != nil {
		return "", err
	}
	defer func() {
		_ = unix.IoctlSetTermios(fd, unix.TCSETS, old)
		fmt.Fprintln(w)
	}()
	var line []byte
	b := make([]byte, 1)
	for len(line) <= protocol.CredentialSecretMaxBytes {
		n, err := f.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return "", err
		}
	}
	return strings.TrimRight(string(line), "\r"), nil
}
