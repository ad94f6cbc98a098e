package tools

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/maka-agent/maka/internal/permsyntax"
)

// Read limits.
const (
	// ReadDefaultLines is how many lines Read returns without a limit.
	ReadDefaultLines = 2000
	// ReadMaxLineChars is where Read cuts a long line.
	ReadMaxLineChars = 2000
	// ReadMaxBytes bounds the text Read returns.
	ReadMaxBytes = 256 << 10
)

// NameRead is the name of the Read tool.
const NameRead = permsyntax.NameRead

type readTool struct{}

func (readTool) Name() string { return NameRead }

func (readTool) Description() string {
	return "Read a text file in the workspace. path is relative to the workspace. " +
		"offset is the 0-based line to start at, limit the number of lines (default " +
		fmt.Sprint(ReadDefaultLines) + "). Long lines are cut and the output is capped; " +
		"a note tells how to continue."
}

func (readTool) Parameters() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"path":{"type":"string","description":"File path relative to the workspace."},` +
		`"offset":{"type":"integer","minimum":0,"description":"0-based line to start reading at."},` +
		`"limit":{"type":"integer","minimum":1,"description":"Number of lines to read."}},` +
		`"required":["path"],"additionalProperties":false}`)
}

func (readTool) PermissionRequired() bool { return false }
func (readTool) ActivityKind() string     { return ActivityRead }

type readArgs struct {
	Path   *string `json:"path"`
	Offset *int    `json:"offset"`
	Limit  *int    `json:"limit"`
}

func (t readTool) Run(ctx context.Context, env Env, raw json.RawMessage) (Result, error) {
	var a readArgs
	if err := decodeArgs(raw, &a); err != nil {
		return invalidArgs(NameRead, err), nil
	}
	if err := requireString("path", a.Path); err != nil {
		return invalidArgs(NameRead, err), nil
	}
	offset, limit := 0, ReadDefaultLines
	if a.Offset != nil {
		if *a.Offset < 0 {
			return invalidArgs(NameRead, errors.New("offset must be >= 0")), nil
		}
		offset = *a.Offset
	}
	if a.Limit != nil {
		if *a.Limit <= 0 {
			return invalidArgs(NameRead, errors.New("limit must be > 0")), nil
		}
		limit = *a.Limit
	}
	if err := ctx.Err(); err != nil {
		return ErrorResult("Read aborted"), nil
	}
	root, err := openRoot(env)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Read %s: %v", *a.Path, err)), nil
	}
	defer root.close()
	rel, err := root.rel(*a.Path)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Read %s: %v", *a.Path, err)), nil
	}
	name := filepath.ToSlash(rel)
	f, st, err := root.open(rel)
	if err != nil {
		return ErrorResult(fmt.Sprintf("Read %s: %v", name, err)), nil
	}
	if fileMode(&st).IsDir() {
		_ = f.Close()
		return ErrorResult(fmt.Sprintf("Read %s: is a directory (use Glob to list files)", name)), nil
	}
	defer f.Close()
	lr := &io.LimitedReader{R: f, N: FileScanMaxBytes}
	br := bufio.NewReaderSize(ctxReader{ctx: ctx, r: lr}, 64<<10)
	if head, _ := br.Peek(binarySniffLen); isBinary(head) {
		return ErrorResult(fmt.Sprintf("Read %s: binary file", name)), nil
	}
	text, err := readLines(br, offset, limit)
	if ctx.Err() != nil {
		return ErrorResult("Read aborted"), nil
	}
	capped := lr.N == 0 && br.Buffered() == 0
	var past *pastEndError
	if errors.As(err, &past) && capped {
		return ErrorResult(fmt.Sprintf("Read %s: offset %d is past the first %d MiB of the file (%d lines), which is as far as Read goes",
			name, past.offset, FileScanMaxBytes>>20, past.lines)), nil
	}
	if err != nil {
		return ErrorResult(fmt.Sprintf("Read %s: %v", name, err)), nil
	}
	if capped {
		if text != "" && !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		text += fmt.Sprintf("[Read goes through the first %d MiB of a file only]", FileScanMaxBytes>>20)
	}
	r := TextResult(text)
	if text == "" {
		r.ModelText = "(empty file)"
	}
	return r, nil
}

// pastEndError reports an offset past the last line read.
type pastEndError struct{ offset, lines int }

func (e *pastEndError) Error() string {
	return fmt.Sprintf("offset %d is past the end of the file (%d lines)", e.offset, e.lines)
}

// readLines returns lines [offset, offset+limit) of r, each cut at
// ReadMaxLineChars characters, the whole capped at ReadMaxBytes, followed
// by a note when anything was left out.
func readLines(r *bufio.Reader, offset, limit int) (string, error) {
	var b strings.Builder
	line, shown, cut := 0, 0, 0
	more := false
	for {
		s, err := readLine(r, ReadMaxLineChars*4+1)
		if err == io.EOF && s == "" {
			break
		}
		if err != nil && err != io.EOF {
			return "", err
		}
		if line < offset {
			line++
			continue
		}
		if shown == limit {
			more = true
			break
		}
		body, nl := strings.CutSuffix(s, "\n")
		if cs := truncateChars(body, ReadMaxLineChars); len(cs) < len(body) {
			s = cs + " [line truncated]"
			if nl {
				s += "\n"
			}
			cut++
		}
		if b.Len()+len(s) > ReadMaxBytes {
			more = true
			break
		}
		b.WriteString(s)
		shown++
		line++
		if err == io.EOF {
			break
		}
	}
	if shown == 0 && offset > 0 && !more {
		return "", &pastEndError{offset: offset, lines: line}
	}
	var notes []string
	if cut > 0 {
		notes = append(notes, fmt.Sprintf("%d long line(s) were cut at %d characters", cut, ReadMaxLineChars))
	}
	if more {
		notes = append(notes, fmt.Sprintf("showing lines %d-%d; more lines follow, continue with offset=%d", offset+1, offset+shown, offset+shown))
	}
	if len(notes) > 0 {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		b.WriteString("[" + strings.Join(notes, "; ") + "]")
	}
	return b.String(), nil
}

// readLine returns the next line of r including its newline, keeping at
// most keep bytes of its text and discarding the rest of an over-long line.
// Read keeps ReadMaxLineChars*4+1 bytes, enough to tell whether a line has
// more than ReadMaxLineChars characters.
func readLine(r *bufio.Reader, keep int) (string, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf) < keep {
			n := min(len(chunk), keep-len(buf))
			buf = append(buf, chunk[:n]...)
			if n < len(chunk) && chunk[len(chunk)-1] == '\n' {
				buf = append(buf, '\n')
			}
		} else if len(chunk) > 0 && chunk[len(chunk)-1] == '\n' {
			buf = append(buf, '\n')
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return string(buf), err
	}
}
