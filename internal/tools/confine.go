package tools

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// This file confines file tools to the session workspace. A path argument
// is relative to the workspace; an absolute path is accepted when it lies
// inside the workspace (or inside its resolved real path) and is then
// treated as the equivalent relative path. The kernel resolves it beneath
// the workspace (see beneath.go), so that a symlink, a "..", or a
// directory swapped for a symlink while the call runs cannot lead out of
// it; and the object opened is checked against the paths the host owns
// (Env.Protected), which count as outside the workspace even when the
// workspace contains them.

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
func lexicalRel(workspace, root, p string) (string, error) {
	if p == "" {
		return "", errors.New("path must not be empty")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errors.New("path must not contain NUL bytes")
	}
	if filepath.IsAbs(p) {
		abs := filepath.Clean(p)
		for _, base := range []string{workspace, root} {
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
