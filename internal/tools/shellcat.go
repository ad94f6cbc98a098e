package tools

import "github.com/maka-agent/maka/protocol"

// BashCategory classifies a Bash command: shell_safe when it is a
// read-only command (shellsafe.Classify), else the original host's
// classification (protocol.CategorizeBash: privileged, fs_destructive,
// git_destructive or shell_unsafe), which a prompt's review must match.
func BashCategory(command string) string {
	if safe, _ := classifyShell(command); safe {
		return protocol.ToolCategoryShellSafe
	}
	return protocol.CategorizeBash(command)
}

// ShellUnsafeReason says in a few words why a command is not read-only, or
// "" when it is.
func ShellUnsafeReason(command string) string {
	safe, why := classifyShell(command)
	if safe {
		return ""
	}
	return why
}

var classifyShell = func(string) (bool, string) { return false, "" }
