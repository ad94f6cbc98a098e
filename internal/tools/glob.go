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
	"sort"
	"strings"
)

// NameGlob is the name of the Glob tool.
const NameGlob = "Glob"

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
	base, err := resolveExisting(env, cwd)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Glob: cwd %s: %v", cwd, err)), nil
	}
	if fi, err := os.Stat(base.real); err != nil || !fi.IsDir() {
		return ErrorResult(fmt.Sprintf("Glob: cwd %s is not a directory", base.rel)), nil
	}
	w := &globWalker{ctx: ctx, root: base.root, protected: base.protected, pat: pat, prefix: base.rel, visited: map[string]bool{}}
	err = w.walk(base.real, nil)
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

// globWalker walks a directory tree collecting files that match. Symlinked
// directories are followed when their target lies inside the workspace and
// is not a directory the walk is already inside of, which breaks symlink
// loops; globMaxVisits bounds the rest. The host's paths are neither
// listed nor entered.
type globWalker struct {
	ctx       context.Context
	root      string   // workspace realpath
	protected []string // the host's paths
	pat       *globPattern
	prefix    string          // workspace-relative path of the search directory
	visited   map[string]bool // real paths of the directories being walked
	visits    int
	matches   []string
}

func (w *globWalker) walk(dir string, segs []string) error {
	if w.visited[dir] {
		return nil // a symlink loop back to an ancestor
	}
	w.visited[dir] = true
	defer delete(w.visited, dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil // unreadable directories are skipped
	}
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
		full := filepath.Join(dir, name)
		child := append(segs[:len(segs):len(segs)], name)
		isDir := e.IsDir()
		if e.Type()&fs.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(full)
			if err != nil || !within(w.root, target) {
				continue
			}
			fi, err := os.Stat(target)
			if err != nil {
				continue
			}
			full, isDir = target, fi.IsDir()
		}
		if isProtected(w.protected, full) {
			continue
		}
		if isDir {
			if w.pat.mayMatchBelow(child) {
				if err := w.walk(full, child); err != nil {
					return err
				}
			}
			continue
		}
		if w.pat.matchSegs(child) {
			w.matches = append(w.matches, path.Join(w.prefix, strings.Join(child, "/")))
		}
	}
	return nil
}
