package tools

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Bash output limits.
const (
	// BashRetainBytes is how much of the end of each stream is kept.
	BashRetainBytes = 1 << 20
	// BashChunkBytes bounds one live output chunk.
	BashChunkBytes = 8192
	// BashResultLines and BashResultBytes bound each stream in the result.
	BashResultLines = 2000
	BashResultBytes = 50 << 10
)

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max     int
	buf     []byte
	dropped int64
}

func (t *tailBuffer) write(p []byte) {
	if len(p) >= t.max {
		t.dropped += int64(len(t.buf) + len(p) - t.max)
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return
	}
	t.buf = append(t.buf, p...)
	// Trim lazily so that copying stays amortised.
	if len(t.buf) > 2*t.max {
		cut := len(t.buf) - t.max
		t.dropped += int64(cut)
		t.buf = append(t.buf[:0], t.buf[cut:]...)
	}
}

// bytes returns the retained tail and whether anything was dropped.
func (t *tailBuffer) bytes() ([]byte, bool) {
	if len(t.buf) > t.max {
		return t.buf[len(t.buf)-t.max:], true
	}
	return t.buf, t.dropped > 0
}

// lineChunker turns a byte stream into live output chunks of complete
// lines, each at most BashChunkBytes; a line longer than that is split on a
// UTF-8 boundary. flush emits a final partial line.
type lineChunker struct {
	emit    func(chunk []byte)
	pending []byte
}

func (l *lineChunker) write(p []byte) {
	l.pending = append(l.pending, p...)
	for len(l.pending) > 0 {
		window := l.pending
		if len(window) > BashChunkBytes {
			window = window[:BashChunkBytes]
		}
		cut := bytes.LastIndexByte(window, '\n') + 1
		if cut == 0 {
			if len(l.pending) < BashChunkBytes {
				break
			}
			cut = blankCut(window)
		}
		l.emit(l.pending[:cut])
		l.pending = l.pending[cut:]
	}
	if len(l.pending) == 0 {
		l.pending = l.pending[:0:0]
	}
}

func (l *lineChunker) flush() {
	if len(l.pending) > 0 {
		l.emit(l.pending)
		l.pending = nil
	}
}

// chunkBlankWindow is how far back from a forced cut of a long line the
// chunker looks for a blank to cut after instead.
const chunkBlankWindow = 1024

// blankCut is where a window of a line longer than a chunk is cut: after
// its last blank within chunkBlankWindow of the end, so that a word (and a
// secret, which holds no blank) is never split between two chunks that are
// redacted apart; else on a UTF-8 boundary.
func blankCut(window []byte) int {
	if i := bytes.LastIndexAny(window[len(window)-chunkBlankWindow:], " \t"); i >= 0 {
		return len(window) - chunkBlankWindow + i + 1
	}
	return utf8Boundary(window, len(window))
}

// utf8Boundary returns the largest n' <= n at which b can be split without
// cutting a UTF-8 sequence (n itself when no sequence start is found
// nearby).
func utf8Boundary(b []byte, n int) int {
	if n >= len(b) {
		return len(b)
	}
	for k := n; k > 0 && k > n-utf8.UTFMax; k-- {
		if utf8.RuneStart(b[k]) {
			return k
		}
	}
	return n
}

// splitChunk splits s into pieces of at most n bytes on UTF-8 boundaries.
func splitChunk(s string, n int) []string {
	var out []string
	for len(s) > n {
		k := utf8Boundary([]byte(s[:n+1]), n)
		if k == 0 {
			k = n
		}
		out = append(out, s[:k])
		s = s[k:]
	}
	return append(out, s)
}

// streamSink collects one output stream of a command: its retained tail
// and, when live output is wanted, its line chunks.
type streamSink struct {
	tail tailBuffer
	live *lineChunker
}

func newStreamSink(emit func(chunk []byte)) *streamSink {
	s := &streamSink{tail: tailBuffer{max: BashRetainBytes}}
	if emit != nil {
		s.live = &lineChunker{emit: emit}
	}
	return s
}

// copyFrom reads r until EOF or an error, then flushes the live chunker.
func (s *streamSink) copyFrom(r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			s.tail.write(buf[:n])
			if s.live != nil {
				s.live.write(buf[:n])
			}
		}
		if err != nil {
			break
		}
	}
	if s.live != nil {
		s.live.flush()
	}
}

// tailTruncate keeps the last maxLines lines and maxBytes bytes of s.
// dropped reports that s itself was already the tail of a longer stream.
// The result starts with a one-line hint when anything is left out.
func tailTruncate(s string, maxLines, maxBytes int, dropped bool) (string, bool) {
	body := s
	omittedLines := 0
	if n := strings.Count(body, "\n"); n > maxLines || (n == maxLines && !strings.HasSuffix(body, "\n")) {
		// Keep the last maxLines lines (a trailing newline ends the last one).
		end := len(body)
		if strings.HasSuffix(body, "\n") {
			end--
		}
		idx := end
		for k := 0; k < maxLines; k++ {
			idx = strings.LastIndexByte(body[:idx], '\n')
			if idx < 0 {
				break
			}
		}
		if idx >= 0 {
			omittedLines = strings.Count(body[:idx+1], "\n")
			body = body[idx+1:]
		}
	}
	cutBytes := false
	if len(body) > maxBytes {
		start := len(body) - maxBytes
		if nl := strings.IndexByte(body[start:], '\n'); nl >= 0 && nl+1 < len(body)-start {
			start += nl + 1
		} else {
			for start < len(body) && !utf8.RuneStart(body[start]) {
				start++
			}
		}
		omittedLines += strings.Count(body[:start], "\n")
		body = body[start:]
		cutBytes = true
	}
	if omittedLines == 0 && !cutBytes && !dropped {
		return s, false
	}
	shown := strings.Count(body, "\n")
	if body != "" && !strings.HasSuffix(body, "\n") {
		shown++
	}
	hint := fmt.Sprintf("[output truncated: showing the last %d lines / %d bytes", shown, len(body))
	if omittedLines > 0 {
		hint += fmt.Sprintf("; %d earlier lines omitted", omittedLines)
	}
	if dropped {
		hint += "; earlier output beyond the retained 1 MiB was discarded"
	}
	hint += "; redirect output to a file and Read or Grep it to see more]\n"
	return hint + body, true
}
