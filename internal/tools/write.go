package tools

import (
	"context"
	"encoding/json"
	"fmt"
)

// NameWrite is the name of the Write tool.
const NameWrite = "Write"

type writeTool struct{}

func (writeTool) Name() string { return NameWrite }

func (writeTool) Description() string {
	return "Create or overwrite a file in the workspace with the given content. " +
		"path is relative to the workspace; missing parent directories are created."
}

func (writeTool) Parameters() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"path":{"type":"string","description":"File path relative to the workspace."},` +
		`"content":{"type":"string","description":"The complete new content of the file."}},` +
		`"required":["path","content"],"additionalProperties":false}`)
}

func (writeTool) PermissionRequired() bool { return true }
func (writeTool) ActivityKind() string     { return ActivityEdit }

type writeArgs struct {
	Path    *string `json:"path"`
	Content *string `json:"content"`
}

// fileWriteContent is the content of a "file_write" result.
type fileWriteContent struct {
	Kind  string `json:"kind"`
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
}

func (writeTool) Run(ctx context.Context, env Env, raw json.RawMessage) (Result, error) {
	var a writeArgs
	if err := decodeArgs(raw, &a); err != nil {
		return invalidArgs(NameWrite, err), nil
	}
	if err := requireString("path", a.Path); err != nil {
		return invalidArgs(NameWrite, err), nil
	}
	if err := requireString("content", a.Content); err != nil {
		return invalidArgs(NameWrite, err), nil
	}
	if err := ctx.Err(); err != nil {
		return ErrorResult("Write aborted"), nil
	}
	loc, err := resolveForWrite(env, *a.Path)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Write %s: %v", *a.Path, err)), nil
	}
	unlock := lockPath(loc.real)
	defer unlock()
	if err := writeFileAtomic(loc.real, []byte(*a.Content)); err != nil {
		return ErrorResult(fmt.Sprintf("Write %s: %v", loc.rel, err)), nil
	}
	n := len(*a.Content)
	return contentResult(fileWriteContent{Kind: "file_write", Path: loc.rel, Bytes: n},
		fmt.Sprintf("Wrote %d bytes to %s", n, loc.rel), false), nil
}
