package tasks

import (
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/maka-agent/maka/internal/wireredact"
	"github.com/maka-agent/maka/protocol"
	"golang.org/x/text/unicode/norm"
)

// ledgerTag matches the ledger markup removed from task text: complete
// <task-ledger…> and </task-ledger…> tags on one line, ASCII letters in any
// case (the same pattern protocol.IsCanonicalTaskText rejects).
var ledgerTag = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`</?[Tt][Aa][Ss][Kk]-[Ll][Ee][Dd][Gg][Ee][Rr][^\n>]*>`)
})

// maxCanonicalRounds bounds the fixpoint iteration of canonicalText. Every
// step that changes the text except NFC shortens it, and NFC only changes
// text once per removal, so real inputs settle in two or three rounds.
const maxCanonicalRounds = 16

// canonicalText returns the canonical form of s: valid UTF-8, NFC, runs of
// whitespace (JavaScript's \s class) collapsed to one space, trimmed, secrets
// replaced by wireredact.Marker and ledger tags removed. The steps are
// repeated until nothing changes, because one step can undo another (a
// removed tag can join two halves of a secret, or leave two spaces next to
// each other). ok is false when no fixpoint was reached, which only hostile
// input can cause.
func canonicalText(s string) (out string, ok bool) {
	s = strings.ToValidUTF8(s, "\uFFFD")
	for range maxCanonicalRounds {
		next := norm.NFC.String(s)
		next = wireredact.Redact(next)
		next = ledgerTag().ReplaceAllString(next, "")
		next = collapseSpace(next)
		if next == s {
			return s, protocol.IsCanonicalTaskText(s)
		}
		s = next
	}
	return s, protocol.IsCanonicalTaskText(s)
}

// collapseSpace replaces every run of whitespace with one space and trims
// the ends.
func collapseSpace(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	pending := false // a space is owed before the next non-space
	for _, r := range s {
		if isSpace(r) {
			pending = b.Len() > 0
			continue
		}
		if pending {
			b.WriteByte(' ')
			pending = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// isSpace reports whether r is in JavaScript's \s class.
func isSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// Text fields, as named in errors.
const (
	FieldSubject            = "subject"
	FieldBlockedReason      = "blockedReason"
	FieldFailureReason      = "failureReason"
	FieldCompletionEvidence = "completionEvidence"
	FieldEventReason        = "reason"
)

// CanonicalSubject returns the canonical form of a task subject, or a
// *TextError when it is blank once canonical or longer than
// protocol.TaskSubjectMaxCodePoints code points.
func CanonicalSubject(s string) (string, error) {
	return canonicalField(FieldSubject, s, protocol.TaskSubjectMaxCodePoints)
}

// CanonicalReason returns the canonical form of a blocked reason, failure
// reason or completion evidence, or a *TextError when it is blank once
// canonical or longer than protocol.TaskEvidenceMaxCodePoints code points.
func CanonicalReason(field, s string) (string, error) {
	return canonicalField(field, s, protocol.TaskEvidenceMaxCodePoints)
}

func canonicalField(field, s string, maxCodePoints int) (string, error) {
	c, ok := canonicalText(s)
	switch {
	case !ok:
		return "", &TextError{Field: field, Reason: "cannot be made canonical"}
	case c == "":
		return "", &TextError{Field: field, Reason: "is blank"}
	}
	if n := utf8.RuneCountInString(c); n > maxCodePoints {
		return "", &TextError{Field: field, Reason: "is longer than " + itoa(maxCodePoints) + " code points"}
	}
	return c, nil
}

// projectText is the read-side form of stored text: canonical and cut to
// maxCodePoints. It returns "" when nothing canonical is left.
func projectText(s string, maxCodePoints int) string {
	for range maxCanonicalRounds {
		c, ok := canonicalText(s)
		if !ok {
			return ""
		}
		if utf8.RuneCountInString(c) <= maxCodePoints {
			return c
		}
		// Cut and canonicalise again: the cut may leave a trailing space or
		// a sequence that is no longer NFC.
		s = string([]rune(c)[:maxCodePoints])
	}
	return ""
}
