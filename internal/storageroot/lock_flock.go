//go:build unix && !linux

package storageroot

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// tryLock takes a whole-file flock without waiting. The owner's lock is
// exclusive; shared asks for the read lock another implementation's reader
// holds.
func tryLock(fd int, shared bool) (bool, error) {
	how := unix.LOCK_EX | unix.LOCK_NB
	if shared {
		how = unix.LOCK_SH | unix.LOCK_NB
	}
	err := retryEINTR(func() error { return unix.Flock(fd, how) })
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EWOULDBLOCK), errors.Is(err, unix.EACCES), errors.Is(err, unix.EBUSY):
		return false, nil
	}
	return false, os.NewSyscallError("flock", err)
}

// unlock releases the lock; errors are ignored because closing the file
// descriptor releases it anyway.
func unlock(fd int) {
	_ = unix.Flock(fd, unix.LOCK_UN)
}
