// Package baseurl canonicalizes connection base URLs the way the WHATWG URL
// standard parses and serializes them (`new URL(s).toString()`), restricted to
// what a connection base URL may be: an absolute http or https URL without
// credentials, query or fragment. The protocol's connection-catalog decoders
// accept a base URL only in this canonical form.
//
// Hosts are limited to ASCII: a non-ASCII host (raw or percent-encoded) and a
// punycode label ("xn--") are rejected, because validating them needs the
// UTS #46 tables, which the standard library does not carry.
package baseurl

import (
	"errors"
	"strconv"
	"strings"
)

// ErrInvalid is wrapped by every Canonical failure.
var ErrInvalid = errors.New("invalid base URL")

// Invalid returns the error for a base URL rejected for reason; it wraps
// ErrInvalid.
func Invalid(reason string) error {
	return errors.Join(ErrInvalid, errors.New("base URL "+reason))
}

// trimSpace removes leading and trailing white space and line terminators
// as JavaScript's String.prototype.trim does.
func trimSpace(s string) string {
	return strings.TrimFunc(s, isSpace)
}

func isSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0x00a0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// Canonical trims raw (JavaScript trim) and returns its canonical WHATWG
// serialization. An empty or blank raw yields "" (no base URL). The URL must
// use http or https, carry no username or password, and contain no '?' or
// '#' anywhere in its text.
func Canonical(raw string) (string, error) {
	s := trimSpace(raw)
	if s == "" {
		return "", nil
	}
	if strings.ContainsAny(s, "?#") {
		return "", Invalid("must not contain a query or fragment")
	}
	return serializeHTTPURL(s)
}

