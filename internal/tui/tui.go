// Package tui is the terminal user interface of maka: a full-screen
// conversation view over one Runtime Host connection. It lists and switches
// sessions, shows a session's transcript with live streaming (assistant
// text, thinking, tool cards), sends messages (a new turn when idle;
// steering or follow-up while a turn runs), answers permission and question
// prompts, and stops turns.
//
// The program state and its transitions (the model and its Update) are kept
// apart from rendering (View); Run wires the model to a bubbletea program
// and a Backend.
package tui

import (
	"context"
	"errors"
	"io"
	"os"

	tea "github.com/charmbracelet/bubbletea"
	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/client"
)

// Options configure Run.
type Options struct {
	// Conn is an accepted host connection; it stays open after Run.
	Conn *client.Conn
	// Backend, when set, is used instead of Conn.
	Backend Backend
	// RootPath is the storage root, shown in the session list.
	RootPath string
	// Workspace is the host directory of sessions this UI creates.
	Workspace string
	// ResumeSessionID, when set, opens that session at start; otherwise a
	// new session is created with the first message.
	ResumeSessionID string
	// PermissionMode of the sessions this UI creates ("": the host's
	// default): explore, ask, execute or bypass.
	PermissionMode string
	// In is the keyboard input (nil: the terminal).
	In io.Reader
	// Out is where the interface is drawn (nil: standard output).
	Out io.Writer
	// Width and Height, when both set, are the initial size (for outputs
	// that are not terminals; a terminal reports its own size).
	Width, Height int
	// MarkdownStyle is the glamour standard style of assistant messages
	// ("": dark). Colours are dropped when Out is not a colour terminal.
	MarkdownStyle string
	// Inline draws in the normal screen instead of the alternate screen.
	Inline bool
	// LocalServers, when set with AddLocalServer, looks for local model
	// servers; when the catalog has no connection the first one found is
	// offered as a choice, and AddLocalServer adds it (as 'maka
	// connection add' would, the model becoming the default) on accept.
	LocalServers   func(ctx context.Context) []LocalServer
	AddLocalServer func(ctx context.Context, s LocalServer, model string) error

	// observe, when set, sees the state after every update (tests).
	observe func(state)
}

// restoreTerminal leaves the alternate screen and bracketed paste and shows
// the cursor.
const restoreTerminal = "\x1b[?2004l\x1b[?1049l\x1b[?25h"

// ErrNoBackend is returned by Run when Options has neither Conn nor Backend.
var ErrNoBackend = errors.New("tui: no host connection")

// ErrNotATerminal is returned by Run when its input is a file that is not
// a terminal: nothing is drawn.
var ErrNotATerminal = errors.New("the terminal UI needs a terminal, and its input is not one")

// checkInput refuses input that is a file but not a terminal (keys cannot
// be read from it); other readers are taken as they are.
func checkInput(in io.Reader) error {
	if in == nil {
		in = os.Stdin
	}
	if f, ok := in.(*os.File); ok {
		if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
			return ErrNotATerminal
		}
	}
	return nil
}

// Run runs the terminal interface until the user quits, ctx ends or the
// host connection is lost (then the connection's error is returned). Every
// background call it started has ended when it returns; the connection is
// left open.
func Run(ctx context.Context, opts Options) error {
	be := opts.Backend
	if be == nil {
		if opts.Conn == nil {
			return ErrNoBackend
		}
		be = ConnBackend(opts.Conn)
	}
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if err := checkInput(opts.In); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	tr := &tracker{}
	m := newModel(runCtx, be, opts, tr)

	popts := []tea.ProgramOption{tea.WithContext(runCtx), tea.WithOutput(opts.Out)}
	if opts.In != nil {
		popts = append(popts, tea.WithInput(opts.In))
	}
	if !opts.Inline {
		popts = append(popts, tea.WithAltScreen())
	}
	_, err := tea.NewProgram(m, popts...).Run()
	if err != nil {
		// A program that failed (to start, or on the way) may have left
		// the terminal in the alternate screen with the cursor hidden.
		_, _ = io.WriteString(opts.Out, restoreTerminal)
	}

	// The program has stopped: end every call it left running, then close
	// the subscriptions.
	cancel()
	tr.closeAndWait()
	m.closeAllStreams()

	switch {
	case m.fatal != nil:
		return m.fatal
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return err
}
