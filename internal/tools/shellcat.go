package tools

import (
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

// configDriven reports whether a read-only command runs a program that
// executes what its configuration files name (git: core.fsmonitor, diff
// drivers, filters). Where file writes need no approval and nothing
// sandboxes the command, a model could write that configuration and then
// run it as a "read-only" command, so such a command is not shell_safe
// there (see Engine.Evaluate).
func configDriven(command string) bool {
	return strings.Contains(command, "git")
}
