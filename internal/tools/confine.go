package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// This file confines file tools to the session workspace. A path argument
// is relative to the workspace; an absolute path is accepted when it lies
// inside the workspace (or inside its resolved real path) and is then
// treated as the equivalent relative path. After symlinks are resolved the
// target must still lie inside the workspace's real path, and outside the
// paths the host owns (Env.Protected), which count as outside the
// workspace even when the workspace contains them.

// location is a path argument resolved against the workspace.
type location struct {
	// rel is the workspace-relative path, slash-separated ("." for the
	// workspace itself).
	rel string
	// real is the resolved target: the realpath of an existing file, or
	// for a write the realpath of the parent joined with the base name.
	real string
	// root is the realpath of the workspace.
	root string
	// protected are the host's paths (see protectedPaths).
	protected []string
}

// errOutsideWorkspace reports a path that escapes the workspace.
var errOutsideWorkspace = errors.New("path is outside the workspace")

// errProtected reports a path the host owns.
var errProtected = errors.New("path is outside the workspace: it belongs to the maka host and is not available to tools")

// protectedPaths returns env.Protected as clean absolute paths, each
// followed by its realpath when it exists and differs, so that a path is
// recognised whichever way a link leads to it.
func protectedPaths(env Env) []string {
	var out []string
	for _, p := range env.Protected {
		if p == "" || !filepath.IsAbs(p) {
			continue
		}
		p = filepath.Clean(p)
		out = append(out, p)
		if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
			out = append(out, real)
		}
	}
	return out
}

// isProtected reports whether p (clean, absolute) is one of protected or
// lies below one. It runs for every entry of a walk, so it compares
// strings rather than computing relative paths.
func isProtected(protected []string, p string) bool {
	for _, q := range protected {
		if p == q || q == string(filepath.Separator) ||
			len(p) > len(q) && p[len(q)] == filepath.Separator && strings.HasPrefix(p, q) {
			return true
		}
	}
	return false
}

// workspaceRoot returns the realpath of env.Workspace.
func workspaceRoot(env Env) (string, error) {
	if env.Workspace == "" {
		return "", errors.New("no workspace directory is set for this session")
	}
	root, err := filepath.EvalSymlinks(env.Workspace)
	if err != nil {
		return "", fmt.Errorf("workspace directory is unavailable: %v", err)
	}
	return root, nil
}

// within reports whether p is root or lies below it; both must be clean
// absolute paths.
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// lexicalRel turns a path argument into a clean workspace-relative path
// without touching the file system, rejecting paths that leave the
// workspace lexically.
func lexicalRel(env Env, root, p string) (string, error) {
	if p == "" {
		return "", errors.New("path must not be empty")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errors.New("path must not contain NUL bytes")
	}
	if filepath.IsAbs(p) {
		abs := filepath.Clean(p)
		for _, base := range []string{filepath.Clean(env.Workspace), root} {
			if within(base, abs) {
				rel, err := filepath.Rel(base, abs)
				if err == nil {
					return rel, nil
				}
			}
		}
		return "", errOutsideWorkspace
	}
	rel := filepath.Clean(p)
	if rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", errOutsideWorkspace
	}
	return rel, nil
}

// resolveExisting resolves a path argument naming an existing file or
// directory; its realpath must stay inside the workspace.
func resolveExisting(env Env, p string) (location, error) {
	root, err := workspaceRoot(env)
	if err != nil {
		return location{}, err
	}
	rel, err := lexicalRel(env, root, p)
	if err != nil {
		return location{}, err
	}
	protected := protectedPaths(env)
	if isProtected(protected, filepath.Join(root, rel)) || isProtected(protected, filepath.Join(filepath.Clean(env.Workspace), rel)) {
		return location{}, errProtected
	}
	real, err := filepath.EvalSymlinks(filepath.Join(root, rel))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return location{}, fmt.Errorf("file not found: %s", filepath.ToSlash(rel))
		}
		return location{}, err
	}
	if !within(root, real) {
		return location{}, errOutsideWorkspace
	}
	if isProtected(protected, real) {
		return location{}, errProtected
	}
	return location{rel: filepath.ToSlash(rel), real: real, root: root, protected: protected}, nil
}

// resolveForWrite resolves a path argument naming a file to create or
// replace. Missing parent directories are created; the parent's realpath
// must stay inside the workspace. An existing symlink is followed and its
// target must stay inside the workspace too, so the write replaces the
// target rather than the link.
func resolveForWrite(env Env, p string) (location, error) {
	root, err := workspaceRoot(env)
	if err != nil {
		return location{}, err
	}
	rel, err := lexicalRel(env, root, p)
	if err != nil {
		return location{}, err
	}
	if rel == "." {
		return location{}, errors.New("path names the workspace directory, not a file")
	}
	protected := protectedPaths(env)
	abs := filepath.Join(root, rel)
	if isProtected(protected, abs) || isProtected(protected, filepath.Join(filepath.Clean(env.Workspace), rel)) {
		return location{}, errProtected
	}
	parent := filepath.Dir(abs)
	// The deepest existing ancestor must resolve inside the workspace, and
	// what would be created under it outside the host's paths, before
	// anything is created.
	for dir := parent; ; dir = filepath.Dir(dir) {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			if !within(root, real) {
				return location{}, errOutsideWorkspace
			}
			rest, err := filepath.Rel(dir, abs)
			if err != nil {
				return location{}, err
			}
			if isProtected(protected, filepath.Join(real, rest)) {
				return location{}, errProtected
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || dir == root || filepath.Dir(dir) == dir {
			return location{}, err
		}
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return location{}, fmt.Errorf("cannot create parent directory: %v", err)
	}
	realParent, err := filepath.EvalSymlinks(parent)
	if err != nil {
		return location{}, err
	}
	if !within(root, realParent) {
		return location{}, errOutsideWorkspace
	}
	target := filepath.Join(realParent, filepath.Base(abs))
	if isProtected(protected, target) {
		return location{}, errProtected
	}
	if fi, err := os.Lstat(target); err == nil {
		if fi.Mode()&fs.ModeSymlink != 0 {
			resolved, err := filepath.EvalSymlinks(target)
			if err != nil {
				return location{}, fmt.Errorf("path is a symlink that cannot be resolved: %v", err)
			}
			if !within(root, resolved) {
				return location{}, errOutsideWorkspace
			}
			if isProtected(protected, resolved) {
				return location{}, errProtected
			}
			target = resolved
			if fi, err = os.Stat(target); err != nil {
				return location{}, err
			}
		}
		if fi.IsDir() {
			return location{}, fmt.Errorf("path is a directory: %s", filepath.ToSlash(rel))
		}
		if err := checkRegular(fi.Mode()); err != nil {
			return location{}, err
		}
	}
	return location{rel: filepath.ToSlash(rel), real: target, root: root, protected: protected}, nil
}
