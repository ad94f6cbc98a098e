package protocol

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func frameCode(err error) string {
	var pe *ProtocolError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func TestDecodeFrameTextRules(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		code string
	}{
		{"empty frame", []byte{}, CodeInvalidFrame},
		{"lone CR becomes empty JSON", []byte("\r"), CodeInvalidJSON},
		{"one trailing CR dropped", []byte("{}\r"), ""},
		{"two CRs: one kept", []byte("{}\r\r"), ""}, // JSON whitespace
		{"CR not last is JSON whitespace", []byte("{\r}"), ""},
		{"BOM stripped once", append([]byte{0xef, 0xbb, 0xbf}, "{}"...), ""},
		{"second BOM kept", append([]byte{0xef, 0xbb, 0xbf, 0xef, 0xbb, 0xbf}, "{}"...), CodeInvalidJSON},
		{"invalid utf8", []byte("{\"a\":\"\xff\"}"), CodeInvalidUTF8},
		{"overlong utf8", []byte("{\"a\":\"\xc0\xaf\"}"), CodeInvalidUTF8},
		{"surrogate code point", []byte("{\"a\":\"\xed\xa0\x80\"}"), CodeInvalidUTF8},
		{"truncated sequence", []byte("{\"a\":\"\xe2\x82\"}"), CodeInvalidUTF8},
		{"bad json", []byte("{"), CodeInvalidJSON},
		{"json whitespace around", []byte(" \t{} "), ""},
		{"max size", append(bytes.Repeat([]byte(" "), MaxFrameBytes-3), "{}"...), ""},
		{"over max size", append(bytes.Repeat([]byte(" "), MaxFrameBytes-2), "{}"...), CodeFrameTooLarge},
	}
	for _, c := range cases {
		_, err := DecodeFrameText(c.in)
		if got := frameCode(err); got != c.code {
			t.Errorf("%s: code %q (%v), want %q", c.name, got, err, c.code)
		}
	}
}

// splitAll feeds data to a splitter in chunks of n bytes.
func splitAll(data []byte, n int) (frames []string, err error) {
	var s Splitter
	for len(data) > 0 {
		chunk := data[:min(n, len(data))]
		data = data[len(chunk):]
		for len(chunk) > 0 {
			f, used, err := s.Next(chunk)
			if err != nil {
				return frames, err
			}
			chunk = chunk[used:]
			if f != nil {
				frames = append(frames, string(f))
			}
		}
	}
	if s.Pending() {
		return frames, ErrPartialFrame
	}
	return frames, nil
}

func TestSplitterIsIndependentOfChunking(t *testing.T) {
	data := []byte("{\"a\":\"é😀\"}\n\n{}\r\n" + strings.Repeat("x", 70000))
	for _, n := range []int{1, 2, 3, 7, 64, 1 << 16} {
		frames, err := splitAll(data, n)
		if frameCode(err) != CodeFrameTooLarge {
			t.Fatalf("chunk %d: err %v, want frame_too_large", n, err)
		}
		want := []string{"{\"a\":\"é😀\"}", "", "{}\r"}
		if strings.Join(frames, "|") != strings.Join(want, "|") {
			t.Fatalf("chunk %d: frames %q", n, frames)
		}
	}
}

func TestSplitterSizeBoundCountsTheLF(t *testing.T) {
	exact := append(bytes.Repeat([]byte("a"), MaxFrameBytes-1), '\n')
	if frames, err := splitAll(exact, 1000); err != nil || len(frames) != 1 {
		t.Fatalf("a 65536-byte frame with its LF: %v", err)
	}
	over := append(bytes.Repeat([]byte("a"), MaxFrameBytes), '\n')
	if _, err := splitAll(over, 1000); frameCode(err) != CodeFrameTooLarge {
		t.Fatalf("a 65537-byte frame: %v", err)
	}
	// An unterminated run fails as soon as it passes the bound.
	var s Splitter
	if _, _, err := s.Next(bytes.Repeat([]byte("a"), MaxFrameBytes)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Next([]byte("a")); frameCode(err) != CodeFrameTooLarge {
		t.Fatalf("unterminated run over the bound: %v", err)
	}
}

func TestSplitterPartialFrameAtEOF(t *testing.T) {
	if _, err := splitAll([]byte("{}\n{\"a\""), 4); err != ErrPartialFrame {
		t.Fatalf("err %v, want partial frame", err)
	}
	if _, err := splitAll([]byte("{}\n"), 4); err != nil {
		t.Fatalf("clean end: %v", err)
	}
}

func TestEncodeFrameRefusesOversize(t *testing.T) {
	if _, err := EncodeFrame(strings.Repeat("a", MaxFrameBytes-3)); err != nil {
		t.Fatalf("65536 bytes with LF refused: %v", err)
	}
	if _, err := EncodeFrame(strings.Repeat("a", MaxFrameBytes-2)); frameCode(err) != CodeFrameTooLarge {
		t.Fatalf("65537 bytes accepted: %v", err)
	}
}
