// Package wireredact recognises the credentials that must never appear in
// canonical protocol strings (task ids and subjects, permission review text)
// and replaces them. The protocol's decoders reject a canonical string that
// still holds one, so the set follows the original host's redactor exactly:
// provider API keys, GitHub and Slack tokens, AWS access key ids, bearer
// tokens, private keys and long hex runs.
package wireredact

import (
	"regexp"
	"sync"
)

var secretPatterns = sync.OnceValue(func() []*regexp.Regexp {
	return []*regexp.Regexp{
		regexp.MustCompile(`sk-[A-Za-z0-9_-]{16,}`),
		regexp.MustCompile(`AIza[0-9A-Za-z_-]{35}`),
		regexp.MustCompile(`gh[pousr]_[A-Za-z0-9]{20,}`),
		regexp.MustCompile(`xox[abprs]-[A-Za-z0-9-]{10,}`),
		regexp.MustCompile(`AKIA[0-9A-Z]{16}`),
		regexp.MustCompile(`(?i)bearer\s+[A-Za-z0-9._~+/-]{20,}=*`),
		regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----`),
		regexp.MustCompile(`[0-9a-fA-F]{40,}`),
	}
})

// Marker replaces each secret found by Redact.
const Marker = "[REDACTED]"

// Redact replaces every recognised secret in s with Marker.
func Redact(s string) string {
	for _, re := range secretPatterns() {
		if re.MatchString(s) {
			s = re.ReplaceAllString(s, Marker)
		}
	}
	return s
}

// Contains reports whether Redact would change s.
func Contains(s string) bool {
	for _, re := range secretPatterns() {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}
