package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/internal/permsyntax"
)

// NameEdit is the name of the Edit tool.
const NameEdit = permsyntax.NameEdit

// Edit limits.
const (
	// EditMaxFileBytes is the largest file Edit changes.
	EditMaxFileBytes = 10 << 20
	// editMaxDiffBytes bounds the diff carried by an Edit result.
	editMaxDiffBytes = 64 << 10
)

type editTool struct{}

func (editTool) Name() string { return NameEdit }

func (editTool) Description() string {
	return "Replace one occurrence of old_string with new_string in a workspace file. " +
		"old_string must match exactly once; if it does not match exactly, a match ignoring " +
		"indentation, whitespace differences or over-escaping is used when it is unique. " +
		"Include enough surrounding context to make old_string unique."
}

func (editTool) Parameters() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"path":{"type":"string","description":"File path relative to the workspace."},` +
		`"old_string":{"type":"string","description":"The text to replace; must occur exactly once."},` +
		`"new_string":{"type":"string","description":"The replacement text."}},` +
		`"required":["path","old_string","new_string"],"additionalProperties":false}`)
}

func (editTool) PermissionRequired() bool { return true }
func (editTool) ActivityKind() string     { return ActivityEdit }

type editArgs struct {
	Path      *string `json:"path"`
	OldString *string `json:"old_string"`
	NewString *string `json:"new_string"`
}

// fileDiffContent is the content of an Edit result. StartLine and EndLine
// are the 1-based lines of the original file the match covered.
type fileDiffContent struct {
	Kind         string   `json:"kind"`
	Paths        []string `json:"paths"`
	Diff         string   `json:"diff"`
	Replacements int      `json:"replacements"`
	MatchedVia   string   `json:"matchedVia"`
	StartLine    int      `json:"startLine"`
	EndLine      int      `json:"endLine"`
}

func (editTool) Run(ctx context.Context, env Env, raw json.RawMessage) (Result, error) {
	var a editArgs
	if err := decodeArgs(raw, &a); err != nil {
		return invalidArgs(NameEdit, err), nil
	}
	for _, req := range []struct {
		name string
		v    *string
	}{{"path", a.Path}, {"old_string", a.OldString}, {"new_string", a.NewString}} {
		if err := requireString(req.name, req.v); err != nil {
			return invalidArgs(NameEdit, err), nil
		}
	}
	oldStr, newStr := *a.OldString, *a.NewString
	if oldStr == "" {
		return invalidArgs(NameEdit, errors.New("old_string must not be empty (use Write to create a file)")), nil
	}
	if oldStr == newStr {
		return invalidArgs(NameEdit, errors.New("old_string and new_string are identical; nothing to change")), nil
	}
	if err := ctx.Err(); err != nil {
		return ErrorResult("Edit aborted"), nil
	}
	root, err := openRoot(env)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Edit %s: %v", *a.Path, err)), nil
	}
	defer root.close()
	rel, err := root.rel(*a.Path)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Edit %s: %v", *a.Path, err)), nil
	}
	name := filepath.ToSlash(rel)
	dirfd, base, real, err := root.editPlace(rel)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Edit %s: %v", *a.Path, err)), nil
	}
	defer unix.Close(dirfd)
	unlock := lockPath(real)
	defer unlock()
	data, tooLarge, err := root.readAt(ctx, dirfd, base, EditMaxFileBytes)
	switch {
	case ctx.Err() != nil:
		return ErrorResult("Edit aborted"), nil
	case err != nil:
		return ErrorResult(fmt.Sprintf("Edit %s: %v", name, err)), nil
	case tooLarge:
		return ErrorResult(fmt.Sprintf("Edit %s: file is too large to edit (limit %d bytes)", name, EditMaxFileBytes)), nil
	}
	if isBinary(data) {
		return ErrorResult(fmt.Sprintf("Edit %s: binary file", name)), nil
	}
	content := string(data)
	m := findEdit(content, oldStr, newStr)
	switch {
	case m.via == "":
		return ErrorResult(fmt.Sprintf("Edit %s: old_string not found (tried exact, line-trimmed, whitespace and escape matching); "+
			"Read the file and copy the text exactly", name)), nil
	case len(m.spans) > 1:
		return ErrorResult(fmt.Sprintf("Edit %s: old_string is not unique: it matches %d times (%s match); "+
			"include more surrounding context", name, len(m.spans), m.via)), nil
	}
	sp := m.spans[0]
	updated := content[:sp.start] + m.replacement + content[sp.end:]
	if updated == content {
		return ErrorResult(fmt.Sprintf("Edit %s: the replacement leaves the file unchanged", name)), nil
	}
	if err := writeAt(dirfd, base, []byte(updated)); err != nil {
		return ErrorResult(fmt.Sprintf("Edit %s: %v", name, err)), nil
	}
	startLine := 1 + strings.Count(content[:sp.start], "\n")
	endLine := startLine
	if sp.end > sp.start {
		endLine = 1 + strings.Count(content[:sp.end-1], "\n")
	}
	diff := lineDiff(name, content, updated, startLine-1)
	c := fileDiffContent{
		Kind: "file_diff", Paths: []string{name}, Diff: diff, Replacements: 1,
		MatchedVia: m.via, StartLine: startLine, EndLine: endLine,
	}
	text := fmt.Sprintf("Edited %s: replaced lines %d-%d (matched via %s)\n%s", name, startLine, endLine, m.via, diff)
	return contentResult(c, text, false), nil
}

// editPlace resolves rel (workspace-relative), an existing regular file,
// beneath the workspace, and returns the directory that holds it (opened
// to write into), its name there and its path.
func (r *wsRoot) editPlace(rel string) (dirfd int, base, p string, err error) {
	fd, st, err := pathAt(r.fd, rel, 0)
	if err != nil {
		return -1, "", "", r.lookupError(rel, err)
	}
	defer unix.Close(fd)
	if _, err := r.check(fd, &st); err != nil {
		return -1, "", "", err
	}
	if err := checkRegular(fileMode(&st)); err != nil {
		return -1, "", "", err
	}
	return r.placeOf(fd, &st)
}

// readAt reads the regular file base in the directory dirfd, at most max
// bytes: a larger file fails with tooLarge set.
func (r *wsRoot) readAt(ctx context.Context, dirfd int, base string, max int64) (data []byte, tooLarge bool, err error) {
	f, st, err := r.openAt(dirfd, base, base, unix.RESOLVE_NO_SYMLINKS, false)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOENT) {
			err = errChanged
		}
		return nil, false, err
	}
	defer f.Close()
	if err := checkRegular(fileMode(&st)); err != nil {
		return nil, false, err
	}
	return readAllMax(ctx, f, st.Size, max)
}

// lineDiff renders the single contiguous change between before and after
// as a unified diff hunk without context lines. Lines before firstLine
// (0-based) are known to be equal.
func lineDiff(path, before, after string, firstLine int) string {
	a := strings.Split(before, "\n")
	b := strings.Split(after, "\n")
	lo := min(firstLine, len(a), len(b))
	for lo < len(a) && lo < len(b) && a[lo] == b[lo] {
		lo++
	}
	ha, hb := len(a), len(b)
	for ha > lo && hb > lo && a[ha-1] == b[hb-1] {
		ha--
		hb--
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- a/%s\n+++ b/%s\n", path, path)
	fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(lo, ha-lo), hunkRange(lo, hb-lo))
	for _, l := range a[lo:ha] {
		sb.WriteString("-" + l + "\n")
	}
	for _, l := range b[lo:hb] {
		sb.WriteString("+" + l + "\n")
	}
	out := sb.String()
	if len(out) > editMaxDiffBytes {
		out = truncateBytes(out, editMaxDiffBytes) + "\n[diff truncated]\n"
	}
	return out
}

// hunkRange formats the start,count of a unified diff hunk side.
func hunkRange(start, count int) string {
	if count == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	return fmt.Sprintf("%d,%d", start+1, count)
}
