package tools

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// binarySniffLen is how much of a file is inspected for NUL bytes.
const binarySniffLen = 8 << 10

// pathLocks serialises writers of the same file across sessions. Entries
// are reference counted and removed when no caller holds or waits for them,
// so the map stays bounded by the number of files in use.
var pathLocks = struct {
	sync.Mutex
	m map[string]*pathLock
}{m: map[string]*pathLock{}}

type pathLock struct {
	mu   sync.Mutex
	refs int
}

// lockPath locks the file at path (an absolute real path) and returns the
// function that unlocks it.
func lockPath(path string) (unlock func()) {
	pathLocks.Lock()
	l := pathLocks.m[path]
	if l == nil {
		l = &pathLock{}
		pathLocks.m[path] = l
	}
	l.refs++
	pathLocks.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		pathLocks.Lock()
		l.refs--
		if l.refs == 0 {
			delete(pathLocks.m, path)
		}
		pathLocks.Unlock()
	}
}

// pathLockCount reports how many files currently have a lock entry.
func pathLockCount() int {
	pathLocks.Lock()
	defer pathLocks.Unlock()
	return len(pathLocks.m)
}

// writeFileAtomic replaces path with data: it writes a temporary file in
// the same directory, syncs it, renames it over path and syncs the
// directory. An existing file keeps its permission bits; a new one gets
// 0644.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	mode := fs.FileMode(0o644)
	if fi, statErr := os.Stat(path); statErr == nil {
		mode = fi.Mode().Perm()
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Chmod(mode); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, openErr := os.Open(dir); openErr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// isBinary reports whether data (the start of a file) holds a NUL byte in
// its first binarySniffLen bytes.
func isBinary(data []byte) bool {
	if len(data) > binarySniffLen {
		data = data[:binarySniffLen]
	}
	return bytes.IndexByte(data, 0) >= 0
}

// sniffBinary reports whether the file at path looks binary.
func sniffBinary(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	buf := make([]byte, binarySniffLen)
	n, err := io.ReadFull(f, buf)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return false, err
	}
	return isBinary(buf[:n]), nil
}
