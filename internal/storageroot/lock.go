package storageroot

import (
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// lockHolder is an open, locked owner.lock of an interactive root.
type lockHolder struct {
	capability *Capability
	controlDir string
	lockPath   string
	fd         int
	artifact   identity
	markers    markerCache

	mu       sync.Mutex
	closed   bool
	inflight int
	drained  chan struct{} // closed when inflight drops to zero after close
	done     chan struct{} // closed when Close has finished
	closeErr error
}

// Owner holds the exclusive (write) lock of an interactive root: at most one
// owner exists per root across all processes, and no holder of a shared
// (read) lock, such as another implementation's reader, coexists with it.
// Only TryAcquireOwner creates owners.
type Owner struct {
	h *lockHolder
}

// TryAcquireOwner takes the exclusive lock of an interactive root without
// waiting. It returns (nil, nil) when another process holds the lock,
// exclusively or shared.
func TryAcquireOwner(c *Capability) (*Owner, error) {
	if err := requireCapability(c, KindInteractive); err != nil {
		return nil, err
	}
	h, err := acquireLock(c)
	if h == nil {
		return nil, wrap(CodeLockFailed, err)
	}
	return &Owner{h: h}, nil
}

func acquireLock(c *Capability) (*lockHolder, error) {
	controlDir, err := prepareControlDirectory(c)
	if err != nil {
		return nil, err
	}
	lockPath := filepath.Join(controlDir, LockFile)
	fd, err := open(lockPath, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT, 0o600)
	if err != nil {
		return nil, err
	}
	art, err := stableArtifact(fd, lockPath)
	if err == nil {
		err = retryEINTR(func() error { return unix.Fchmod(fd, 0o600) })
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	granted, err := tryLock(fd, false)
	if err != nil || !granted {
		unix.Close(fd)
		return nil, err
	}
	again, err := stableArtifact(fd, lockPath)
	if err == nil && again != art {
		err = newError(CodeInvalidLockArtifact, "%s was replaced while locking", lockPath)
	}
	if err == nil {
		err = assertRoot(c)
	}
	if err != nil {
		unlock(fd)
		unix.Close(fd)
		return nil, err
	}
	return &lockHolder{capability: c, controlDir: controlDir, lockPath: lockPath, fd: fd, artifact: art}, nil
}

// stableArtifact requires the open lock handle and the lock path to be the
// same regular file.
func stableArtifact(fd int, path string) (identity, error) {
	var fst, lst unix.Stat_t
	if err := fstat(fd, path, &fst); err != nil {
		return identity{}, err
	}
	if err := lstat(path, &lst); err != nil {
		if isMissing(err) {
			return identity{}, &Error{Code: CodeInvalidLockArtifact, Err: err}
		}
		return identity{}, err
	}
	if !isRegular(&fst) || !isRegular(&lst) || identityOf(&fst) != identityOf(&lst) {
		return identity{}, newError(CodeInvalidLockArtifact, "%s is not the locked regular file", path)
	}
	// The lock is this account's, 0600: another user's or a writable-by-
	// others lock could be held or replaced by someone else.
	if int(fst.Uid) != os.Geteuid() {
		return identity{}, newError(CodeInvalidLockArtifact, "%s is owned by uid %d, not %d", path, fst.Uid, os.Geteuid())
	}
	if perm := fst.Mode & 0o077; perm != 0 {
		return identity{}, newError(CodeInvalidLockArtifact, "%s has mode %#o, want no group or other bits", path, fst.Mode&0o7777)
	}
	return identityOf(&fst), nil
}

// begin registers an in-flight operation; it fails once Close has started.
func (h *lockHolder) begin() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return newError(CodeInvalidLease, "storage root owner lease is closed")
	}
	h.inflight++
	return nil
}

func (h *lockHolder) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inflight--
	if h.inflight == 0 && h.drained != nil {
		close(h.drained)
		h.drained = nil
	}
}

func (h *lockHolder) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

func (h *lockHolder) runWithLease(op func(root string) error) error {
	if err := h.begin(); err != nil {
		return err
	}
	defer h.end()
	if err := assertRootQuick(h.capability, &h.markers); err != nil {
		return err
	}
	return op(h.capability.path)
}

// assert checks that the holder is open, that owner.lock is still the locked
// file and that the root still carries the capability's identity.
func (h *lockHolder) assert() error {
	if err := h.begin(); err != nil {
		return err
	}
	defer h.end()
	if err := assertRootQuick(h.capability, &h.markers); err != nil {
		return err
	}
	art, err := stableArtifact(h.fd, h.lockPath)
	if err == nil && art != h.artifact {
		err = newError(CodeInvalidLockArtifact, "%s is no longer the locked file", h.lockPath)
	}
	if err != nil {
		return wrap(CodeLockFailed, err)
	}
	if h.isClosed() {
		return newError(CodeInvalidLease, "storage root owner lease is closed")
	}
	return nil
}

func (h *lockHolder) close() error {
	h.mu.Lock()
	if h.done != nil {
		done := h.done
		h.mu.Unlock()
		<-done
		return h.closeErr
	}
	h.closed = true
	h.done = make(chan struct{})
	var drained chan struct{}
	if h.inflight > 0 {
		h.drained = make(chan struct{})
		drained = h.drained
	}
	h.mu.Unlock()
	if drained != nil {
		<-drained
	}
	unlock(h.fd)
	if err := unix.Close(h.fd); err != nil {
		h.closeErr = &Error{Code: CodeLockFailed, Err: &os.PathError{Op: "close", Path: h.lockPath, Err: err}}
	}
	close(h.done)
	return h.closeErr
}

func authenticOwner(o *Owner) error {
	if o == nil || o.h == nil {
		return newError(CodeInvalidOwner, "storage root owner was not issued by the storage root authority")
	}
	return nil
}

// Capability returns the capability of the owned root.
func (o *Owner) Capability() *Capability { return o.h.capability }

// ControlDirectory returns the root's private control directory.
func (o *Owner) ControlDirectory() string { return o.h.controlDir }

// LockPath returns the path of the held owner.lock.
func (o *Owner) LockPath() string { return o.h.lockPath }

// Closed reports whether Close has been called.
func (o *Owner) Closed() bool { return o.h.isClosed() }

// Assert verifies that the owner is still authentic and open, that
// owner.lock is still the locked file and that the root directory still
// carries its marker and identity. It is cheap enough to run on every
// admission: one bounded marker read, one stat of the root and one
// fstat+lstat of the lock.
func (o *Owner) Assert() error {
	if err := authenticOwner(o); err != nil {
		return err
	}
	return o.h.assert()
}

// RunWithLease runs op with the canonical root path while holding an
// in-flight lease: Close waits for op to return. It fails with invalid_lease
// once Close has started, and with the root identity errors when the root
// changed. op must not call Close on the same owner.
func (o *Owner) RunWithLease(op func(root string) error) error {
	if err := authenticOwner(o); err != nil {
		return err
	}
	return o.h.runWithLease(op)
}

// Close releases the lock. It is idempotent: the owner is marked closed at
// once (new leases fail), in-flight leases are awaited, then the lock is
// released and its file descriptor closed. Concurrent calls all wait for
// the same release.
func (o *Owner) Close() error {
	if err := authenticOwner(o); err != nil {
		return err
	}
	return o.h.close()
}
