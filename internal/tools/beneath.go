package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// This file is how file tools reach the workspace: the workspace is opened
// once per call as a directory descriptor and every path is resolved
// beneath it by the kernel (openat2 with RESOLVE_BENEATH), so a symlink,
// a ".." or a directory swapped for a symlink while the call runs cannot
// lead out of it: such a lookup fails with EXDEV. Symlinks that stay
// inside keep working; absolute symlinks are refused. What is opened is
// then checked against the host's paths by its identity (device and inode)
// and by where the kernel says it is, not by the path asked for.

// errNoOpenat2 reports a kernel without openat2. File tools do not fall
// back to resolving paths themselves, which a concurrent rename defeats.
var errNoOpenat2 = errors.New("file tools need the openat2 system call (Linux 5.6 or later), which this system does not provide")

// errChanged reports a file or directory replaced while a call worked on
// it.
var errChanged = errors.New("the file changed while the call was working on it; try again")

// openat2 is unix.Openat2; a test stands in a kernel without it.
var openat2 = unix.Openat2

// fileID identifies a file system object.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{dev: uint64(st.Dev), ino: st.Ino} }

// wsRoot is the workspace of one call. close releases it.
type wsRoot struct {
	fd        int    // the workspace, O_PATH
	path      string // where the kernel says fd is
	real      string // the realpath of Env.Workspace
	workspace string // Env.Workspace, cleaned
	// protected are the host's paths (protectedPaths) and protectedIDs
	// the identities of those that exist.
	protected    []string
	protectedIDs map[fileID]bool
	denyRead     func(rel string) bool
}

// openRoot opens env's workspace for one call.
func openRoot(env Env) (*wsRoot, error) {
	real, err := workspaceRoot(env)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(real, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("workspace directory is unavailable: %v", err)
	}
	r := &wsRoot{
		fd: fd, real: real, workspace: filepath.Clean(env.Workspace),
		protected: protectedPaths(env), protectedIDs: map[fileID]bool{}, denyRead: env.DenyRead,
	}
	if r.path, err = fdPath(fd); err != nil {
		r.close()
		return nil, err
	}
	for _, p := range r.protected {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			r.protectedIDs[idOf(&st)] = true
		}
	}
	return r, nil
}

func (r *wsRoot) close() { _ = unix.Close(r.fd) }

// denied reports whether a permission rule denies reading rel, a
// workspace-relative slash-separated path.
func (r *wsRoot) denied(rel string) bool { return r.denyRead != nil && r.denyRead(rel) }

// rel turns a path argument into a clean workspace-relative path,
// refusing one that leaves the workspace or names a host's path as
// written.
func (r *wsRoot) rel(p string) (string, error) {
	rel, err := lexicalRel(r.workspace, r.real, p)
	if err != nil {
		return "", err
	}
	if isProtected(r.protected, filepath.Join(r.real, rel)) || isProtected(r.protected, filepath.Join(r.workspace, rel)) {
		return "", errProtected
	}
	return rel, nil
}

// fdPath returns where the kernel says the object of fd is.
func fdPath(fd int) (string, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", fmt.Errorf("cannot tell where an opened file is (file tools need /proc): %v", err)
	}
	return p, nil
}

// openat opens name relative to dirfd with openat2, never leaving dirfd's
// tree and never through a /proc magic link; resolve adds RESOLVE_ flags.
// A lookup the kernel asks to retry (a rename raced a ".." step) is
// retried a bounded number of times.
func openat(dirfd int, name string, flags int, resolve uint64) (int, error) {
	how := &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: resolve | unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	for tries := 0; ; tries++ {
		fd, err := openat2(dirfd, name, how)
		switch {
		case err == nil:
			return fd, nil
		case (err == unix.EAGAIN || err == unix.EINTR) && tries < 64:
			continue
		case err == unix.ENOSYS:
			return -1, errNoOpenat2
		}
		return -1, err
	}
}

// pathAt opens name relative to dirfd as an O_PATH descriptor, which
// opens nothing (a named pipe or a device stays closed), and returns what
// it is.
func pathAt(dirfd int, name string, resolve uint64) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := openat(dirfd, name, unix.O_PATH, resolve)
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// check refuses the object of fd (st is its status) when it is one of
// the host's paths or lies below one, or is not inside the workspace;
// else it returns where the kernel says the object is.
func (r *wsRoot) check(fd int, st *unix.Stat_t) (string, error) {
	if r.protectedIDs[idOf(st)] {
		return "", errProtected
	}
	p, err := fdPath(fd)
	if err != nil {
		return "", err
	}
	if isProtected(r.protected, p) {
		return "", errProtected
	}
	if !within(r.path, p) {
		return "", errOutsideWorkspace
	}
	return p, nil
}

