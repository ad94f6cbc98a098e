package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// NameGrep is the name of the Grep tool.
const NameGrep = "Grep"

// Grep limits.
const (
	// GrepMaxLines bounds the match lines of a Grep result.
	GrepMaxLines = 200
	// GrepMaxPerFile bounds the matches reported per file.
	GrepMaxPerFile = 50
	// GrepTimeout bounds one ripgrep run.
	GrepTimeout = 120 * time.Second
	// grepMaxLineChars is where a matched line's text is cut.
	grepMaxLineChars = 2000
	// grepMaxScanLine is how much of a line the fallback inspects.
	grepMaxScanLine = 1 << 20
	// grepMaxOutput bounds what is read from ripgrep.
	grepMaxOutput = 4 << 20
)

// grepTool searches file contents with ripgrep when lookRG finds it, else
// with a pure Go walk.
type grepTool struct {
	lookRG func() (string, error)
}

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
	loc, err := resolveExisting(env, where)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Grep: path %s: %v", where, err)), nil
	}
	// A single file must be a regular one: ripgrep, like the Go search,
	// would block on a named pipe given as the path.
	if fi, err := os.Stat(loc.real); err != nil {
		return ErrorResult(fmt.Sprintf("Grep: path %s: %v", loc.rel, err)), nil
	} else if err := checkRegular(fi.Mode()); err != nil && !errors.Is(err, errIsDir) {
		return ErrorResult(fmt.Sprintf("Grep: path %s: %v", loc.rel, err)), nil
	}
	var v grepValue
	// ripgrep cannot be told to leave the host's paths alone; a search
	// whose tree holds one uses the Go walk, which skips them.
	if rg, lookErr := t.rgPath(); lookErr == nil && !holdsProtected(loc) {
		v, err = grepRipgrep(ctx, rg, loc, *a.Pattern, glob)
	} else {
		v, err = grepFallback(ctx, loc, *a.Pattern, glob)
	}
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

func (t grepTool) rgPath() (string, error) {
	if t.lookRG == nil {
		return "", exec.ErrNotFound
	}
	return t.lookRG()
}

// holdsProtected reports whether one of the host's paths lies inside the
// search location loc.
func holdsProtected(loc location) bool {
	for _, p := range loc.protected {
		if within(loc.real, p) {
			return true
		}
	}
	return false
}

// grepRipgrep runs rg in the workspace and parses its "file:line:text"
// output.
func grepRipgrep(ctx context.Context, rg string, loc location, pattern, glob string) (grepValue, error) {
	ctx, cancel := context.WithTimeout(ctx, GrepTimeout)
	defer cancel()
	args := []string{"-n", "--no-heading", "--with-filename", "--color=never", "--sort=path",
		"--max-count=" + strconv.Itoa(GrepMaxPerFile)}
	if glob != "" {
		args = append(args, "--glob", glob)
	}
	args = append(args, "--", pattern, filepath.FromSlash(loc.rel))
	cmd := exec.CommandContext(ctx, rg, args...)
	cmd.Dir = loc.root
	cmd.WaitDelay = time.Second
	stdout := &capBuffer{max: grepMaxOutput}
	stderr := &capBuffer{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	var v grepValue
	for _, line := range strings.Split(stdout.buf.String(), "\n") {
		if line == "" {
			continue
		}
		if len(v.Matches) == GrepMaxLines || stdout.full {
			v.Truncated = true
			break
		}
		line = strings.TrimPrefix(line, "./")
		v.Matches = append(v.Matches, cutLine(line))
	}
	if err != nil {
		var exit *exec.ExitError
		switch {
		case ctx.Err() == context.DeadlineExceeded:
			return grepValue{}, fmt.Errorf("ripgrep timed out after %s", GrepTimeout)
		case ctx.Err() != nil:
			return grepValue{}, errors.New("aborted")
		case errors.As(err, &exit) && exit.ExitCode() == 1:
			return grepValue{}, nil
		case len(v.Matches) == 0:
			msg := strings.TrimSpace(stderr.buf.String())
			if msg == "" {
				msg = err.Error()
			}
			return grepValue{}, fmt.Errorf("ripgrep failed: %s", msg)
		}
	}
	return v, nil
}

// capBuffer keeps the first max bytes written to it and discards the rest.
type capBuffer struct {
	buf  bytes.Buffer
	max  int
	full bool
}

func (c *capBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room < len(p) {
		c.full = true
		c.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.buf.Write(p)
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

// grepFallback searches with Go regular expressions: a file, or a
// directory walked in lexical order without following symlinks, skipping
// .git, the host's paths and binary files.
func grepFallback(ctx context.Context, loc location, pattern, glob string) (grepValue, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return grepValue{}, fmt.Errorf("invalid regular expression: %v", err)
	}
	filter, err := newGrepFilter(glob)
	if err != nil {
		return grepValue{}, err
	}
	var v grepValue
	fi, err := os.Stat(loc.real)
	if err != nil {
		return grepValue{}, err
	}
	if !fi.IsDir() {
		err := grepFile(ctx, re, loc.real, loc.rel, &v)
		switch {
		case ctx.Err() != nil:
			return grepValue{}, errors.New("aborted")
		case err != nil && !errors.Is(err, errEnoughMatches):
			return grepValue{}, err
		}
		return v, nil
	}
	visits := 0
	err = filepath.WalkDir(loc.real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && p != loc.real {
				return fs.SkipDir
			}
			return nil
		}
		if visits++; visits%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if isProtected(loc.protected, p) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if d.Name() == ".git" && p != loc.real {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(loc.real, p)
		if err != nil {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if !filter.accept(rel) {
			return nil
		}
		return grepFile(ctx, re, p, path.Join(loc.rel, rel), &v)
	})
	switch {
	case errors.Is(err, errEnoughMatches):
	case err != nil && ctx.Err() != nil:
		return grepValue{}, errors.New("aborted")
	case err != nil:
		return grepValue{}, err
	}
	return v, nil
}

// grepFile appends the matching lines of one file to v, at most
// GrepMaxPerFile, searching its first FileScanMaxBytes; it returns
// errEnoughMatches once v is full and ctx's error once ctx ended.
// Unreadable, binary and non-regular files are skipped.
func grepFile(ctx context.Context, re *regexp.Regexp, file, display string, v *grepValue) error {
	f, _, err := openRegular(file)
	if err != nil {
		return nil
	}
	defer f.Close()
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
