package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// prepareFile makes sure path is a private database file: it creates a
// missing file with mode 0600 (and makes its directory entry durable), and
// refuses an existing one that is not a regular file owned by the current
// user without group or other permission bits.
func prepareFile(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case err == nil:
		return checkPrivate(path, fi)
	case !errors.Is(err, fs.ErrNotExist):
		return persistenceError("stat database file", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return persistenceError("create database file", err)
	}
	// The umask can only remove bits; make the mode exact anyway.
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return persistenceError("create database file", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return persistenceError("create database file", err)
	}
	if err := f.Close(); err != nil {
		return persistenceError("create database file", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return persistenceError("create database file", err)
	}
	fi, err = os.Lstat(path)
	if err != nil {
		return persistenceError("stat database file", err)
	}
	return checkPrivate(path, fi)
}

// checkCompanions applies the privacy check to the -wal and -shm files that
// exist next to the database.
func checkCompanions(path string) error {
	for _, suffix := range []string{"-wal", "-shm", "-journal"} {
		p := path + suffix
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return persistenceError("stat database file", err)
		}
		if err := checkPrivate(p, fi); err != nil {
			return err
		}
	}
	return nil
}

// checkPrivate refuses anything but a regular file owned by the effective
// user with no group or other permission bits.
func checkPrivate(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file (mode %s)", ErrInsecureFile, path, fi.Mode())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%w: %s: cannot determine the owner", ErrInsecureFile, path)
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("%w: %s is owned by uid %d, not %d", ErrInsecureFile, path, st.Uid, uid)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %#o, want no group or other bits", ErrInsecureFile, path, perm)
	}
	return nil
}

// syncDir fsyncs a directory so that a newly created entry is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