// fileMode is the fs.FileMode of st.
func fileMode(st *unix.Stat_t) fs.FileMode {
	m := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	}
	return m
}

// reopen opens the object of the O_PATH descriptor fd (st is its status)
// for reading: a regular file without blocking, or a directory. The new
// descriptor must be the same object; label names the *os.File.
func reopen(fd int, st *unix.Stat_t, label string) (*os.File, error) {
	flags := unix.O_RDONLY | unix.O_NOCTTY | unix.O_CLOEXEC
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags |= unix.O_DIRECTORY
	} else {
		flags |= unix.O_NONBLOCK
	}
	nfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), flags, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot open %s: %v", filepath.Base(label), err)
	}
	var nst unix.Stat_t
	if err := unix.Fstat(nfd, &nst); err != nil || idOf(&nst) != idOf(st) {
		_ = unix.Close(nfd)
		return nil, errChanged
	}
	return os.NewFile(uintptr(nfd), label), nil
}

// openAt opens name relative to dirfd for reading when it is a regular
// file or a directory; anything else fails with a *notRegularError and is
// never opened. full checks where the object is (r.check) and names the
// *os.File by it; otherwise only its identity is compared with the host's
// paths, which suffices for an entry of a directory already checked, and
// label names the *os.File.
func (r *wsRoot) openAt(dirfd int, name, label string, resolve uint64, full bool) (*os.File, unix.Stat_t, error) {
	fd, st, err := pathAt(dirfd, name, resolve)
	if err != nil {
		return nil, st, err
	}
	defer unix.Close(fd)
	if full {
		label, err = r.check(fd, &st)
	} else if r.protectedIDs[idOf(&st)] {
		err = errProtected
	}
	if err != nil {
		return nil, st, err
	}
	if mode := fileMode(&st); !mode.IsRegular() && !mode.IsDir() {
		return nil, st, &notRegularError{mode: mode}
	}
	f, err := reopen(fd, &st, label)
	return f, st, err
}

// open opens rel (workspace-relative) for reading when it is a regular
// file or a directory, following symlinks that stay inside the workspace.
func (r *wsRoot) open(rel string) (*os.File, unix.Stat_t, error) {
	f, st, err := r.openAt(r.fd, rel, "", 0, true)
	if err != nil {
		return nil, st, r.lookupError(rel, err)
	}
	return f, st, nil
}

// lookupError words a failed lookup of rel for the model.
func (r *wsRoot) lookupError(rel string, err error) error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return err
	}
	switch errno {
	case unix.EXDEV:
		err, _ := r.refusal(rel)
		return err
	case unix.ENOENT:
		return fmt.Errorf("file not found: %s", filepath.ToSlash(rel))
	case unix.ELOOP:
		return fmt.Errorf("%s: too many levels of symlinks", filepath.ToSlash(rel))
	}
	return fmt.Errorf("%s: %v", filepath.ToSlash(rel), errno)
}

// refusal explains why the kernel refused to resolve rel beneath the
// workspace: errProtected when rel leads to one of the host's paths,
// else errOutsideWorkspace. missing reports that rel does not lead to an
// existing object (a symlink on the way leads nowhere). It resolves by
// path only to choose the words; the refusal itself is the kernel's.
func (r *wsRoot) refusal(rel string) (err error, missing bool) {
	dir, rest := filepath.Join(r.real, rel), ""
	for {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			if isProtected(r.protected, filepath.Join(real, rest)) {
				return errProtected, rest != ""
			}
			return errOutsideWorkspace, rest != ""
		}
		if dir == r.real || filepath.Dir(dir) == dir {
			return errOutsideWorkspace, true
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = filepath.Dir(dir)
	}
}

