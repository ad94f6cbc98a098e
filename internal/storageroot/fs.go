package storageroot

import (
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// identity is the (st_dev, st_ino) pair of a file.
type identity struct {
	dev, ino uint64
}

func identityOf(st *unix.Stat_t) identity {
	return identity{dev: uint64(st.Dev), ino: uint64(st.Ino)} //nolint:unconvert // st_dev is signed on some platforms
}

func (id identity) devString() string { return strconv.FormatUint(id.dev, 10) }
func (id identity) inoString() string { return strconv.FormatUint(id.ino, 10) }

func fileType(st *unix.Stat_t) uint32 { return uint32(st.Mode) & unix.S_IFMT }

func isDir(st *unix.Stat_t) bool     { return fileType(st) == unix.S_IFDIR }
func isRegular(st *unix.Stat_t) bool { return fileType(st) == unix.S_IFREG }

func retryEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// stat follows symlinks.
func stat(path string, st *unix.Stat_t) error {
	if err := retryEINTR(func() error { return unix.Stat(path, st) }); err != nil {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return nil
}

func lstat(path string, st *unix.Stat_t) error {
	if err := retryEINTR(func() error { return unix.Lstat(path, st) }); err != nil {
		return &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return nil
}

func fstat(fd int, path string, st *unix.Stat_t) error {
	if err := retryEINTR(func() error { return unix.Fstat(fd, st) }); err != nil {
		return &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	return nil
}

func open(path string, flags int, mode uint32) (int, error) {
	var fd int
	err := retryEINTR(func() error {
		var err error
		fd, err = unix.Open(path, flags|unix.O_CLOEXEC, mode)
		return err
	})
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// isMissing reports ENOENT or ENOTDIR.
func isMissing(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR)
}

// syncDir fsyncs a directory so that entries created or renamed in it are
// durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := f.Sync()
	cerr := f.Close()
	if serr != nil {
		return serr
	}
	return cerr
}
