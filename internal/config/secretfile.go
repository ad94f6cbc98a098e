package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/protocol"
)

// secretFileMaxBytes bounds the secret file read at open (2048 secrets of
// 10 KiB, JSON-escaped, with their keys).
const secretFileMaxBytes = 128 << 20

// SecretFile keeps credential secrets in one file of mode 0600 owned by the
// current user: a JSON object mapping LocatorKey(locator) to the secret. It
// is rewritten atomically (temporary file, fsync, rename, fsync of the
// directory). Errors never contain a secret.
type SecretFile struct {
	path    string
	writeMu sync.Mutex // serializes rewrites

	mu      sync.RWMutex
	secrets map[string]string
}

// OpenSecretFile opens the secret file at path, creating an empty one if it
// does not exist. It refuses a file that is not a regular file (symbolic
// links included), whose permissions are not exactly 0600, that another user
// owns, or whose content is not a JSON object of strings.
func OpenSecretFile(path string) (*SecretFile, error) {
	s := &SecretFile{path: path, secrets: map[string]string{}}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		if err := writeFileAtomic(path, []byte("{}")); err != nil {
			return nil, fmt.Errorf("config: create secret file: %w", err)
		}
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: open secret file: %w", err)
	}
	defer f.Close()
	if err := checkSecretFile(f); err != nil {
		return nil, fmt.Errorf("config: secret file %s: %w", path, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, secretFileMaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: read secret file: %w", err)
	}
	if len(data) > secretFileMaxBytes {
		return nil, fmt.Errorf("config: secret file %s is larger than %d bytes", path, secretFileMaxBytes)
	}
	m, ok := decodeSecrets(data)
	if !ok {
		// The parser's message could quote the content; it is not passed on.
		return nil, fmt.Errorf("config: secret file %s is not a JSON object of strings", path)
	}
	s.secrets = m
	return s, nil
}

// checkSecretFile checks the type, mode and owner of an open file.
func checkSecretFile(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.New("not a regular file")
	}
	if perm := st.Mode & 0o7777; perm != 0o600 {
		return fmt.Errorf("mode %04o, want 0600", perm)
	}
	if uid := uint32(os.Geteuid()); st.Uid != uid {
		return fmt.Errorf("owned by uid %d, not %d", st.Uid, uid)
	}
	return nil
}

func decodeSecrets(data []byte) (map[string]string, bool) {
	v, err := protocol.Parse(data)
	if err != nil || v.Kind() != protocol.KindObject {
		return nil, false
	}
	m := make(map[string]string, len(v.Members()))
	for _, mem := range v.Members() {
		if mem.Key == "" || mem.Value.Kind() != protocol.KindString {
			return nil, false
		}
		m[mem.Key] = mem.Value.Str()
	}
	return m, true
}

// Path returns the file's path.
func (s *SecretFile) Path() string { return s.path }

// Get returns the secret stored for a locator. It is for the runtime's use
// only; no operation result ever carries a secret.
func (s *SecretFile) Get(l protocol.CredentialLocator) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.secrets[LocatorKey(l)]
	return v, ok
}

// Values returns every stored secret value, for the redactor of tool
// results (tools.AddKnownSecrets).
func (s *SecretFile) Values() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.secrets))
	for _, v := range s.secrets {
		out = append(out, v)
	}
	return out
}

// snapshot returns a copy of the stored secrets.
func (s *SecretFile) snapshot() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.secrets)
}

// ExternalPrefix begins the keys of the secrets other packages keep in
// the file (SetPrefixed): the vault's own rewrites never change them.
const ExternalPrefix = "ext/"

// replace rewrites the file with the vault's secrets m (keys with
// ExternalPrefix in m are ignored; the current ones are kept), then makes
// the result current.
func (s *SecretFile) replace(m map[string]string) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	next := make(map[string]string, len(m))
	for k, v := range m {
		if !strings.HasPrefix(k, ExternalPrefix) {
			next[k] = v
		}
	}
	for k, v := range s.snapshot() {
		if strings.HasPrefix(k, ExternalPrefix) {
			next[k] = v
		}
	}
	return s.writeLocked(next)
}

// SetPrefixed replaces, in one atomic rewrite, every secret whose key
// starts with prefix (which must start with ExternalPrefix) by m, whose
// keys must all start with prefix. Other secrets are kept.
func (s *SecretFile) SetPrefixed(prefix string, m map[string]string) error {
	if !strings.HasPrefix(prefix, ExternalPrefix) || len(prefix) <= len(ExternalPrefix) {
		return fmt.Errorf("config: secret prefix %q does not start with %q", prefix, ExternalPrefix)
	}
	for k := range m {
		if !strings.HasPrefix(k, prefix) {
			return fmt.Errorf("config: secret key outside its prefix %q", prefix)
		}
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	next := s.snapshot()
	for k := range next {
		if strings.HasPrefix(k, prefix) {
			delete(next, k)
		}
	}
	maps.Copy(next, m)
	return s.writeLocked(next)
}

// GetKey returns the secret stored under key (a key of SetPrefixed).
func (s *SecretFile) GetKey(key string) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.secrets[key]
	return v, ok
}

// writeLocked rewrites the file with exactly m and makes m current; the
// caller holds writeMu.
func (s *SecretFile) writeLocked(m map[string]string) error {
	data, err := protocol.Marshal(m)
	if err != nil {
		return errors.New("cannot encode secrets")
	}
	if err := writeFileAtomic(s.path, data); err != nil {
		return err
	}
	m = maps.Clone(m)
	s.mu.Lock()
	s.secrets = m
	s.mu.Unlock()
	return nil
}

// writeFileAtomic replaces path with data: a 0600 temporary file in the same
// directory is written and synced, renamed over path, and the directory is
// synced.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmpName := tmp.Name()
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmpName)
		}
	}()
	if err = tmp.Chmod(0o600); err != nil {
		return err
	}
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmpName, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
