package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/internal/permsyntax"
)

// NameGlob is the name of the Glob tool.
const NameGlob = permsyntax.NameGlob

// Glob limits.
const (
	// GlobMaxResults bounds the files a Glob result lists.
	GlobMaxResults = 200
	// globMaxVisits bounds the directory entries one walk inspects.
	globMaxVisits = 200_000
)

type globTool struct{}

func (globTool) Name() string { return NameGlob }

func (globTool) Description() string {
	return "Find files in the workspace by glob pattern, e.g. \"**/*.go\" or \"src/*.ts\". " +
		"'*' and '?' stay within one path segment, '[...]' is a character class and \"**\" " +
		"matches any number of directories. cwd (relative to the workspace) is where the " +
		"pattern starts. Returns up to 200 workspace-relative paths, sorted; .git is skipped."
}

func (globTool) Parameters() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"pattern":{"type":"string","description":"Relative glob pattern."},` +
		`"cwd":{"type":"string","description":"Directory to search from, relative to the workspace (default: the workspace)."}},` +
		`"required":["pattern"],"additionalProperties":false}`)
}

func (globTool) PermissionRequired() bool { return false }
func (globTool) ActivityKind() string     { return ActivitySearch }

type globArgs struct {
	Pattern *string `json:"pattern"`
	Cwd     *string `json:"cwd"`
}

// globValue is the value of a Glob result.
type globValue struct {
	Files     []string `json:"files"`
	Truncated bool     `json:"truncated,omitempty"`
}

// errWalkLimit stops a walk that inspected too many entries.
var errWalkLimit = errors.New("walk limit reached")

func (globTool) Run(ctx context.Context, env Env, raw json.RawMessage) (Result, error) {
	var a globArgs
	if err := decodeArgs(raw, &a); err != nil {
		return invalidArgs(NameGlob, err), nil
	}
	if err := requireString("pattern", a.Pattern); err != nil {
		return invalidArgs(NameGlob, err), nil
	}
	pat, err := compileGlob(*a.Pattern)
	if err != nil {
		return invalidArgs(NameGlob, err), nil
	}
	cwd := "."
	if a.Cwd != nil && *a.Cwd != "" {
		cwd = *a.Cwd
	}
	root, err := openRoot(env)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Glob: cwd %s: %v", cwd, err)), nil
	}
	defer root.close()
	rel, err := root.rel(cwd)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Glob: cwd %s: %v", cwd, err)), nil
	}
	name := filepath.ToSlash(rel)
	dir, st, err := root.open(rel)
	var notRegular *notRegularError
	switch {
	case errors.As(err, &notRegular):
		return ErrorResult(fmt.Sprintf("Glob: cwd %s is not a directory", name)), nil
	case err != nil:
		return ErrorResult(fmt.Sprintf("Glob: cwd %s: %v", cwd, err)), nil
	}
	defer dir.Close()
	if !fileMode(&st).IsDir() {
		return ErrorResult(fmt.Sprintf("Glob: cwd %s is not a directory", name)), nil
	}
	w := &globWalker{ctx: ctx, root: root, pat: pat, prefix: name, onStack: map[fileID]bool{}}
	err = w.walk(dir, idOf(&st), nil)
	if err != nil && !errors.Is(err, errWalkLimit) {
		if ctx.Err() != nil {
			return ErrorResult("Glob aborted"), nil
		}
		return ErrorResult(fmt.Sprintf("Glob: %v", err)), nil
	}
	sort.Strings(w.matches)
	v := globValue{Files: w.matches, Truncated: errors.Is(err, errWalkLimit)}
	if len(v.Files) > GlobMaxResults {
		v.Files, v.Truncated = v.Files[:GlobMaxResults], true
	}
	if v.Files == nil {
		v.Files = []string{}
	}
	r := JSONResult(v)
	switch {
	case len(v.Files) == 0:
		r.ModelText = "No files found"
	default:
		r.ModelText = strings.Join(v.Files, "\n")
		if v.Truncated {
			r.ModelText += fmt.Sprintf("\n[results truncated to the first %d; narrow the pattern]", len(v.Files))
		}
	}
	return r, nil
}

// globWalker walks a directory tree collecting files that match, by
// descriptors: each directory is opened from its parent's descriptor
// without following a symlink. A symlink is followed beneath the
// workspace (from the workspace itself, by its path), so only one whose
// target lies inside is listed or entered, and a directory the walk is
// already inside of is not entered again, which breaks symlink loops;
// globMaxVisits bounds the rest. The host's paths and what Env.DenyRead
// names are neither listed nor entered.
type globWalker struct {
	ctx     context.Context
	root    *wsRoot
	pat     *globPattern
	prefix  string          // workspace-relative path of the search directory
	onStack map[fileID]bool // the directories being walked
	visits  int
	matches []string
}

// walk goes through dir, whose identity is id, matched as segs below the
// search directory. dir's name is where the kernel says it is.
func (w *globWalker) walk(dir *os.File, id fileID, segs []string) error {
	if w.onStack[id] {
		return nil // a symlink loop back to an ancestor
	}
	w.onStack[id] = true
	defer delete(w.onStack, id)
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return nil // unreadable directories are skipped
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		if w.visits++; w.visits > globMaxVisits {
			return errWalkLimit
		}
		if w.visits%256 == 0 {
			if err := w.ctx.Err(); err != nil {
				return err
			}
		}
		name := e.Name()
		if name == ".git" {
			continue
		}
		child := append(segs[:len(segs):len(segs)], name)
		rel := path.Join(w.prefix, strings.Join(child, "/"))
		if isProtected(w.root.protected, filepath.Join(dir.Name(), name)) || w.root.denied(rel) {
			continue
		}
		var (
			sub *os.File
			st  unix.Stat_t
			err error
		)
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			sub, st, err = w.followLink(rel, child)
		case e.IsDir():
			if !w.pat.mayMatchBelow(child) {
				continue
			}
			sub, st, err = w.root.openAt(int(dir.Fd()), name, filepath.Join(dir.Name(), name), unix.RESOLVE_NO_SYMLINKS, false)
		}
		var notRegular *notRegularError
		switch {
		case errors.As(err, &notRegular):
		case err != nil:
			continue
		case sub != nil:
			if fileMode(&st).IsDir() {
				err = w.walk(sub, idOf(&st), child)
				_ = sub.Close()
				if err != nil {
					return err
				}
				continue
			}
			_ = sub.Close()
		case fileMode(&st).IsDir():
			continue // a link to a directory the pattern cannot match below
		}
		if w.pat.matchSegs(child) {
			w.matches = append(w.matches, rel)
		}
	}
	return nil
}

// followLink resolves the symlink rel (workspace-relative, matched as
// child) beneath the workspace. A link to a directory the pattern may
// match below is returned opened, named by where the kernel says it is;
// for a link to anything else the file is nil and the status tells what
// it is. An error means the link is not listed.
func (w *globWalker) followLink(rel string, child []string) (*os.File, unix.Stat_t, error) {
	fd, st, err := pathAt(w.root.fd, rel, 0)
	if err != nil {
		return nil, st, err
	}
	defer unix.Close(fd)
	p, err := w.root.check(fd, &st)
	if err != nil {
		return nil, st, err
	}
	if !fileMode(&st).IsDir() || !w.pat.mayMatchBelow(child) {
		return nil, st, nil
	}
	f, err := reopen(fd, &st, p)
	return f, st, err
}
