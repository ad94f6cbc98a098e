// Package failpoint lets crash tests kill the real host at a named durable
// step. A point is armed by the environment of the host process
// (MAKA_FAILPOINT=name); Hit at that point then kills the process with
// SIGKILL, exactly as a power cut or an OOM kill would end it. Unarmed,
// Hit is one comparison with an empty string.
package failpoint

import (
	"os"
	"syscall"
)

// Env names the environment variable that arms a point.
const Env = "MAKA_FAILPOINT"

// The points of a turn's durable steps, in the order a turn passes them.
const (
	// TurnAdmitted: the admission and the run start are durable; the
	// turn.start answer is not sent.
	TurnAdmitted = "turn.admitted"
	// TurnStreaming: the first text delta of the turn was published.
	TurnStreaming = "turn.streaming"
	// ToolStarted: a tool call's start is durable; the tool has not run.
	ToolStarted = "tool.started"
	// ToolFinished: a tool call's result is durable; the loop has not
	// gone on.
	ToolFinished = "tool.finished"
	// TurnTerminal: the terminal fact is durable; it is not published.
	TurnTerminal = "turn.terminal"
	// MessageAccepted: a queued message is accepted in memory; its
	// receipt is not written.
	MessageAccepted = "message.accepted"
)

var armed = os.Getenv(Env)

// Hit kills the process if name is the armed point.
func Hit(name string) {
	if armed != "" && armed == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is delivered before this returns
	}
}
