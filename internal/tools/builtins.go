package tools

import "os/exec"

// Builtins returns the built-in tools: Read, Write, Edit, Bash, Glob and
// Grep. Grep uses ripgrep when "rg" is on PATH at call time.
func Builtins() []Tool {
	return []Tool{
		readTool{},
		writeTool{},
		editTool{},
		bashTool{},
		globTool{},
		grepTool{lookRG: func() (string, error) { return exec.LookPath("rg") }},
	}
}
