package tools

import (
	"path/filepath"
	"strings"

	"github.com/maka-agent/maka/internal/bashcategory"
	"github.com/maka-agent/maka/internal/shellsafe"
	"github.com/maka-agent/maka/protocol"
)

// BashCategory classifies a Bash command: shell_safe when it is a
// read-only command (shellsafe.Classify), else the original host's
// classification (bashcategory.Categorize: privileged, fs_destructive,
// git_destructive or shell_unsafe), which a prompt's review must match.
func BashCategory(command string) string {
	if shellsafe.Classify(command).Safe {
		return protocol.ToolCategoryShellSafe
	}
	return bashcategory.Categorize(command)
}

// ShellUnsafeReason says in a few words why a command is not read-only, or
// "" when it is.
func ShellUnsafeReason(command string) string {
	return shellsafe.Classify(command).Reason
}

// safeUnsandboxed reports whether a read-only command stays read-only
// when nothing contains it: it names no path outside the workspace (no
// word starting with "/" or "~", none with ".."), the workspace holds none
// of the host's own files (a recursive read would reach them), it does
// not name a path a deny Read rule names, and, in
// execute mode, it is not git, which runs what a .git/config the model may
// write unasked names (core.fsmonitor, diff drivers).
func (e *Engine) safeUnsandboxed(command string) bool {
	if e.p.Mode == ModeExecute && strings.Contains(command, "git") {
		return false
	}
	root := e.root
	if root == "" {
		root = e.p.Workspace
	}
	for _, p := range e.p.Protected {
		if root == "" || within(root, p) || within(p, root) {
			return false
		}
	}
	for _, p := range e.denied {
		// A path a deny Read rule names: only the sandbox can hide it.
		if rel, err := filepath.Rel(e.p.Workspace, p); err == nil && strings.Contains(command, rel) || strings.Contains(command, p) {
			return false
		}
	}
	for _, word := range strings.Fields(command) {
		word = strings.Trim(word, `'"`)
		if strings.HasPrefix(word, "/") || strings.HasPrefix(word, "~") || strings.Contains(word, "..") ||
			strings.Contains(word, "=/") || strings.Contains(word, "=~") || strings.Contains(word, "'/") || strings.Contains(word, "\"/") {
			return false
		}
	}
	return true
}
