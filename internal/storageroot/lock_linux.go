package storageroot

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// tryLock takes a whole-file open-file-description lock without waiting,
// the primitive other implementations of the storage root authority use on
// Linux, so that they arbitrate correctly against this one. The owner's
// lock is exclusive; shared asks for the read lock such a reader holds.
func tryLock(fd int, shared bool) (bool, error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if shared {
		lk.Type = unix.F_RDLCK
	}
	err := retryEINTR(func() error { return unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk) })
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EACCES), errors.Is(err, unix.EBUSY):
		return false, nil
	}
	return false, os.NewSyscallError("fcntl(F_OFD_SETLK)", err)
}

// unlock releases the lock; errors are ignored because closing the file
// descriptor releases it anyway.
func unlock(fd int) {
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0, Start: 0, Len: 0}
	_ = unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk)
}
