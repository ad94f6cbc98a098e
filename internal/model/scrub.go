package model

import (
	"regexp"
	"strings"
	"sync"

	"github.com/maka-agent/maka/protocol"
)

// secretPatterns match credentials that providers sometimes echo back in
// error messages (a truncated key, an Authorization header, a key in a URL).
var secretPatterns = sync.OnceValue(func() []secretPattern {
	return []secretPattern{
		{regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}`), "$1 [redacted]"},
		{regexp.MustCompile(`\b(sk|pk|rk|ak|gsk|xai|sk-ant|sk-proj|sk-or)-[A-Za-z0-9_*.-]{6,}`), "[redacted]"},
		{regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{20,}`), "[redacted]"},
		{regexp.MustCompile(`\b(AKIA|ASIA)[0-9A-Z]{16}\b`), "[redacted]"},
		{regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{20,}`), "[redacted]"},
		{regexp.MustCompile(`(?i)\b(api[_-]?key|x-api-key|access[_-]?token|auth[_-]?token|secret|password|authorization)(["']?\s*[:=]\s*["']?)[^\s"',;&]{4,}`), "$1$2[redacted]"},
		{regexp.MustCompile(`(?i)([?&](?:key|token|api_key|access_token|sig)=)[^&\s"']+`), "$1[redacted]"},
	}
})

// secretPattern is a credential and its replacement.
type secretPattern struct {
	re   *regexp.Regexp
	repl string
}

// scrubMessage removes credentials and control characters from a provider
// message and bounds it to maxFailureMessage bytes (on a rune boundary).
func scrubMessage(s string) string {
	if s == "" {
		return ""
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	for _, p := range secretPatterns() {
		s = p.re.ReplaceAllString(s, p.repl)
	}
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return ' '
		case r < 0x20 || r == 0x7f, r >= 0x80 && r <= 0x9f:
			// C0 and C1 controls: a terminal must not interpret them.
			return -1
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > maxFailureMessage {
		const ellipsis = "…"
		s = protocol.TruncateUTF8(s, maxFailureMessage-len(ellipsis)) + ellipsis
	}
	return s
}
