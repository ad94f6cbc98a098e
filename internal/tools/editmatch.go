package tools

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Edit match strategies, tried in this order; the first that finds any
// match decides.
const (
	MatchExact       = "exact"
	MatchLineTrimmed = "line-trimmed"
	MatchWhitespace  = "whitespace"
	MatchEscape      = "escape"
)

// span is a byte range [start, end) of a file's content.
type span struct{ start, end int }

// editMatch is the outcome of locating old_string in a file.
type editMatch struct {
	via   string
	spans []span
	// replacement is the text that replaces the matched span.
	replacement string
}

// findEdit locates oldStr in content with the exact strategy, then the
// fallbacks. The first strategy with at least one match is returned; a
// zero-value via means nothing matched.
func findEdit(content, oldStr, newStr string) editMatch {
	if spans := findExact(content, oldStr); len(spans) > 0 {
		return editMatch{via: MatchExact, spans: spans, replacement: newStr}
	}
	if spans := findLineTrimmed(content, oldStr); len(spans) > 0 {
		return editMatch{via: MatchLineTrimmed, spans: spans, replacement: newStr}
	}
	if spans := findCollapsedWhitespace(content, oldStr); len(spans) > 0 {
		return editMatch{via: MatchWhitespace, spans: spans, replacement: newStr}
	}
	// A model that over-escaped old_string usually escaped new_string the
	// same way, so both are unescaped.
	if un := unescapeEdit(oldStr); un != oldStr && un != "" {
		if spans := findExact(content, un); len(spans) > 0 {
			return editMatch{via: MatchEscape, spans: spans, replacement: unescapeEdit(newStr)}
		}
	}
	return editMatch{}
}

// findExact returns the non-overlapping occurrences of s in content.
func findExact(content, s string) []span {
	if s == "" {
		return nil
	}
	var out []span
	for i := 0; i <= len(content); {
		j := strings.Index(content[i:], s)
		if j < 0 {
			break
		}
		out = append(out, span{i + j, i + j + len(s)})
		i += j + len(s)
	}
	return out
}

// findLineTrimmed matches old line by line, each line compared with its
// surrounding whitespace trimmed. A match covers whole lines, without the
// final line's line ending unless old itself ends with a newline.
func findLineTrimmed(content, old string) []span {
	oldLines := strings.Split(old, "\n")
	withNewline := len(oldLines) > 1 && oldLines[len(oldLines)-1] == ""
	if withNewline {
		oldLines = oldLines[:len(oldLines)-1]
	}
	blank := true
	for i, l := range oldLines {
		oldLines[i] = strings.TrimSpace(l)
		if oldLines[i] != "" {
			blank = false
		}
	}
	if blank {
		return nil
	}
	type line struct{ start, end int } // end excludes "\n" and a trailing "\r"
	var lines []line
	for start := 0; start <= len(content); {
		nl := strings.IndexByte(content[start:], '\n')
		end := len(content)
		if nl >= 0 {
			end = start + nl
		}
		textEnd := end
		if textEnd > start && content[textEnd-1] == '\r' {
			textEnd--
		}
		lines = append(lines, line{start, textEnd})
		if nl < 0 {
			break
		}
		start = end + 1
	}
	var out []span
	for i := 0; i+len(oldLines) <= len(lines); i++ {
		ok := true
		for k, want := range oldLines {
			l := lines[i+k]
			if strings.TrimSpace(content[l.start:l.end]) != want {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		last := lines[i+len(oldLines)-1]
		end := last.end
		if withNewline {
			if nl := strings.IndexByte(content[end:], '\n'); nl >= 0 {
				end += nl + 1
			}
		}
		out = append(out, span{lines[i].start, end})
	}
	return out
}

// collapsed is a text with every run of whitespace replaced by one space,
// mapping each byte back to the original.
type collapsed struct {
	text       string
	start, end []int // original byte range of each byte of text
}

func collapseWhitespace(s string) collapsed {
	var c collapsed
	var b strings.Builder
	inSpace := false
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		next := i + w
		if unicode.IsSpace(r) {
			if inSpace {
				c.end[len(c.end)-1] = next
			} else {
				inSpace = true
				b.WriteByte(' ')
				c.start = append(c.start, i)
				c.end = append(c.end, next)
			}
			i = next
			continue
		}
		inSpace = false
		b.WriteString(s[i:next])
		for k := i; k < next; k++ {
			c.start = append(c.start, i)
			c.end = append(c.end, next)
		}
		i = next
	}
	c.text = b.String()
	return c
}

// findCollapsedWhitespace matches old against content with every run of
// whitespace collapsed to a single space on both sides (old also loses its
// leading and trailing whitespace).
func findCollapsedWhitespace(content, old string) []span {
	want := strings.TrimSpace(collapseWhitespace(old).text)
	if want == "" {
		return nil
	}
	c := collapseWhitespace(content)
	var out []span
	for _, m := range findExact(c.text, want) {
		out = append(out, span{c.start[m.start], c.end[m.end-1]})
	}
	return out
}

// unescapeEdit turns the escape sequences \n \t \r \" \' and \\ into the
// characters they stand for.
func unescapeEdit(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '"', '\'', '\\':
				b.WriteByte(s[i+1])
			default:
				b.WriteByte('\\')
				continue
			}
			i++
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
