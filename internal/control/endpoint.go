// Package control implements the Runtime Host control plane on disk: the
// private socket endpoint under /tmp and the registration file in a storage
// root's control directory, through which clients discover a running host.
package control

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/internal/storageroot"
)

// Endpoint constants.
const (
	// EndpointRoot is the directory that holds endpoint directories. It is
	// the literal /tmp, not $TMPDIR, so that every process of a user finds
	// the same place.
	EndpointRoot = "/tmp"
	// SocketName is the socket's name inside an endpoint directory.
	SocketName = "h.sock"
	// MaxEndpointPathBytes bounds the socket path (portable sun_path limit).
	MaxEndpointPathBytes = 100
	// endpointSuffixLen is the number of random characters that end an
	// endpoint directory name.
	endpointSuffixLen = 6
)

// Endpoint error codes.
const (
	CodeInsecureEndpointDirectory = "insecure_endpoint_directory"
	CodeEndpointPathTooLong       = "endpoint_path_too_long"
)

// EndpointError is an endpoint preparation failure.
type EndpointError struct {
	Code string
	Err  error
}

func (e *EndpointError) Error() string {
	if e.Err == nil {
		return "runtime host endpoint: " + e.Code
	}
	return "runtime host endpoint: " + e.Code + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *EndpointError) Unwrap() error { return e.Err }

func endpointError(code, format string, args ...any) *EndpointError {
	return &EndpointError{Code: code, Err: fmt.Errorf(format, args...)}
}

// Endpoint is a private directory /tmp/m-<uid>-<rootTag>-<XXXXXX> that holds
// the host's socket h.sock.
type Endpoint struct {
	dir  string
	path string
	uid  int
}

// EndpointPrefix returns the endpoint directory name prefix
// m-<uid>-<rootTag>- for a root id, where rootTag is the unpadded base64url
// form of the root id's 32 bytes.
func EndpointPrefix(rootID string, uid int) (string, error) {
	if uid < 0 {
		return "", endpointError(CodeInsecureEndpointDirectory, "no numeric user id on this platform")
	}
	return endpointPrefix(rootID, strconv.Itoa(uid))
}

func endpointPrefix(rootID, uid string) (string, error) {
	if !storageroot.IsRootID(rootID) {
		return "", endpointError(CodeInsecureEndpointDirectory, "malformed root id %q", rootID)
	}
	raw, err := hex.DecodeString(rootID)
	if err != nil {
		return "", endpointError(CodeInsecureEndpointDirectory, "malformed root id %q", rootID)
	}
	return "m-" + uid + "-" + base64.RawURLEncoding.EncodeToString(raw) + "-", nil
}

// PrepareEndpoint creates a fresh private endpoint directory for the root.
// Endpoint directories of the same root and user left behind by dead hosts
// are removed first, so it must only be called while holding the root's
// exclusive owner lock.
func PrepareEndpoint(rootID string) (*Endpoint, error) {
	return prepareEndpointIn(EndpointRoot, rootID, os.Getuid())
}

func prepareEndpointIn(base, rootID string, uid int) (*Endpoint, error) {
	prefix, err := EndpointPrefix(rootID, uid)
	if err != nil {
		return nil, err
	}
	if err := sweepStaleEndpoints(base, prefix, uid); err != nil {
		return nil, err
	}
	dir, err := makeEndpointDir(base, prefix)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, SocketName)
	err = securePrivateDir(dir, uid)
	if err == nil {
		err = checkEndpointPathLength(path)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &Endpoint{dir: dir, path: path, uid: uid}, nil
}