// openDir opens the directory rel beneath the workspace to create files
// in, refusing the host's directories.
func (r *wsRoot) openDir(rel string) (int, error) {
	fd, err := openat(r.fd, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err = unix.Fstat(fd, &st); err == nil {
		_, err = r.check(fd, &st)
	}
	if err != nil {
		_ = unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// mkdirAll opens the directory dir (workspace-relative) for a write,
// creating missing directories one at a time: each is made in its parent
// as opened beneath the workspace (and checked) and then opened beneath
// the workspace itself.
func (r *wsRoot) mkdirAll(dir string) (int, error) {
	fd, err := r.openDir(dir)
	if err == nil || !errors.Is(err, unix.ENOENT) {
		return fd, r.parentError(dir, err)
	}
	cur, err := r.openDir(".")
	if err != nil {
		return -1, err
	}
	parts := strings.Split(filepath.ToSlash(dir), "/")
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		next, err := r.openDir(prefix)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(cur, parts[i], 0o755); err != nil && err != unix.EEXIST {
				_ = unix.Close(cur)
				return -1, fmt.Errorf("cannot create parent directory: %s: %v", prefix, err)
			}
			next, err = r.openDir(prefix)
		}
		_ = unix.Close(cur)
		if err != nil {
			return -1, r.parentError(prefix, err)
		}
		cur = next
	}
	return cur, nil
}

// parentError words a failure to open or create the parent directory dir
// of a write.
func (r *wsRoot) parentError(dir string, err error) error {
	var errno unix.Errno
	switch {
	case err == nil || !errors.As(err, &errno):
		return err
	case errno == unix.EXDEV:
		refused, missing := r.refusal(dir)
		if missing && refused == errOutsideWorkspace {
			return fmt.Errorf("cannot create parent directory: %w", refused)
		}
		return refused
	}
	return fmt.Errorf("cannot create parent directory: %s: %v", filepath.ToSlash(dir), errno)
}

// placeOf returns the directory that holds the object of the O_PATH
// descriptor fd (st is its status), opened to write into, with the
// object's name there and its path: the place a write replaces it.
func (r *wsRoot) placeOf(fd int, st *unix.Stat_t) (dirfd int, base, p string, err error) {
	if p, err = fdPath(fd); err != nil {
		return -1, "", "", err
	}
	if !within(r.path, p) {
		return -1, "", "", errOutsideWorkspace
	}
	rel, err := filepath.Rel(r.path, p)
	if err != nil {
		return -1, "", "", err
	}
	if rel == "." {
		return -1, "", "", errors.New("path names the workspace directory, not a file")
	}
	// p is where the object is, symlinks resolved: its directory is
	// reached without following any.
	dirfd, err = openat(r.fd, filepath.Dir(rel), unix.O_RDONLY|unix.O_DIRECTORY, unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return -1, "", "", errChanged
	}
	var dst unix.Stat_t
	if err = unix.Fstat(dirfd, &dst); err == nil {
		_, err = r.check(dirfd, &dst)
	}
	base = filepath.Base(rel)
	var bst unix.Stat_t
	if err == nil && (unix.Fstatat(dirfd, base, &bst, unix.AT_SYMLINK_NOFOLLOW) != nil || idOf(&bst) != idOf(st)) {
		err = errChanged
	}
	if err != nil {
		_ = unix.Close(dirfd)
		return -1, "", "", err
	}
	return dirfd, base, p, nil
}

// writeAt replaces the file base in the directory dirfd with data: it
// writes a new file there, syncs it, renames it over base and syncs the
// directory, all relative to dirfd. An existing file keeps its permission
// bits; a new one gets 0644.
func writeAt(dirfd int, base string, data []byte) (err error) {
	mode := uint32(0o644)
	var st unix.Stat_t
	if unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		mode = st.Mode & 0o777
	}
	var tmp string
	var fd int
	for tries := 0; ; tries++ {
		tmp = "." + base + ".tmp-" + strconv.FormatUint(rand.Uint64(), 36)
		fd, err = unix.Openat(dirfd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST && tries < 16 {
			continue
		}
		if err != nil {
			return fmt.Errorf("cannot create a temporary file: %v", err)
		}
		break
	}
	f := os.NewFile(uintptr(fd), tmp)
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				_ = f.Close()
			}
			_ = unix.Unlinkat(dirfd, tmp, 0)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(fs.FileMode(mode)); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	closed = true
	if err = f.Close(); err != nil {
		return err
	}
	if err = unix.Renameat(dirfd, tmp, dirfd, base); err != nil {
		return fmt.Errorf("cannot replace %s: %v", base, err)
	}
	_ = unix.Fsync(dirfd)
	return nil
}