// serializeHTTPURL runs the WHATWG basic URL parser (no base URL) on s and
// serializes the result; only http and https URLs are accepted.
func serializeHTTPURL(s string) (string, error) {
	// Strip leading and trailing C0 controls and spaces, then every tab and
	// newline.
	start, end := 0, len(s)
	for start < end && s[start] <= 0x20 {
		start++
	}
	for end > start && s[end-1] <= 0x20 {
		end--
	}
	s = s[start:end]
	if strings.ContainsAny(s, "\t\n\r") {
		s = strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return -1
			}
			return r
		}, s)
	}

	// Scheme.
	if s == "" || !urlIsAlpha(s[0]) {
		return "", Invalid("must be an absolute URL")
	}
	i := 1
	for i < len(s) && (urlIsAlpha(s[i]) || urlIsDigit(s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.') {
		i++
	}
	if i >= len(s) || s[i] != ':' {
		return "", Invalid("must be an absolute URL")
	}
	scheme := strings.ToLower(s[:i])
	var defaultPort int
	switch scheme {
	case "http":
		defaultPort = 80
	case "https":
		defaultPort = 443
	default:
		return "", Invalid("must use http or https")
	}

	// Special schemes ignore any run of slashes and backslashes before the
	// authority.
	rest := strings.TrimLeft(s[i+1:], `/\`)
	cut := strings.IndexAny(rest, `/\`)
	if cut < 0 {
		cut = len(rest)
	}
	authority, path := rest[:cut], rest[cut:]
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		// Username and password are both empty only for "@" and ":@".
		if cred := authority[:at]; cred != "" && cred != ":" {
			return "", Invalid("must not contain credentials")
		}
		authority = authority[at+1:]
	}

	host, port, hasPort := authority, "", false
	inBrackets := false
scan:
	for j := 0; j < len(authority); j++ {
		switch authority[j] {
		case '[':
			inBrackets = true
		case ']':
			inBrackets = false
		case ':':
			if !inBrackets {
				host, port, hasPort = authority[:j], authority[j+1:], true
				break scan
			}
		}
	}
	if host == "" {
		return "", Invalid("must have a host")
	}
	serializedHost, err := parseURLHost(host)
	if err != nil {
		return "", err
	}

	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(scheme)
	b.WriteString("://")
	b.WriteString(serializedHost)
	if hasPort && port != "" {
		n := 0
		for k := 0; k < len(port); k++ {
			if !urlIsDigit(port[k]) {
				return "", Invalid("has an invalid port")
			}
			n = n*10 + int(port[k]-'0')
			if n > 65535 {
				return "", Invalid("has an invalid port")
			}
		}
		if n != defaultPort {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(n))
		}
	}
	for _, seg := range urlPathSegments(path) {
		b.WriteByte('/')
		b.WriteString(seg)
	}
	return b.String(), nil
}

// urlPathSegments runs the path start and path states of a special URL on
// path, which is empty or starts with '/' or '\'.
func urlPathSegments(path string) []string {
	if path != "" {
		path = path[1:]
	}
	var segs []string
	for {
		cut := strings.IndexAny(path, `/\`)
		last := cut < 0
		seg := path
		if !last {
			seg, path = path[:cut], path[cut+1:]
		}
		switch {
		case urlDoubleDotSegment(seg):
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
			if last {
				segs = append(segs, "")
			}
		case urlSingleDotSegment(seg):
			if last {
				segs = append(segs, "")
			}
		default:
			segs = append(segs, urlPercentEncodePath(seg))
		}
		if last {
			return segs
		}
	}
}

func urlSingleDotSegment(s string) bool {
	return s == "." || strings.EqualFold(s, "%2e")
}

func urlDoubleDotSegment(s string) bool {
	switch len(s) {
	case 2:
		return s == ".."
	case 4:
		return strings.EqualFold(s, ".%2e") || strings.EqualFold(s, "%2e.")
	case 6:
		return strings.EqualFold(s, "%2e%2e")
	}
	return false
}

const urlUpperHex = "0123456789ABCDEF"

// urlInPathPercentEncodeSet reports membership in the WHATWG path percent-encode
// set: C0 controls, space, '"', '#', '<', '>', '?', '^', '`', '{', '}', DEL
// and every non-ASCII byte.
func urlInPathPercentEncodeSet(c byte) bool {
	if c < 0x20 || c >= 0x7f {
		return true
	}
	switch c {
	case ' ', '"', '#', '<', '>', '?', '^', '`', '{', '}':
		return true
	}
	return false
}

func urlPercentEncodePath(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if urlInPathPercentEncodeSet(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if urlInPathPercentEncodeSet(c) {
			b = append(b, '%', urlUpperHex[c>>4], urlUpperHex[c&0xf])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func urlIsAlpha(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func urlIsDigit(c byte) bool { return c >= '0' && c <= '9' }

func urlHexValue(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c|0x20 >= 'a' && c|0x20 <= 'f':
		return c | 0x20 - 'a' + 10, true
	}
	return 0, false
}

// parseURLHost parses the host of a special URL and returns its
// serialization.
func parseURLHost(h string) (string, error) {
	if h[0] == '[' {
		if len(h) < 2 || h[len(h)-1] != ']' {
			return "", Invalid("has an invalid IPv6 host")
		}
		addr, ok := urlParseIPv6(h[1 : len(h)-1])
		if !ok {
			return "", Invalid("has an invalid IPv6 host")
		}
		return "[" + urlSerializeIPv6(addr) + "]", nil
	}
	// Percent-decode, then the ASCII part of domain to ASCII: lowercase and
	// reject forbidden domain code points.
	b := make([]byte, 0, len(h))
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c == '%' && i+2 < len(h) {
			hi, ok1 := urlHexValue(h[i+1])
			lo, ok2 := urlHexValue(h[i+2])
			if ok1 && ok2 {
				c = hi<<4 | lo
				i += 2
			}
		}
		if c >= 0x80 {
			return "", Invalid("has a non-ASCII host, which is not supported")
		}
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if urlForbiddenDomainByte(c) {
			return "", Invalid("has a forbidden character in its host")
		}
		b = append(b, c)
	}
	domain := string(b)
	for label := range strings.SplitSeq(domain, ".") {
		if strings.HasPrefix(label, "xn--") {
			return "", Invalid("has a punycode host label, which is not supported")
		}
	}
	if urlEndsInNumber(domain) {
		v, ok := urlParseIPv4(domain)
		if !ok {
			return "", Invalid("has an invalid IPv4 host")
		}
		return strconv.Itoa(int(v>>24)) + "." + strconv.Itoa(int(v>>16&0xff)) + "." +
			strconv.Itoa(int(v>>8&0xff)) + "." + strconv.Itoa(int(v&0xff)), nil
	}
	return domain, nil
}

// urlForbiddenDomainByte reports the ASCII forbidden domain code points.
func urlForbiddenDomainByte(c byte) bool {
	if c <= 0x20 || c == 0x7f {
		return true
	}
	switch c {
	case '#', '%', '/', ':', '<', '>', '?', '@', '[', '\\', ']', '^', '|':
		return true
	}
	return false
}

// urlEndsInNumber is the WHATWG "ends in a number" checker.
func urlEndsInNumber(s string) bool {
	parts := strings.Split(s, ".")
	if parts[len(parts)-1] == "" {
		if len(parts) == 1 {
			return false
		}
		parts = parts[:len(parts)-1]
	}
	last := parts[len(parts)-1]
	if last != "" && strings.Trim(last, "0123456789") == "" {
		return true
	}
	_, ok := urlParseIPv4Number(last)
	return ok
}

// urlIPv4Overflow marks an IPv4 number larger than any valid address part.
const urlIPv4Overflow = 1 << 33

// urlParseIPv4Number parses one dotted part (decimal, 0x hex or 0 octal),
// saturating at urlIPv4Overflow.
func urlParseIPv4Number(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	radix := uint64(10)
	switch {
	case len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'):
		s, radix = s[2:], 16
	case len(s) >= 2 && s[0] == '0':
		s, radix = s[1:], 8
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		d, ok := urlHexValue(s[i])
		if !ok || uint64(d) >= radix {
			return 0, false
		}
		if n < urlIPv4Overflow {
			n = n*radix + uint64(d)
		}
	}
	return min(n, urlIPv4Overflow), true
}

// urlParseIPv4 is the WHATWG IPv4 parser.
func urlParseIPv4(s string) (uint32, bool) {
	parts := strings.Split(s, ".")
	if parts[len(parts)-1] == "" && len(parts) > 1 {
		parts = parts[:len(parts)-1]
	}
	if len(parts) > 4 {
		return 0, false
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, ok := urlParseIPv4Number(p)
		if !ok {
			return 0, false
		}
		nums[i] = n
	}
	last := len(nums) - 1
	for _, n := range nums[:last] {
		if n > 255 {
			return 0, false
		}
	}
	if nums[last] >= 1<<(8*(5-len(nums))) {
		return 0, false
	}
	v := nums[last]
	for i, n := range nums[:last] {
		v += n << (8 * (3 - i))
	}
	return uint32(v), true
}

// urlParseIPv6 is the WHATWG IPv6 parser.
func urlParseIPv6(s string) ([8]uint16, bool) {
	var addr [8]uint16
	piece, compress := 0, -1
	p := 0
	at := func(i int) int {
		if i < len(s) {
			return int(s[i])
		}
		return -1
	}
	if at(p) == ':' {
		if at(p+1) != ':' {
			return addr, false
		}
		p += 2
		piece++
		compress = piece
	}
	for at(p) != -1 {
		if piece == 8 {
			return addr, false
		}
		if at(p) == ':' {
			if compress != -1 {
				return addr, false
			}
			p++
			piece++
			compress = piece
			continue
		}
		value, length := 0, 0
		for length < 4 && p < len(s) {
			h, ok := urlHexValue(s[p])
			if !ok {
				break
			}
			value = value*16 + int(h)
			p++
			length++
		}
		if at(p) == '.' {
			if length == 0 {
				return addr, false
			}
			p -= length
			if piece > 6 {
				return addr, false
			}
			seen := 0
			for at(p) != -1 {
				v4 := -1
				if seen > 0 {
					if at(p) == '.' && seen < 4 {
						p++
					} else {
						return addr, false
					}
				}
				if p >= len(s) || !urlIsDigit(s[p]) {
					return addr, false
				}
				for p < len(s) && urlIsDigit(s[p]) {
					n := int(s[p] - '0')
					switch v4 {
					case -1:
						v4 = n
					case 0:
						return addr, false
					default:
						v4 = v4*10 + n
					}
					if v4 > 255 {
						return addr, false
					}
					p++
				}
				addr[piece] = addr[piece]<<8 | uint16(v4)
				seen++
				if seen == 2 || seen == 4 {
					piece++
				}
			}
			if seen != 4 {
				return addr, false
			}
			break
		} else if at(p) == ':' {
			p++
			if at(p) == -1 {
				return addr, false
			}
		} else if at(p) != -1 {
			return addr, false
		}
		addr[piece] = uint16(value)
		piece++
	}
	if compress != -1 {
		swaps := piece - compress
		piece = 7
		for piece != 0 && swaps > 0 {
			addr[piece], addr[compress+swaps-1] = addr[compress+swaps-1], addr[piece]
			piece--
			swaps--
		}
	} else if piece != 8 {
		return addr, false
	}
	return addr, true
}

// urlSerializeIPv6 is the WHATWG IPv6 serializer: lowercase hex pieces with the
// first longest run of two or more zero pieces compressed to "::".
func urlSerializeIPv6(addr [8]uint16) string {
	compress, best := -1, 1
	for i := 0; i < 8; {
		if addr[i] != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && addr[j] == 0 {
			j++
		}
		if j-i > best {
			compress, best = i, j-i
		}
		i = j
	}
	var b strings.Builder
	ignore0 := false
	for i := 0; i < 8; i++ {
		if ignore0 && addr[i] == 0 {
			continue
		}
		ignore0 = false
		if compress == i {
			if i == 0 {
				b.WriteString("::")
			} else {
				b.WriteByte(':')
			}
			ignore0 = true
			continue
		}
		b.WriteString(strconv.FormatUint(uint64(addr[i]), 16))
		if i != 7 {
			b.WriteByte(':')
		}
	}
	return b.String()
}
