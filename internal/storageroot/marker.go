package storageroot

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/protocol"
)

// Marker constants.
const (
	// MarkerFile is the marker's name directly inside the root directory.
	MarkerFile = ".maka-storage-root.json"
	// MarkerSchemaVersion is the only marker schema version.
	MarkerSchemaVersion = 1
	// MaxMarkerBytes bounds the marker file size.
	MaxMarkerBytes = 1024
)

var (
	rootIDPattern  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-f0-9]{64}$`) })
	decimalPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]+$`) })
)

// IsRootID reports whether s is a well-formed root id (64 lowercase hex).
func IsRootID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// marker is the decoded marker file.
type marker struct {
	kind   Kind
	rootID string
	dev    string
	ino    string
}

func (m marker) matches(id identity) bool {
	return m.dev == id.devString() && m.ino == id.inoString()
}

// encode returns the marker bytes: compact JSON in a fixed key order and a
// trailing newline.
func (m marker) encode() []byte {
	b := make([]byte, 0, 192)
	b = append(b, `{"schemaVersion":`...)
	b = strconv.AppendInt(b, MarkerSchemaVersion, 10)
	b = append(b, `,"kind":`...)
	b = strconv.AppendQuote(b, string(m.kind))
	b = append(b, `,"rootId":`...)
	b = strconv.AppendQuote(b, m.rootID)
	b = append(b, `,"rootIdentity":{"dev":`...)
	b = strconv.AppendQuote(b, m.dev)
	b = append(b, `,"ino":`...)
	b = strconv.AppendQuote(b, m.ino)
	b = append(b, "}}\n"...)
	return b
}

// decodeMarker validates marker JSON. Unknown keys are tolerated.
func decodeMarker(data []byte) (marker, error) {
	v, err := protocol.Parse(data)
	if err != nil {
		return marker{}, &Error{Code: CodeInvalidMarker, Err: err}
	}
	var d protocol.D
	o := d.Open(v, "marker")
	var m marker
	if sv, p := o.Get("schemaVersion"); !d.Failed() && (sv.Kind() != protocol.KindNumber || sv.Number() != MarkerSchemaVersion) {
		d.Fail(p, "must be %d", MarkerSchemaVersion)
	}
	m.kind = Kind(o.Enum("kind", string(KindInteractive), string(KindHeadless)))
	rid, p := o.Get("rootId")
	m.rootID = d.Pattern(rid, p, rootIDPattern())
	ridv, p := o.Get("rootIdentity")
	ri := d.Open(ridv, p)
	dev, p := ri.Get("dev")
	m.dev = d.Pattern(dev, p, decimalPattern())
	ino, p := ri.Get("ino")
	m.ino = d.Pattern(ino, p, decimalPattern())
	if err := d.Err(); err != nil {
		return marker{}, &Error{Code: CodeInvalidMarker, Err: err}
	}
	return m, nil
}

func markerPath(root string) string { return filepath.Join(root, MarkerFile) }

// readMarker reads and validates the marker of root as one bounded regular
// file; it never blocks on FIFOs and never follows a symlinked marker.
func readMarker(root string) (marker, error) {
	var buf [MaxMarkerBytes + 1]byte
	data, err := readMarkerBytes(markerPath(root), buf[:])
	if err != nil {
		return marker{}, err
	}
	return decodeMarker(data)
}

// readMarkerBytes reads the marker file at path into buf, which must hold
// MaxMarkerBytes+1 bytes, and returns the contents.
func readMarkerBytes(path string, buf []byte) ([]byte, error) {
	fd, err := open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil, &Error{Code: CodeRootUnmarked, Err: err}
		case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENXIO):
			return nil, &Error{Code: CodeInvalidMarker, Err: err}
		}
		return nil, err
	}
	defer unix.Close(fd)
	var fst, lst unix.Stat_t
	if err := fstat(fd, path, &fst); err != nil {
		return nil, err
	}
	if err := lstat(path, &lst); err != nil {
		if isMissing(err) {
			return nil, &Error{Code: CodeInvalidMarker, Err: err}
		}
		return nil, err
	}
	if !isRegular(&fst) || !isRegular(&lst) || identityOf(&fst) != identityOf(&lst) {
		return nil, newError(CodeInvalidMarker, "%s is not one stable regular file", path)
	}
	if fst.Size > MaxMarkerBytes {
		return nil, newError(CodeInvalidMarker, "%s is %d bytes, more than %d", path, fst.Size, MaxMarkerBytes)
	}
	n := 0
	for n < len(buf) {
		want := len(buf) - n
		var k int
		err := retryEINTR(func() error {
			var err error
			k, err = unix.Read(fd, buf[n:])
			return err
		})
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		n += k
		if k < want { // a short read of a regular file ends at end of file
			break
		}
	}
	if n > MaxMarkerBytes {
		return nil, newError(CodeInvalidMarker, "%s grew beyond %d bytes", path, MaxMarkerBytes)
	}
	return buf[:n], nil
}

// readMarkerOfKind reads the marker and requires its kind.
func readMarkerOfKind(root string, kind Kind) (marker, error) {
	m, err := readMarker(root)
	if err != nil {
		return m, err
	}
	if m.kind != kind {
		return marker{}, newError(CodeRootKindMismatch, "root %s is %s, not %s", root, m.kind, kind)
	}
	return m, nil
}

// publishMarker atomically publishes contents as the marker of root. An
// existing marker wins and published is false.
func publishMarker(root string, contents []byte, prePublish func() error) (published bool, err error) {
	if len(contents) > MaxMarkerBytes {
		return false, newError(CodeInvalidMarker, "marker of %d bytes exceeds %d", len(contents), MaxMarkerBytes)
	}
	target := markerPath(root)
	tmp := target + "." + strconv.Itoa(os.Getpid()) + "." + uuid.NewString() + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_TRUNC, 0o600)
	if err != nil {
		return false, err
	}
	defer func() {
		if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
			err = rerr
		}
	}()
	_, werr := f.Write(contents)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return false, werr
	}
	if prePublish != nil {
		if err := prePublish(); err != nil {
			return false, err
		}
	}
	if err := os.Link(tmp, target); err != nil {
		if errors.Is(err, os.ErrExist) {
			return false, nil
		}
		return false, err
	}
	if err := syncDir(root); err != nil {
		return false, err
	}
	return true, nil
}

// ensureMarker returns the marker of root, creating one of kind for the
// directory identity id when none exists. A concurrent creator's marker wins.
func ensureMarker(root string, kind Kind, id identity) (marker, error) {
	var st unix.Stat_t
	err := lstat(markerPath(root), &st)
	if err == nil {
		return readMarkerOfKind(root, kind)
	}
	if !errors.Is(err, unix.ENOENT) {
		return marker{}, err
	}
	rootID, err := newRootID()
	if err != nil {
		return marker{}, err
	}
	m := marker{kind: kind, rootID: rootID, dev: id.devString(), ino: id.inoString()}
	if _, err := publishMarker(root, m.encode(), func() error { return checkPathIdentity(root, id) }); err != nil {
		return marker{}, err
	}
	return readMarkerOfKind(root, kind)
}

func newRootID() (string, error) {
	var b [32]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
