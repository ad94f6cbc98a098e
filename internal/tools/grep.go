package tools

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/internal/permsyntax"
)

// NameGrep is the name of the Grep tool.
const NameGrep = permsyntax.NameGrep

// Grep limits.
const (
	// GrepMaxLines bounds the match lines of a Grep result.
	GrepMaxLines = 200
	// GrepMaxPerFile bounds the matches reported per file.
	GrepMaxPerFile = 50
	// grepMaxLineChars is where a matched line's text is cut.
	grepMaxLineChars = 2000
	// grepMaxScanLine is how much of a line the search inspects.
	grepMaxScanLine = 1 << 20
)

// grepTool searches file contents with Go regular expressions, walking
// the workspace by descriptors beneath it (see grepSearch).
type grepTool struct{}

func (grepTool) Name() string { return NameGrep }

func (grepTool) Description() string {
	return "Search file contents in the workspace with a regular expression. path (file or " +
		"directory, relative to the workspace, default the workspace) limits the search; glob " +
		"filters file names (e.g. \"*.go\"). Returns up to 200 lines \"file:line:text\", at most " +
		"50 per file; .git and binary files are skipped."
}

func (grepTool) Parameters() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"pattern":{"type":"string","description":"Regular expression to search for."},` +
		`"path":{"type":"string","description":"File or directory to search, relative to the workspace (default: the workspace)."},` +
		`"glob":{"type":"string","description":"Only search files matching this glob, e.g. \"*.go\"; a leading ! excludes."}},` +
		`"required":["pattern"],"additionalProperties":false}`)
}

func (grepTool) PermissionRequired() bool { return false }
func (grepTool) ActivityKind() string     { return ActivitySearch }

type grepArgs struct {
	Pattern *string `json:"pattern"`
	Path    *string `json:"path"`
	Glob    *string `json:"glob"`
}

// grepValue is the value of a Grep result.
type grepValue struct {
	Matches   []string `json:"matches"`
	Truncated bool     `json:"truncated,omitempty"`
}

// errEnoughMatches stops a walk that collected GrepMaxLines lines.
var errEnoughMatches = errors.New("enough matches")

func (t grepTool) Run(ctx context.Context, env Env, raw json.RawMessage) (Result, error) {
	var a grepArgs
	if err := decodeArgs(raw, &a); err != nil {
		return invalidArgs(NameGrep, err), nil
	}
	if err := requireString("pattern", a.Pattern); err != nil {
		return invalidArgs(NameGrep, err), nil
	}
	if *a.Pattern == "" {
		return invalidArgs(NameGrep, errors.New("pattern must not be empty")), nil
	}
	where := "."
	if a.Path != nil && *a.Path != "" {
		where = *a.Path
	}
	glob := ""
	if a.Glob != nil {
		glob = *a.Glob
	}
	root, err := openRoot(env)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Grep: path %s: %v", where, err)), nil
	}
	defer root.close()
	rel, err := root.rel(where)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Grep: path %s: %v", where, err)), nil
	}
	// A single file must be a regular one: the search would block on a
	// named pipe given as the path.
	f, st, err := root.open(rel)
	if err != nil {
		var notRegular *notRegularError
		if errors.As(err, &notRegular) {
			return ErrorResult(fmt.Sprintf("Grep: path %s: %v", filepath.ToSlash(rel), err)), nil
		}
		return ErrorResult(fmt.Sprintf("Grep: path %s: %v", where, err)), nil
	}
	defer f.Close()
	v, err := grepSearch(ctx, root, f, &st, filepath.ToSlash(rel), *a.Pattern, glob)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Grep: %v", err)), nil
	}
	if v.Matches == nil {
		v.Matches = []string{}
	}
	r := JSONResult(v)
	if len(v.Matches) == 0 {
		r.ModelText = "No matches found"
	} else {
		r.ModelText = strings.Join(v.Matches, "\n")
		if v.Truncated {
			r.ModelText += fmt.Sprintf("\n[results truncated to %d lines; narrow the pattern, path or glob]", len(v.Matches))
		}
	}
	return r, nil
}

// cutLine bounds the text of one output line.
func cutLine(s string) string {
	if cs := truncateChars(s, grepMaxLineChars); len(cs) < len(s) {
		return cs + " [line truncated]"
	}
	return s
}

// grepFilter decides which files of a directory walk are searched, like
// ripgrep's --glob: a pattern without '/' matches the base name, one with
// '/' the path relative to the search directory; a leading '!' excludes.
type grepFilter struct {
	pat      *globPattern
	negate   bool
	baseName bool
}

func newGrepFilter(glob string) (*grepFilter, error) {
	if glob == "" {
		return nil, nil
	}
	f := &grepFilter{}
	if rest, ok := strings.CutPrefix(glob, "!"); ok {
		f.negate, glob = true, rest
	}
	glob = strings.TrimPrefix(glob, "/")
	f.baseName = !strings.Contains(glob, "/")
	pat, err := compileGlob(glob)
	if err != nil {
		return nil, fmt.Errorf("glob: %v", err)
	}
	f.pat = pat
	return f, nil
}

func (f *grepFilter) accept(rel string) bool {
	if f == nil {
		return true
	}
	subject := rel
	if f.baseName {
		subject = path.Base(rel)
	}
	return f.pat.Match(subject) != f.negate
}

// grepSearch searches f, the file or directory rel (workspace-relative;
// st is its status), with Go regular expressions: a file, or a directory
// walked in lexical order by descriptors without following symlinks,
// skipping .git, the host's paths, what Env.DenyRead names and binary
// files.
func grepSearch(ctx context.Context, root *wsRoot, f *os.File, st *unix.Stat_t, rel, pattern, glob string) (grepValue, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return grepValue{}, fmt.Errorf("invalid regular expression: %v", err)
	}
	filter, err := newGrepFilter(glob)
	if err != nil {
		return grepValue{}, err
	}
	var v grepValue
	if !fileMode(st).IsDir() {
		if !root.denied(rel) {
			err = grepFile(ctx, re, f, rel, &v)
		}
	} else {
		w := &grepWalker{ctx: ctx, root: root, re: re, filter: filter, base: rel, v: &v}
		err = w.walk(f, "")
	}
	switch {
	case errors.Is(err, errEnoughMatches):
	case err != nil && ctx.Err() != nil:
		return grepValue{}, errors.New("aborted")
	case err != nil:
		return grepValue{}, err
	}
	return v, nil
}

// grepWalker walks the directory a search names.
type grepWalker struct {
	ctx    context.Context
	root   *wsRoot
	re     *regexp.Regexp
	filter *grepFilter
	base   string // workspace-relative path of the search directory
	visits int
	v      *grepValue
}

// walk searches dir, at sub below the search directory ("" for itself);
// dir's name is where the kernel says it is. Each entry is opened from
// dir's descriptor without following a symlink.
func (w *grepWalker) walk(dir *os.File, sub string) error {
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return nil // unreadable directories are skipped
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		if w.visits++; w.visits%256 == 0 {
			if err := w.ctx.Err(); err != nil {
				return err
			}
		}
		name := e.Name()
		rel := path.Join(sub, name)
		label := filepath.Join(dir.Name(), name)
		isDir := e.IsDir()
		if isDir && name == ".git" || !isDir && !e.Type().IsRegular() ||
			isProtected(w.root.protected, label) || w.root.denied(path.Join(w.base, rel)) {
			continue
		}
		if !isDir && !w.filter.accept(rel) {
			continue
		}
		f, st, err := w.root.openAt(int(dir.Fd()), name, label, unix.RESOLVE_NO_SYMLINKS, false)
		if err != nil {
			continue // gone, swapped for a symlink, or the host's
		}
		switch mode := fileMode(&st); {
		case isDir && mode.IsDir():
			err = w.walk(f, rel)
		case !isDir && mode.IsRegular():
			err = grepFile(w.ctx, w.re, f, path.Join(w.base, rel), w.v)
		}
		_ = f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// grepFile appends the matching lines of one file to v, at most
// GrepMaxPerFile, searching the first FileScanMaxBytes of f, a regular
// file; it returns errEnoughMatches once v is full and ctx's error once
// ctx ended. A binary file is skipped.
func grepFile(ctx context.Context, re *regexp.Regexp, f *os.File, display string, v *grepValue) error {
	br := bufio.NewReaderSize(ctxReader{ctx: ctx, r: io.LimitReader(f, FileScanMaxBytes)}, 64<<10)
	if head, _ := br.Peek(binarySniffLen); isBinary(head) {
		return nil
	}
	found := 0
	for n := 1; ; n++ {
		line, err := readLine(br, grepMaxScanLine)
		if line == "" && err != nil {
			return ctx.Err()
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if re.MatchString(line) {
			if len(v.Matches) == GrepMaxLines {
				v.Truncated = true
				return errEnoughMatches
			}
			v.Matches = append(v.Matches, cutLine(display+":"+strconv.Itoa(n)+":"+line))
			if found++; found == GrepMaxPerFile {
				return nil
			}
		}
		if err != nil {
			return ctx.Err()
		}
	}
}
