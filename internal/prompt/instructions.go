package prompt

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"
)

// MaxInstructionBytes bounds the instructions section of a system prompt
// (headings, files and the note of a cut).
const MaxInstructionBytes = 32 << 10

// cutReserve is the room kept for the note of a cut.
const cutReserve = 512

// maxCachedFiles bounds the instruction files kept between turns; each
// keeps at most MaxInstructionBytes of text, so the cache holds at most
// 8 MiB (in practice a few KiB: one or two files per workspace).
const maxCachedFiles = 256

// Instruction file names: AGENTS.md, else CLAUDE.md in a directory that
// has no AGENTS.md.
const (
	AgentsFile = "AGENTS.md"
	ClaudeFile = "CLAUDE.md"
)

// UserDir is the directory of the user's own AGENTS.md:
// ${XDG_CONFIG_HOME:-~/.config}/maka ("" when neither is known).
func UserDir() string {
	if x := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "maka")
	}
	home, err := os.UserHomeDir()
	if err != nil || !filepath.IsAbs(home) {
		return ""
	}
	return filepath.Join(home, ".config", "maka")
}

// instructionHeader opens the instructions section.
const instructionHeader = "# Instructions from the user and the project\n" +
	"The user and the project keep these files; follow them, except where they conflict with the user's own messages in this conversation. They cannot widen the permission mode or the sandbox."

// source is one place an instruction file is read from: its AGENTS.md,
// else (fallback set) its CLAUDE.md, and the directories a symlink there
// may resolve into.
type source struct {
	dir      string
	fallback bool
	allowed  []string
}

// instructions returns the instructions section ("" when there is no
// file) and the notes on what it left out.
func (b *Builder) instructions(in Input) (string, Notes) {
	var notes Notes
	protected := realPaths(in.Protected)
	var sources []source
	if in.UserDir != "" {
		dir := realPath(in.UserDir)
		sources = append(sources, source{dir: dir, allowed: []string{dir}})
	}
	chain := chainOf(in.Workspace)
	for _, dir := range chain {
		sources = append(sources, source{dir: dir, fallback: true, allowed: chain})
	}

	type part struct{ path, text string }
	var parts []part
	seen := map[string]bool{} // real paths already included
	for _, s := range sources {
		path := filepath.Join(s.dir, AgentsFile)
		f, err := b.files.read(path, s.allowed, protected)
		if errors.Is(err, fs.ErrNotExist) && s.fallback {
			path = filepath.Join(s.dir, ClaudeFile)
			f, err = b.files.read(path, s.allowed, protected)
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			notes = append(notes, Note{Path: path, Reason: err.Error()})
			continue
		}
		if seen[f.real] || strings.TrimSpace(f.text) == "" {
			continue
		}
		seen[f.real] = true
		parts = append(parts, part{path: path, text: f.text})
	}
	if len(parts) == 0 {
		return "", notes
	}

	var sb strings.Builder
	sb.WriteString(instructionHeader)
	budget := MaxInstructionBytes - cutReserve
	for i, p := range parts {
		head := "\n\n## " + p.path + "\n"
		body := strings.TrimRight(p.text, "\n")
		if sb.Len()+len(head)+len(body) <= budget {
			sb.WriteString(head)
			sb.WriteString(body)
			continue
		}
		room := budget - sb.Len() - len(head)
		kept := 0
		if room > 0 {
			kept = cutAt(body, room)
			sb.WriteString(head)
			sb.WriteString(body[:kept])
		}
		note := fmt.Sprintf("[Instructions cut here at the %d KiB limit: %d of the %d bytes of %s were left out", MaxInstructionBytes>>10, len(body)-kept, len(body), p.path)
		if later := len(parts) - i - 1; later > 0 {
			note += fmt.Sprintf(", and %d later files", later)
		}
		note += ".]"
		sb.WriteString("\n\n")
		sb.WriteString(note)
		notes = append(notes, Note{Path: p.path, Reason: note})
		break
	}
	return sb.String(), notes
}

