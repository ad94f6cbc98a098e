// Package storageroot is the storage root authority: it creates, discovers
// and validates marked storage roots, prepares their private control
// directories and arbitrates interactive roots through owner.lock.
//
// A storage root is a directory holding a marker file
// (.maka-storage-root.json) that names a durable random root id and binds it
// to the directory's (st_dev, st_ino). A marker found in a different
// directory than the one it was created in reveals a copied root.
package storageroot

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Kind is the kind of a storage root.
type Kind string

// Storage root kinds.
const (
	KindInteractive Kind = "interactive"
	KindHeadless    Kind = "headless"
)

func (k Kind) valid() bool { return k == KindInteractive || k == KindHeadless }

func validateKind(kind Kind) error {
	if !kind.valid() {
		return newError(CodeInvalidRootKind, "unknown storage root kind %q", string(kind))
	}
	return nil
}

// Capability is proof that a directory was validated as a marked storage
// root of a kind. Only this package creates capabilities; a zero or copied
// value is rejected with invalid_capability.
type Capability struct {
	self   *Capability
	kind   Kind
	path   string
	rootID string
	id     identity
	marker string // path of the marker file
	dev    string // id.dev in decimal
	ino    string // id.ino in decimal
}

func newCapability(kind Kind, path, rootID string, id identity) *Capability {
	c := &Capability{
		kind: kind, path: path, rootID: rootID, id: id,
		marker: markerPath(path), dev: id.devString(), ino: id.inoString(),
	}
	c.self = c
	return c
}

// Kind returns the root's kind.
func (c *Capability) Kind() Kind { return c.kind }

// Path returns the canonical root path (symlinks resolved).
func (c *Capability) Path() string { return c.path }

// RootID returns the durable root id (64 lowercase hex characters).
func (c *Capability) RootID() string { return c.rootID }

func (c *Capability) authentic() bool { return c != nil && c.self == c }

// requireCapability rejects capabilities not issued by this package and,
// when kind is not empty, capabilities of another kind.
func requireCapability(c *Capability, kind Kind) error {
	if !c.authentic() {
		return newError(CodeInvalidCapability, "storage root capability was not issued by the storage root authority")
	}
	if kind != "" && c.kind != kind {
		return newError(CodeInvalidCapability, "storage root capability is %s, not %s", c.kind, kind)
	}
	return nil
}

// Resolve opens the storage root at path, creating the directory (mode 0700)
// and its marker of kind when they do not exist yet. Symlink aliases of one
// directory resolve to one canonical path and one root id.
func Resolve(path string, kind Kind) (*Capability, error) {
	if err := validateKind(kind); err != nil {
		return nil, err
	}
	c, err := resolve(path, kind)
	return c, wrap(CodeRootIOFailed, err)
}

func resolve(path string, kind Kind) (*Capability, error) {
	requested, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(requested, 0o700); err != nil {
		var st unix.Stat_t
		if serr := stat(requested, &st); serr == nil && !isDir(&st) {
			return nil, newError(CodeInvalidRoot, "%s is not a directory", requested)
		}
		return nil, err
	}
	canonical, err := filepath.EvalSymlinks(requested)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := stat(canonical, &st); err != nil {
		return nil, err
	}
	if !isDir(&st) {
		return nil, newError(CodeInvalidRoot, "%s is not a directory", canonical)
	}
	id := identityOf(&st)
	m, err := confirmSnapshot(canonical, id, func() (marker, error) { return ensureMarker(canonical, kind, id) }, "", false, CodeRootIdentityCollision)
	if err != nil {
		return nil, err
	}
	return newCapability(kind, canonical, m.rootID, id), nil
}

// Discover opens the already marked storage root at path, whatever its kind.
// It never creates or modifies anything.
func Discover(path string) (*Capability, error) {
	c, err := discover(path)
	return c, wrap(CodeRootIOFailed, err)
}

func discover(path string) (*Capability, error) {
	canonical, id, err := resolveExistingPath(path)
	if err != nil {
		return nil, err
	}
	m, err := confirmSnapshot(canonical, id, func() (marker, error) { return readMarker(canonical) }, "", false, CodeRootIdentityCollision)
	if err != nil {
		return nil, err
	}
	return newCapability(m.kind, canonical, m.rootID, id), nil
}

// ResolveExisting opens the marked storage root at path, requiring its kind
// and root id. It never creates a marker: an empty directory that replaced
// the root yields root_unmarked.
func ResolveExisting(path string, kind Kind, expectedRootID string) (*Capability, error) {
	if err := validateKind(kind); err != nil {
		return nil, err
	}
	c, err := resolveExisting(path, kind, expectedRootID)
	return c, wrap(CodeRootIOFailed, err)
}

