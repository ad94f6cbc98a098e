package storageroot

import (
	"errors"
	"fmt"
)

// Error codes of the storage root authority.
const (
	// CodeInvalidRoot: the path exists but is not a directory.
	CodeInvalidRoot = "invalid_root"
	// CodeInvalidRootKind: the kind is neither interactive nor headless.
	CodeInvalidRootKind = "invalid_root_kind"
	// CodeRootNotFound: an existing-root operation found no directory.
	CodeRootNotFound = "root_not_found"
	// CodeRootUnmarked: the marker file is absent where one must exist.
	CodeRootUnmarked = "root_unmarked"
	// CodeInvalidMarker: the marker is not one bounded regular file with a
	// valid schema.
	CodeInvalidMarker = "invalid_marker"
	// CodeRootKindMismatch: the marker kind differs from the requested kind.
	CodeRootKindMismatch = "root_kind_mismatch"
	// CodeRootIdentityCollision: the marker belongs to another directory (a
	// copied root) or, on import, to another root id.
	CodeRootIdentityCollision = "root_identity_collision"
	// CodeRootIdentityChanged: the root directory changed or vanished during
	// validation, or no longer has the expected root id.
	CodeRootIdentityChanged = "root_identity_changed"
	// CodeInvalidCapability: a capability not issued by this package, or of
	// the wrong kind.
	CodeInvalidCapability = "invalid_capability"
	// CodeInvalidLease: a lease of a closed owner or reader.
	CodeInvalidLease = "invalid_lease"
	// CodeInvalidOwner: an owner not issued by this package.
	CodeInvalidOwner = "invalid_owner"
	// CodeInvalidLockArtifact: owner.lock is not the same stable regular file
	// as the opened handle.
	CodeInvalidLockArtifact = "invalid_lock_artifact"
	// CodeInsecureControlDirectory: a control path is not a private directory
	// of the current user.
	CodeInsecureControlDirectory = "insecure_control_directory"
	// CodeRootIOFailed wraps unexpected errors in root resolution and
	// validation.
	CodeRootIOFailed = "root_io_failed"
	// CodeControlIOFailed wraps unexpected errors resolving the control
	// namespace or preparing the control directory.
	CodeControlIOFailed = "control_io_failed"
	// CodeLockFailed wraps unexpected errors acquiring or releasing the lock.
	CodeLockFailed = "lock_failed"
)

// Error is a storage root authority failure. Err holds the cause.
type Error struct {
	Code string
	Err  error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return "storage root: " + e.Code
	}
	return "storage root: " + e.Code + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the code of the first *Error in err's chain, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func newError(code, format string, args ...any) *Error {
	return &Error{Code: code, Err: fmt.Errorf(format, args...)}
}

// wrap passes authority errors through unchanged and wraps anything else
// with code.
func wrap(code string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Code: code, Err: err}
}