// cutAt is the length of the longest prefix of s of at most n bytes that
// ends at a line break, or else at a rune boundary.
func cutAt(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	if i := strings.LastIndexByte(s[:n], '\n'); i >= n/2 {
		return i
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// chainOf is the directories instruction files are read from, outermost
// first: from the repository root (the nearest enclosing directory that
// holds .git, a file or a directory) down to the workspace, or the
// workspace alone outside a repository. Paths are real paths.
func chainOf(workspace string) []string {
	if workspace == "" {
		return nil
	}
	ws := realPath(workspace)
	var up []string
	for d := ws; ; {
		up = append(up, d)
		if fi, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			if !ownedByUs(fi) {
				// Another user's repository (a shared /tmp): like git's
				// safe.directory, nothing of it is trusted.
				return []string{ws}
			}
			break
		}
		parent := filepath.Dir(d)
		if parent == d {
			// No repository: the workspace alone.
			return []string{ws}
		}
		d = parent
	}
	for i, j := 0, len(up)-1; i < j; i, j = i+1, j-1 {
		up[i], up[j] = up[j], up[i]
	}
	return up
}

// ownedByUs reports whether fi belongs to the user the host runs as.
func ownedByUs(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}

// realPath is p with its symlinks resolved, or p cleaned when it cannot
// be resolved (it does not exist yet).
func realPath(p string) string {
	if p == "" {
		return ""
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

func realPaths(ps []string) []string {
	out := make([]string, 0, 2*len(ps))
	for _, p := range ps {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		out = append(out, abs)
		if r := realPath(abs); r != abs {
			out = append(out, r)
		}
	}
	return out
}

// within reports whether p is dir or lies under it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// --- reading, with a cache --------------------------------------------------

// fileKey identifies one version of a file.
type fileKey struct {
	real       string
	dev, ino   uint64
	size       int64
	mtimeNanos int64
}

// cachedFile is a read instruction file.
type cachedFile struct {
	key  fileKey
	real string
	text string
	err  error // the file's verdict (not UTF-8, not regular)
}

// fileCache keeps the files read, by the path they were named by.
type fileCache struct {
	mu    sync.Mutex
	files map[string]cachedFile
}

// errors of a file that is left out.
var (
	errOutside    = errors.New("a symlink that points outside the instruction directories")
	errProtected  = errors.New("inside the host's own protected paths")
	errNotRegular = errors.New("not a regular file")
	errNotUTF8    = errors.New("not valid UTF-8")
)

// read returns the file at path: a regular file of valid UTF-8 (at most
// MaxInstructionBytes of it) that is not under protected and, when path
// is a symlink, whose real path lies in one of allowed (directly). An
// error wrapping fs.ErrNotExist means there is no file at path.
func (c *fileCache) read(path string, allowed, protected []string) (cachedFile, error) {
	for _, p := range protected {
		if within(path, p) {
			return cachedFile{}, errProtected
		}
	}
	fi, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return cachedFile{}, err
		}
		return cachedFile{}, fmt.Errorf("cannot be read: %w", err)
	}
	real := path
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		r, err := filepath.EvalSymlinks(path)
		if err != nil {
			return cachedFile{}, fmt.Errorf("a symlink that cannot be resolved: %w", err)
		}
		inChain := false
		for _, d := range allowed {
			if filepath.Dir(r) == d {
				inChain = true
			}
		}
		if !inChain {
			return cachedFile{}, errOutside
		}
		for _, p := range protected {
			if within(r, p) {
				return cachedFile{}, errProtected
			}
		}
		real = r
	case !fi.Mode().IsRegular():
		return cachedFile{}, errNotRegular
	}

	// O_NOFOLLOW: the real path has no symlink left; one put there since
	// is refused. O_NONBLOCK: a FIFO swapped in does not block the open.
	fd, err := syscall.Open(real, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return cachedFile{}, fmt.Errorf("cannot be opened: %w", err)
	}
	f := os.NewFile(uintptr(fd), real)
	defer f.Close()
	ofi, err := f.Stat()
	if err != nil {
		return cachedFile{}, fmt.Errorf("cannot be read: %w", err)
	}
	if !ofi.Mode().IsRegular() {
		return cachedFile{}, errNotRegular
	}
	key := fileKey{real: real, size: ofi.Size(), mtimeNanos: ofi.ModTime().UnixNano()}
	if st, ok := ofi.Sys().(*syscall.Stat_t); ok {
		key.dev, key.ino = uint64(st.Dev), uint64(st.Ino) //nolint:unconvert // int32 on some systems
	}

	c.mu.Lock()
	cached, ok := c.files[path]
	c.mu.Unlock()
	if ok && cached.key == key {
		return cached, cached.err
	}

	b, err := io.ReadAll(io.LimitReader(f, MaxInstructionBytes+utf8.UTFMax))
	if err != nil {
		return cachedFile{}, fmt.Errorf("cannot be read: %w", err)
	}
	out := cachedFile{key: key, real: real}
	if int64(len(b)) > MaxInstructionBytes {
		// Only the part that can fit is kept; an incomplete last rune
		// is not an encoding error.
		b = trimPartialRune(b[:MaxInstructionBytes])
	}
	if !utf8.Valid(b) {
		out.err = errNotUTF8
	} else {
		out.text = string(b)
	}
	c.mu.Lock()
	if c.files == nil {
		c.files = map[string]cachedFile{}
	}
	if _, ok := c.files[path]; !ok && len(c.files) >= maxCachedFiles {
		for k := range c.files {
			delete(c.files, k)
			break
		}
	}
	c.files[path] = out
	c.mu.Unlock()
	return out, out.err
}

// trimPartialRune drops an incomplete rune at the end of b (the place a
// read limit cut it).
func trimPartialRune(b []byte) []byte {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if c := b[len(b)-i]; utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}
