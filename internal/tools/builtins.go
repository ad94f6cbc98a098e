package tools

// Builtins returns the built-in tools: Read, Write, Edit, Bash, Glob and
// Grep.
func Builtins() []Tool {
	return []Tool{
		readTool{},
		writeTool{},
		editTool{},
		bashTool{},
		globTool{},
		grepTool{},
	}
}
