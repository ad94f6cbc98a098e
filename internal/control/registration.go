package control

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/protocol"
)

// Registration file constants.
const (
	// RegistrationFile is the registration's name in a control directory.
	RegistrationFile = "registration.json"
	// RegistrationKind is the registration's kind field.
	RegistrationKind = "maka-runtime-host"
	// RegistrationSchemaVersion is the only registration schema version.
	RegistrationSchemaVersion = 1
	// MaxRegistrationBytes bounds the registration file size.
	MaxRegistrationBytes = 16 * 1024
)

// Registration error codes.
const (
	CodeInvalidRegistration  = "invalid_registration"
	CodeRegistrationIOFailed = "registration_io_failed"
)

// RegistrationError is a registration read or write failure.
type RegistrationError struct {
	Code string
	Err  error
}

func (e *RegistrationError) Error() string {
	if e.Err == nil {
		return "runtime host registration: " + e.Code
	}
	return "runtime host registration: " + e.Code + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *RegistrationError) Unwrap() error { return e.Err }

// Registration is the content of registration.json: how to reach the host
// that owns a storage root. The field order is the file's key order.
type Registration struct {
	Kind          string             `json:"kind"`
	SchemaVersion int                `json:"schemaVersion"`
	RootID        string             `json:"rootId"`
	HostEpoch     string             `json:"hostEpoch"`
	Endpoint      string             `json:"endpoint"`
	ProtocolMin   int64              `json:"protocolMin"`
	ProtocolMax   int64              `json:"protocolMax"`
	State         protocol.HostState `json:"state"`
	PID           int64              `json:"pid"`
	CreatedAt     string             `json:"createdAt"`
}

var registrationStates = []string{
	string(protocol.StateStarting),
	string(protocol.StateContaining),
	string(protocol.StateRecovering),
	string(protocol.StateReady),
	string(protocol.StateDraining),
}

// DecodeRegistration parses and validates registration JSON. Unknown keys
// are ignored; string lengths are counted in UTF-16 code units.
func DecodeRegistration(data []byte) (Registration, error) {
	v, err := protocol.Parse(data)
	if err != nil {
		return Registration{}, &RegistrationError{Code: CodeInvalidRegistration, Err: err}
	}
	var d protocol.D
	o := d.Open(v, "registration")
	var r Registration
	o.Literal("kind", RegistrationKind)
	r.Kind = RegistrationKind
	r.SchemaVersion = int(o.SafeInt("schemaVersion", RegistrationSchemaVersion, RegistrationSchemaVersion))
	r.RootID = o.String("rootId", 1, 128)
	if !d.Failed() && !storageroot.IsRootID(r.RootID) {
		d.Fail("registration.rootId", "not a root id")
	}
	r.HostEpoch = o.String("hostEpoch", 1, 128)
	r.Endpoint = o.String("endpoint", 1, 512)
	r.ProtocolMin = o.Count("protocolMin")
	r.ProtocolMax = o.Count("protocolMax")
	if !d.Failed() && r.ProtocolMin > r.ProtocolMax {
		d.Fail("registration.protocolMax", "%d is less than protocolMin %d", r.ProtocolMax, r.ProtocolMin)
	}
	r.State = protocol.HostState(o.Enum("state", registrationStates...))
	r.PID = o.PosCount("pid")
	r.CreatedAt = o.String("createdAt", 1, 64)
	if err := d.Err(); err != nil {
		return Registration{}, &RegistrationError{Code: CodeInvalidRegistration, Err: err}
	}
	return r, nil
}

// encodeRegistration validates reg and returns its file contents: compact
// JSON and a trailing newline.
func encodeRegistration(reg Registration) ([]byte, error) {
	data, err := protocol.Marshal(reg)
	if err != nil {
		return nil, &RegistrationError{Code: CodeInvalidRegistration, Err: err}
	}
	if _, err := DecodeRegistration(data); err != nil {
		return nil, err
	}
	if len(data)+1 > MaxRegistrationBytes {
		return nil, &RegistrationError{Code: CodeInvalidRegistration, Err: fmt.Errorf("registration of %d bytes exceeds %d", len(data)+1, MaxRegistrationBytes)}
	}
	return append(data, '\n'), nil
}

func ioFailed(err error) error {
	return &RegistrationError{Code: CodeRegistrationIOFailed, Err: err}
}

func invalid(format string, args ...any) error {
	return &RegistrationError{Code: CodeInvalidRegistration, Err: fmt.Errorf(format, args...)}
}

// ReadRegistration reads the registration of a control directory. found is
// false when there is none.
func ReadRegistration(controlDir string) (reg Registration, found bool, err error) {
	path := filepath.Join(controlDir, RegistrationFile)
	fi, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Registration{}, false, nil
		}
		return Registration{}, false, ioFailed(err)
	}
	if !fi.Mode().IsRegular() {
		return Registration{}, false, invalid("%s is not a regular file (%v)", path, fi.Mode().Type())
	}
	if fi.Size() > MaxRegistrationBytes {
		return Registration{}, false, invalid("%s is %d bytes, more than %d", path, fi.Size(), MaxRegistrationBytes)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		switch {
		case errors.Is(err, os.ErrNotExist):
			return Registration{}, false, nil
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENXIO):
			return Registration{}, false, invalid("%s is not a regular file: %v", path, err)
		}
		return Registration{}, false, ioFailed(err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return Registration{}, false, ioFailed(err)
	}
	if !fi.Mode().IsRegular() {
		return Registration{}, false, invalid("%s is not a regular file (%v)", path, fi.Mode().Type())
	}
	// Only this account's host writes a registration, 0600.
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return Registration{}, false, invalid("%s is not owned by this user", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return Registration{}, false, invalid("%s has mode %#o, want no group or other bits", path, perm)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxRegistrationBytes+1))
	if err != nil {
		return Registration{}, false, ioFailed(err)
	}
	if len(data) > MaxRegistrationBytes {
		return Registration{}, false, invalid("%s is more than %d bytes", path, MaxRegistrationBytes)
	}
	reg, err = DecodeRegistration(data)
	if err != nil {
		return Registration{}, false, err
	}
	return reg, true, nil
}

// WriteRegistration validates reg and atomically replaces the registration
// of a control directory with it (mode 0600).
func WriteRegistration(controlDir string, reg Registration) error {
	data, err := encodeRegistration(reg)
	if err != nil {
		return err
	}
	path := filepath.Join(controlDir, RegistrationFile)
	tmp := path + "." + strconv.Itoa(os.Getpid()) + "." + uuid.NewString() + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return ioFailed(err)
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = os.Remove(tmp)
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return ioFailed(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return ioFailed(err)
	}
	renamed = true
	_ = os.Chmod(path, 0o600)
	syncDir(controlDir)
	return nil
}

// RemoveRegistration removes the registration of a control directory if it
// still names hostEpoch: a successor's registration is never removed. A
// registration that cannot be read is left alone.
func RemoveRegistration(controlDir, hostEpoch string) error {
	reg, found, err := ReadRegistration(controlDir)
	if err != nil || !found || reg.HostEpoch != hostEpoch {
		return nil
	}
	if err := os.Remove(filepath.Join(controlDir, RegistrationFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return ioFailed(err)
	}
	syncDir(controlDir)
	return nil
}

// syncDir makes renames and removals in dir durable, best effort.
func syncDir(dir string) {
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = f.Sync()
	_ = f.Close()
}
