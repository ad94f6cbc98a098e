package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
)

// binarySniffLen is how much of a file is inspected for NUL bytes.
const binarySniffLen = 8 << 10

// FileScanMaxBytes bounds how much of one file Read and Grep go through:
// a file that keeps growing (or is larger) is read up to here.
const FileScanMaxBytes = 16 << 20

// errIsDir reports a directory where a file was expected.
var errIsDir = errors.New("is a directory")

// notRegularError reports a path that is neither a regular file nor a
// directory: reading a named pipe or a device could block for ever or
// never end, so file tools refuse them.
type notRegularError struct{ mode fs.FileMode }

func (e *notRegularError) Error() string {
	what := "special file"
	switch {
	case e.mode&fs.ModeNamedPipe != 0:
		what = "named pipe (FIFO)"
	case e.mode&fs.ModeSocket != 0:
		what = "socket"
	case e.mode&fs.ModeCharDevice != 0:
		what = "character device"
	case e.mode&fs.ModeDevice != 0:
		what = "device"
	case e.mode&fs.ModeSymlink != 0:
		what = "symlink"
	}
	return fmt.Sprintf("not a regular file: it is a %s", what)
}

// checkRegular returns nil for a regular file's mode, errIsDir for a
// directory and a *notRegularError for anything else.
func checkRegular(mode fs.FileMode) error {
	switch {
	case mode.IsRegular():
		return nil
	case mode.IsDir():
		return errIsDir
	}
	return &notRegularError{mode: mode}
}

// ctxReader reads r until ctx ends; a read after that fails with the
// context's error.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// readAllMax reads the whole of f, a regular file whose size was size,
// at most max bytes: a larger file fails with tooLarge set.
func readAllMax(ctx context.Context, f *os.File, size, max int64) (data []byte, tooLarge bool, err error) {
	if size > max {
		return nil, true, nil
	}
	data, err = io.ReadAll(io.LimitReader(ctxReader{ctx: ctx, r: f}, max+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(data)) > max {
		return nil, true, nil
	}
	return data, false, nil
}

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

// isBinary reports whether data (the start of a file) holds a NUL byte in
// its first binarySniffLen bytes.
func isBinary(data []byte) bool {
	if len(data) > binarySniffLen {
		data = data[:binarySniffLen]
	}
	return bytes.IndexByte(data, 0) >= 0
}
