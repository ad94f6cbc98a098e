package tools

// Builtins returns the built-in tools: Read, Write, Edit, Bash, Glob, Grep
// and WebFetch.
func Builtins() []Tool {
	return []Tool{
		readTool{},
		writeTool{},
		editTool{},
		bashTool{},
		globTool{},
		grepTool{},
		webFetchTool{},
	}
}
