package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/internal/permsyntax"
)

// NameWrite is the name of the Write tool.
const NameWrite = permsyntax.NameWrite

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
	root, err := openRoot(env)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Write %s: %v", *a.Path, err)), nil
	}
	defer root.close()
	rel, err := root.rel(*a.Path)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Write %s: %v", *a.Path, err)), nil
	}
	name := filepath.ToSlash(rel)
	dirfd, base, real, err := root.writePlace(rel)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Write %s: %v", *a.Path, err)), nil
	}
	defer unix.Close(dirfd)
	unlock := lockPath(real)
	defer unlock()
	if err := writeAt(dirfd, base, []byte(*a.Content)); err != nil {
		return ErrorResult(fmt.Sprintf("Write %s: %v", name, err)), nil
	}
	n := len(*a.Content)
	return contentResult(fileWriteContent{Kind: "file_write", Path: name, Bytes: n},
		fmt.Sprintf("Wrote %d bytes to %s", n, name), false), nil
}

// writePlace returns where a write of rel (workspace-relative) goes: the
// directory, opened and created beneath the workspace, the name in it and
// the path of the file. An existing symlink is followed beneath the
// workspace, so the write replaces its target rather than the link; an
// existing file must be a regular one.
func (r *wsRoot) writePlace(rel string) (dirfd int, base, p string, err error) {
	if rel == "." {
		return -1, "", "", errors.New("path names the workspace directory, not a file")
	}
	dirfd, err = r.mkdirAll(filepath.Dir(rel))
	if err != nil {
		return -1, "", "", err
	}
	base = filepath.Base(rel)
	name := filepath.ToSlash(rel)
	var st unix.Stat_t
	switch err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == unix.ENOENT:
	case err != nil:
		_ = unix.Close(dirfd)
		return -1, "", "", fmt.Errorf("%s: %v", name, err)
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		_ = unix.Close(dirfd)
		return r.symlinkPlace(rel)
	default:
		if err := r.writable(&st, name); err != nil {
			_ = unix.Close(dirfd)
			return -1, "", "", err
		}
	}
	dir, err := fdPath(dirfd)
	if err != nil {
		_ = unix.Close(dirfd)
		return -1, "", "", err
	}
	return dirfd, base, filepath.Join(dir, base), nil
}

// symlinkPlace is writePlace for rel naming a symlink: its target,
// resolved beneath the workspace.
func (r *wsRoot) symlinkPlace(rel string) (dirfd int, base, p string, err error) {
	fd, st, err := pathAt(r.fd, rel, 0)
	if err != nil {
		if errors.Is(err, unix.EXDEV) {
			refused, missing := r.refusal(rel)
			if !missing || refused == errProtected {
				return -1, "", "", refused
			}
			err = refused
		}
		return -1, "", "", fmt.Errorf("path is a symlink that cannot be resolved: %v", err)
	}
	defer unix.Close(fd)
	if _, err := r.check(fd, &st); err != nil {
		return -1, "", "", err
	}
	if err := r.writable(&st, filepath.ToSlash(rel)); err != nil {
		return -1, "", "", err
	}
	return r.placeOf(fd, &st)
}

// writable refuses to replace a file (st is its status) that is one of
// the host's or not a regular file.
func (r *wsRoot) writable(st *unix.Stat_t, name string) error {
	if r.protectedIDs[idOf(st)] {
		return errProtected
	}
	mode := fileMode(st)
	if mode.IsDir() {
		return fmt.Errorf("path is a directory: %s", name)
	}
	return checkRegular(mode)
}