// sweepStaleEndpoints removes directories of base named prefix plus six
// characters that are owned by uid. Symlinks and other files are left alone.
func sweepStaleEndpoints(base, prefix string, uid int) error {
	entries, err := os.ReadDir(base)
	if err != nil {
		return fmt.Errorf("list %s: %w", base, err)
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || e.Type()&os.ModeSymlink != 0 || !strings.HasPrefix(name, prefix) || len(name) != len(prefix)+endpointSuffixLen {
			continue
		}
		path := filepath.Join(base, name)
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return &os.PathError{Op: "lstat", Path: path, Err: err}
		}
		if uint32(st.Mode)&unix.S_IFMT != unix.S_IFDIR || int64(st.Uid) != int64(uid) {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("remove stale endpoint: %w", err)
		}
	}
	return nil
}

const suffixAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// randomSuffix returns endpointSuffixLen uniformly random [A-Za-z0-9]
// characters.
func randomSuffix() string {
	out := make([]byte, 0, endpointSuffixLen)
	var buf [16]byte
	for len(out) < endpointSuffixLen {
		_, _ = rand.Read(buf[:]) // never fails
		for _, b := range buf {
			// 248 = 4*62: rejecting larger bytes keeps the choice uniform
			if b < 248 && len(out) < endpointSuffixLen {
				out = append(out, suffixAlphabet[int(b)%len(suffixAlphabet)])
			}
		}
	}
	return string(out)
}

// makeEndpointDir creates base/prefix+XXXXXX with mode 0700, like mkdtemp.
func makeEndpointDir(base, prefix string) (string, error) {
	var err error
	for range 100 {
		dir := filepath.Join(base, prefix+randomSuffix())
		if err = os.Mkdir(dir, 0o700); err == nil {
			return dir, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
	return "", err
}

// securePrivateDir forces mode 0700 and requires dir to be a directory owned
// by uid without group or other permissions.
func securePrivateDir(dir string, uid int) error {
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	return checkPrivate(dir, uid, unix.S_IFDIR, "directory")
}

func checkPrivate(path string, uid int, fileType uint32, what string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return &EndpointError{Code: CodeInsecureEndpointDirectory, Err: &os.PathError{Op: "lstat", Path: path, Err: err}}
	}
	switch {
	case uint32(st.Mode)&unix.S_IFMT != fileType:
		return endpointError(CodeInsecureEndpointDirectory, "%s is not a %s", path, what)
	case int64(st.Uid) != int64(uid):
		return endpointError(CodeInsecureEndpointDirectory, "%s is owned by uid %d, not %d", path, st.Uid, uid)
	case st.Mode&0o077 != 0:
		return endpointError(CodeInsecureEndpointDirectory, "%s has mode %#o", path, st.Mode&0o777)
	}
	return nil
}

// checkEndpointPathLength enforces the portable socket path limit.
func checkEndpointPathLength(path string) error {
	if len(path) > MaxEndpointPathBytes {
		return endpointError(CodeEndpointPathTooLong, "socket path %s is %d bytes, more than %d", path, len(path), MaxEndpointPathBytes)
	}
	return nil
}

// Path returns the socket path <dir>/h.sock.
func (e *Endpoint) Path() string { return e.path }

// Dir returns the endpoint directory.
func (e *Endpoint) Dir() string { return e.dir }

// Listen listens on the socket path, restricts the socket to mode 0600 and
// verifies it. Closing the listener leaves the socket file in place;
// Cleanup removes it.
func (e *Endpoint) Listen() (*net.UnixListener, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: e.path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(false)
	if err := e.prepareAfterListen(); err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

func (e *Endpoint) prepareAfterListen() error {
	if err := os.Chmod(e.path, 0o600); err != nil {
		return &EndpointError{Code: CodeInsecureEndpointDirectory, Err: err}
	}
	return checkPrivate(e.path, e.uid, unix.S_IFSOCK, "socket")
}

// Cleanup removes the socket and the endpoint directory; either being gone
// already is not an error.
func (e *Endpoint) Cleanup() error {
	if err := unix.Unlink(e.path); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "unlink", Path: e.path, Err: err}
	}
	if err := unix.Rmdir(e.dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "rmdir", Path: e.dir, Err: err}
	}
	return nil
}
