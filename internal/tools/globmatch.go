package tools

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// globPattern is a compiled slash-separated glob. Within a segment, '*'
// matches any run of characters, '?' one character, '[...]' one character
// of a class ('[!...]' or '[^...]' negates it, 'a-z' is a range, a leading
// ']' is literal) and '\' makes the next character literal. A segment that
// is exactly "**" matches any number of directories, including none.
// Wildcards match names starting with a dot too.
type globPattern struct {
	segs []globSeg
}

type globSeg struct {
	any bool // "**"
	pat string
}

// compileGlob validates and compiles a relative glob pattern. Empty and "."
// segments are dropped; an absolute pattern, a ".." segment or a malformed
// class is an error.
func compileGlob(pattern string) (*globPattern, error) {
	if pattern == "" {
		return nil, errors.New("pattern must not be empty")
	}
	if strings.HasPrefix(pattern, "/") {
		return nil, errors.New("pattern must be relative to the search directory")
	}
	g := &globPattern{}
	for _, s := range strings.Split(pattern, "/") {
		switch s {
		case "", ".":
			continue
		case "..":
			return nil, errors.New(`pattern must not contain a ".." segment`)
		case "**":
			if n := len(g.segs); n > 0 && g.segs[n-1].any {
				continue
			}
			g.segs = append(g.segs, globSeg{any: true})
			continue
		}
		if err := validateSegment(s); err != nil {
			return nil, fmt.Errorf("bad pattern segment %q: %v", s, err)
		}
		g.segs = append(g.segs, globSeg{pat: s})
	}
	if len(g.segs) == 0 {
		return nil, errors.New("pattern matches nothing")
	}
	return g, nil
}

// validateSegment checks that classes are closed and that no escape is
// left dangling.
func validateSegment(s string) error {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 == len(s) {
				return errors.New("trailing backslash")
			}
			i++
		case '[':
			n, ok := classLen(s[i:])
			if !ok {
				return errors.New("unterminated character class")
			}
			i += n - 1
		}
	}
	return nil
}

// classLen returns the length of the class at the start of s ("[...]").
func classLen(s string) (int, bool) {
	i := 1
	if i < len(s) && (s[i] == '!' || s[i] == '^') {
		i++
	}
	first := true
	for i < len(s) {
		switch {
		case s[i] == ']' && !first:
			return i + 1, true
		case s[i] == '\\':
			if i+1 == len(s) {
				return 0, false
			}
			_, w := utf8.DecodeRuneInString(s[i+1:])
			i += 1 + w
		default:
			_, w := utf8.DecodeRuneInString(s[i:])
			i += w
		}
		first = false
	}
	return 0, false
}

// matchClass matches r against the class at the start of s, which is
// valid; it returns the result and the class length.
func matchClass(s string, r rune) (bool, int) {
	i := 1
	negate := false
	if s[i] == '!' || s[i] == '^' {
		negate = true
		i++
	}
	matched := false
	first := true
	for {
		if s[i] == ']' && !first {
			return matched != negate, i + 1
		}
		first = false
		lo, w := classChar(s, i)
		i += w
		hi := lo
		if i+1 < len(s) && s[i] == '-' && s[i+1] != ']' {
			hi, w = classChar(s, i+1)
			i += 1 + w
		}
		if lo <= r && r <= hi {
			matched = true
		}
	}
}

// classChar decodes the (possibly escaped) character at s[i].
func classChar(s string, i int) (rune, int) {
	if s[i] == '\\' {
		r, w := utf8.DecodeRuneInString(s[i+1:])
		return r, 1 + w
	}
	return utf8.DecodeRuneInString(s[i:])
}

// matchSegment matches one path segment name against a valid segment
// pattern.
func matchSegment(pat, name string) bool {
	patBytes := !utf8.ValidString(pat)
	px, nx := 0, 0
	starPx, starNx := -1, 0
	for px < len(pat) || nx < len(name) {
		if px < len(pat) {
			switch c := pat[px]; c {
			case '*':
				starPx, starNx = px, nx
				px++
				continue
			case '?':
				if nx < len(name) {
					_, w := utf8.DecodeRuneInString(name[nx:])
					px++
					nx += w
					continue
				}
			case '[':
				if nx < len(name) {
					r, w := utf8.DecodeRuneInString(name[nx:])
					if ok, n := matchClass(pat[px:], r); ok {
						px += n
						nx += w
						continue
					}
				}
			case '\\':
				if nx < len(name) && pat[px+1] == name[nx] {
					px += 2
					nx++
					continue
				}
			default:
				if nx < len(name) && name[nx] == c {
					px++
					nx++
					continue
				}
			}
		}
		if starPx >= 0 && starNx < len(name) {
			// A star gives up one character at a time, so that what
			// follows it ('?', a class) never starts inside a character.
			// A pattern that is not valid UTF-8 is matched byte by byte,
			// as path.Match does: its stray bytes may match parts of a
			// character.
			if patBytes {
				starNx++
			} else {
				_, w := utf8.DecodeRuneInString(name[starNx:])
				starNx += w
			}
			px, nx = starPx+1, starNx
			continue
		}
		return false
	}
	return true
}

// splitRel splits a slash-separated relative path into its segments,
// dropping empty and "." segments.
func splitRel(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" && s != "." {
			out = append(out, s)
		}
	}
	return out
}

// Match reports whether the slash-separated relative path matches.
func (g *globPattern) Match(rel string) bool {
	return g.matchSegs(splitRel(rel))
}

// matchSegs matches path segments against the pattern. can[i][j] is
// whether segs[j:] matches g.segs[i:]; it is filled from the end, so the
// cost is O(len(g.segs) * len(segs)) segment matches.
func (g *globPattern) matchSegs(segs []string) bool {
	np, ns := len(g.segs), len(segs)
	next := make([]bool, ns+1) // row i+1
	cur := make([]bool, ns+1)  // row i
	next[ns] = true            // empty pattern matches the empty path
	for i := np - 1; i >= 0; i-- {
		p := g.segs[i]
		for j := ns; j >= 0; j-- {
			switch {
			case p.any:
				cur[j] = next[j] || (j < ns && cur[j+1])
			case j < ns:
				cur[j] = next[j+1] && matchSegment(p.pat, segs[j])
			default:
				cur[j] = false
			}
		}
		next, cur = cur, next
	}
	return next[0]
}

// mayMatchBelow reports whether some path below the directory dir (given
// as segments) can match, so a walk can skip directories that cannot.
func (g *globPattern) mayMatchBelow(dir []string) bool {
	i := 0
	for _, name := range dir {
		if i == len(g.segs) {
			return false
		}
		if g.segs[i].any {
			return true
		}
		if !matchSegment(g.segs[i].pat, name) {
			return false
		}
		i++
	}
	return i < len(g.segs)
}