func resolveExisting(path string, kind Kind, expectedRootID string) (*Capability, error) {
	canonical, id, err := resolveExistingPath(path)
	if err != nil {
		return nil, err
	}
	m, err := confirmSnapshot(canonical, id, func() (marker, error) { return readMarkerOfKind(canonical, kind) }, expectedRootID, true, CodeRootIdentityChanged)
	if err != nil {
		return nil, err
	}
	return newCapability(kind, canonical, m.rootID, id), nil
}

// assertRoot is the full root identity assertion: snapshot confirmation with
// a kind-checked marker read and the capability's root id.
func assertRoot(c *Capability) error {
	_, err := confirmSnapshot(c.path, c.id, func() (marker, error) { return readMarkerOfKind(c.path, c.kind) }, c.rootID, true, CodeRootIdentityChanged)
	return wrap(CodeRootIOFailed, err)
}

// assertRootQuick is assertRoot with a single directory stat taken after
// the marker read. A directory replaced before or during the read is still
// detected, and a changed identity still wins over a marker error. Marker
// contents equal to the last contents that validated (kept in cache) are
// not decoded again.
func assertRootQuick(c *Capability, cache *markerCache) error {
	var buf [MaxMarkerBytes + 1]byte
	data, err := readMarkerBytes(c.marker, buf[:])
	known := false
	var m marker
	if err == nil {
		if known = cache.holds(data); !known {
			m, err = decodeMarker(data)
			if err == nil && m.kind != c.kind {
				err = newError(CodeRootKindMismatch, "root %s is %s, not %s", c.path, m.kind, c.kind)
			}
		}
	}
	ierr := checkPathIdentity(c.path, c.id)
	var e *Error
	switch {
	case ierr != nil && (err == nil || errors.As(ierr, &e)):
		return wrap(CodeRootIOFailed, ierr)
	case err != nil:
		return wrap(CodeRootIOFailed, err)
	case known:
		return nil
	}
	if m.rootID != c.rootID || m.dev != c.dev || m.ino != c.ino {
		return newError(CodeRootIdentityChanged, "root %s no longer carries root id %s for this directory", c.path, c.rootID)
	}
	cache.store(data)
	return nil
}

// markerCache remembers the last marker contents that validated for a
// capability. A nil cache holds nothing.
type markerCache struct {
	mu   sync.Mutex
	data []byte
}

func (mc *markerCache) holds(data []byte) bool {
	if mc == nil {
		return false
	}
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.data != nil && bytes.Equal(mc.data, data)
}

func (mc *markerCache) store(data []byte) {
	if mc == nil {
		return
	}
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if !bytes.Equal(mc.data, data) {
		mc.data = bytes.Clone(data)
	}
}

// resolveExistingPath canonicalizes an existing directory path.
func resolveExistingPath(path string) (string, identity, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", identity{}, err
	}
	canonical, err := filepath.EvalSymlinks(abs)
	if err != nil {
		if isMissing(err) {
			return "", identity{}, &Error{Code: CodeRootNotFound, Err: err}
		}
		return "", identity{}, err
	}
	var st unix.Stat_t
	if err := stat(canonical, &st); err != nil {
		if isMissing(err) {
			return "", identity{}, &Error{Code: CodeRootNotFound, Err: err}
		}
		return "", identity{}, err
	}
	if !isDir(&st) {
		return "", identity{}, newError(CodeInvalidRoot, "%s is not a directory", canonical)
	}
	return canonical, identityOf(&st), nil
}

// checkPathIdentity requires path to still be the directory id. A vanished
// path is a mismatch; other stat errors are returned as they are.
func checkPathIdentity(path string, id identity) error {
	var st unix.Stat_t
	if err := stat(path, &st); err != nil {
		if isMissing(err) {
			return &Error{Code: CodeRootIdentityChanged, Err: err}
		}
		return err
	}
	if !isDir(&st) || identityOf(&st) != id {
		return newError(CodeRootIdentityChanged, "%s is no longer the validated root directory", path)
	}
	return nil
}

// confirmSnapshot reads the marker between two path identity checks and
// requires it to describe the remembered directory (and expectedRootID when
// checkExpected is set); a mismatch is reported with mismatchCode.
func confirmSnapshot(path string, id identity, read func() (marker, error), expectedRootID string, checkExpected bool, mismatchCode string) (marker, error) {
	if err := checkPathIdentity(path, id); err != nil {
		return marker{}, err
	}
	m, err := read()
	if err != nil {
		if ierr := checkPathIdentity(path, id); ierr != nil {
			var e *Error
			if errors.As(ierr, &e) {
				return marker{}, ierr
			}
		}
		return marker{}, err
	}
	if err := checkPathIdentity(path, id); err != nil {
		return marker{}, err
	}
	if checkExpected && m.rootID != expectedRootID {
		return marker{}, newError(mismatchCode, "root %s has id %s, not the expected id", path, m.rootID)
	}
	if !m.matches(id) {
		return marker{}, newError(mismatchCode, "marker of %s describes another directory (dev %s, ino %s)", path, m.dev, m.ino)
	}
	return m, nil
}
