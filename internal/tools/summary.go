package tools

import (
	"encoding/json"
	"github.com/maka-agent/maka/protocol"
	"strings"
	"unicode"
)

// SummaryMaxBytes bounds a call summary (the wire bound of a tool event's
// display name).
const SummaryMaxBytes = 256

// Summary is a one-line, secret-free description of a call for people
// watching it: the command of a Bash call, the path of a file tool, the
// pattern of a search, the URL of a fetch; "" for other tools. Control
// characters and line breaks become spaces, secrets are redacted, and it is
// cut to SummaryMaxBytes on a character boundary.
func Summary(tool Tool, args json.RawMessage) string {
	var s string
	switch tool.Name() {
	case NameBash:
		s = stringArg(args, "command")
	case NameRead, NameWrite, NameEdit:
		s = stringArg(args, "path")
	case NameWebFetch:
		s = stringArg(args, "url")
	case NameGlob, NameGrep:
		s = stringArg(args, "pattern")
		if p := stringArg(args, "path"); p != "" {
			s += " in " + p
		}
	default:
		return ""
	}
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	s = Redact(s)
	if len(s) > SummaryMaxBytes {
		s = protocol.TruncateUTF8(s, SummaryMaxBytes-len("…")) + "…"
	}
	return s
}
