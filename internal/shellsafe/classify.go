package shellsafe

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"
)

// MaxLen is the longest command Classify examines; a longer one is unsafe.
const MaxLen = 16 << 10

// Verdict is the result of Classify.
type Verdict struct {
	// Safe reports that the command is read-only by the rules of the package.
	Safe bool
	// Reason says in a few words why the command is not safe; it is empty
	// when Safe is true.
	Reason string
}

func unsafe(reason string) Verdict { return Verdict{Reason: reason} }

// Classify reports whether command, run by bash -c, is read-only by the rules
// described in the package documentation.
func Classify(command string) Verdict {
	if why := checkText(command); why != "" {
		return unsafe(why)
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(command), "")
	if err != nil {
		return unsafe("does not parse as a bash command")
	}
	c := checker{src: command}
	var leaves []*syntax.Stmt
	for _, s := range f.Stmts {
		if why := c.flatten(s, &leaves); why != "" {
			return unsafe(why)
		}
	}
	if len(leaves) == 0 {
		return unsafe("no command")
	}
	for _, s := range leaves {
		if why := c.leaf(s); why != "" {
			if len(leaves) > 1 {
				why += fmt.Sprintf(" (in `%s`, one of %d commands)", c.snippet(s), len(leaves))
			}
			return unsafe(why)
		}
	}
	return Verdict{Safe: true}
}

// checkText refuses what the parser and bash might read differently, or a
// person differently from both: invalid UTF-8, NUL and other control
// characters, invisible format characters, and very long input.
func checkText(s string) string {
	if len(s) > MaxLen {
		return fmt.Sprintf("too long to check (over %d bytes)", MaxLen)
	}
	if !utf8.ValidString(s) {
		return "not valid UTF-8"
	}
	for _, r := range s {
		if r == '\t' || r == '\n' {
			continue
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Sprintf("contains the control character %U", r)
		}
		if unicode.Is(unicode.Cf, r) {
			// Bidirectional controls and other invisible characters make
			// the command read differently from what runs.
			return fmt.Sprintf("contains the invisible character %U", r)
		}
	}
	return ""
}

// checker holds the source of the command being classified.
type checker struct {
	src string
}

// snippet returns the source of n, shortened for a reason.
func (c *checker) snippet(n syntax.Node) string {
	start, end := int(n.Pos().Offset()), int(n.End().Offset())
	if start < 0 || end > len(c.src) || start >= end {
		return "…"
	}
	return shorten(c.src[start:end])
}

// shorten keeps reasons short and on one line.
func shorten(s string) string {
	s = strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "\t", " "))
	const max = 40
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// flatten appends to leaves the simple-command statements of s, following
// pipes, && and || and the time keyword, and refuses every other kind of
// command.
func (c *checker) flatten(s *syntax.Stmt, leaves *[]*syntax.Stmt) string {
	if s.Background || s.Coprocess || s.Disown {
		return "runs in the background (`&`)"
	}
	switch x := s.Cmd.(type) {
	case *syntax.CallExpr:
		*leaves = append(*leaves, s)
		return ""
	case *syntax.BinaryCmd:
		if why := c.redirects(s); why != "" {
			return why
		}
		if why := c.flatten(x.X, leaves); why != "" {
			return why
		}
		return c.flatten(x.Y, leaves)
	case *syntax.TimeClause:
		if why := c.redirects(s); why != "" {
			return why
		}
		if x.Stmt == nil {
			return "`time` without a command"
		}
		return c.flatten(x.Stmt, leaves)
	case nil:
		return "no command"
	case *syntax.Subshell:
		return "a subshell `( … )`"
	case *syntax.Block:
		return "a command group `{ … }`"
	case *syntax.FuncDecl:
		return "a function definition"
	case *syntax.IfClause:
		return "an `if` statement"
	case *syntax.WhileClause, *syntax.ForClause:
		return "a loop"
	case *syntax.CaseClause:
		return "a `case` statement"
	case *syntax.ArithmCmd:
		return "an arithmetic command `(( … ))`"
	case *syntax.TestClause:
		return "a `[[ … ]]` test"
	case *syntax.DeclClause:
		return fmt.Sprintf("`%s` sets variables", x.Variant.Value)
	case *syntax.LetClause:
		return "`let` evaluates arithmetic"
	case *syntax.CoprocClause:
		return "`coproc` runs a command in the background"
	default:
		return "not a simple command"
	}
}

// leaf checks one simple command and its redirections.
func (c *checker) leaf(s *syntax.Stmt) string {
	if why := c.redirects(s); why != "" {
		return why
	}
	return c.call(s.Cmd.(*syntax.CallExpr))
}

// call checks a simple command: its name against the allowlist and its
// arguments against that program's rules.
func (c *checker) call(x *syntax.CallExpr) string {
	if len(x.Assigns) > 0 {
		return fmt.Sprintf("sets an environment variable (`%s`)", c.snippet(x.Assigns[0]))
	}
	if len(x.Args) == 0 {
		return "no command"
	}
	name, why := c.word(x.Args[0])
	if why != "" || name.glob || name.brace || name.tilde {
		return fmt.Sprintf("the command name is not a plain word (`%s`)", c.snippet(x.Args[0]))
	}
	prog, why := resolve(name.val)
	if why != "" {
		return why
	}
	p, ok := programs[prog]
	if !ok {
		return notAllowed(prog)
	}
	args := make([]word, 0, len(x.Args)-1)
	for _, w := range x.Args[1:] {
		a, why := c.word(w)
		if why != "" {
			return why
		}
		if a.brace {
			return fmt.Sprintf("brace expansion (`%s`)", shorten(a.src))
		}
		if a.glob && !p.globs {
			return fmt.Sprintf("a glob in the arguments of `%s` (`%s`): a file name could be read as an option; quote it", prog, shorten(a.src))
		}
		args = append(args, a)
	}
	return p.check(prog, args)
}

// redirects checks the redirections of one statement.
func (c *checker) redirects(s *syntax.Stmt) string {
	for _, r := range s.Redirs {
		if why := c.redirect(r); why != "" {
			return why
		}
	}
	return ""
}

// redirect allows reading, duplicating or closing the standard descriptors
// and writing to /dev/null.
func (c *checker) redirect(r *syntax.Redirect) string {
	text := c.snippet(r)
	if r.N != nil && !isDigits(r.N.Value) {
		return fmt.Sprintf("a redirection to a named descriptor (`%s`)", text)
	}
	if r.Op == syntax.Hdoc || r.Op == syntax.DashHdoc {
		return "a here-document"
	}
	if r.Word == nil {
		return fmt.Sprintf("an unsupported redirection (`%s`)", text)
	}
	w, why := c.word(r.Word)
	if why != "" {
		return why
	}
	if w.glob || w.brace {
		return fmt.Sprintf("a pattern as a redirection target (`%s`)", text)
	}
	switch r.Op {
	case syntax.RdrIn:
		if strings.HasPrefix(w.val, "/dev/") && w.val != "/dev/null" {
			if strings.HasPrefix(w.val, "/dev/tcp/") || strings.HasPrefix(w.val, "/dev/udp/") {
				return fmt.Sprintf("a network redirection (`%s`)", text)
			}
			return fmt.Sprintf("a redirection from a device (`%s`)", text)
		}
		return ""
	case syntax.WordHdoc:
		return ""
	case syntax.DplIn, syntax.DplOut:
		// The target must be written plainly: a quoted descriptor is
		// refused, which can only refuse too much.
		switch r.Word.Lit() {
		case "-", "0", "1", "2":
			return ""
		}
		if isDigits(w.val) {
			return fmt.Sprintf("a redirection to a descriptor other than 0, 1 or 2 (`%s`)", text)
		}
		return fmt.Sprintf("writes to a file (`%s`)", text)
	case syntax.RdrOut, syntax.AppOut, syntax.RdrClob, syntax.RdrAll, syntax.AppAll:
		if r.Word.Lit() == "/dev/null" {
			return ""
		}
		return fmt.Sprintf("writes to a file (`%s`)", text)
	case syntax.RdrInOut:
		return fmt.Sprintf("opens a file for writing (`%s`)", text)
	default:
		return fmt.Sprintf("an unsupported redirection (`%s`)", text)
	}
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// word is one shell word whose value is fixed by its text.
type word struct {
	// val is the word after quote removal. A leading "~" is kept as is.
	val string
	// src is the word as written.
	src string
	// glob reports an unquoted *, ? or [: pathname expansion may replace
	// the word with file names.
	glob bool
	// brace reports an unquoted { in a word with a comma or "..": brace
	// expansion may turn it into several words.
	brace bool
	// tilde reports a leading unquoted ~: the word expands to a path.
	tilde bool
}

// operand reports whether the word cannot be read as an option.
func (w word) operand() bool {
	return w.tilde || w.val == "-" || !strings.HasPrefix(w.val, "-")
}

// word evaluates w, or says why its value is not fixed by its text.
func (c *checker) word(w *syntax.Word) (word, string) {
	out := word{src: c.snippet(w)}
	var b strings.Builder
	openBrace := false
	for i, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			v := p.Value
			for j := 0; j < len(v); j++ {
				ch := v[j]
				if ch == '\\' {
					if j+1 < len(v) {
						j++
						b.WriteByte(v[j])
					} else {
						b.WriteByte(ch)
					}
					continue
				}
				switch ch {
				case '*', '?', '[':
					out.glob = true
				case '{':
					openBrace = true
				case '~':
					if i == 0 && j == 0 {
						out.tilde = true
						rest := v[1:]
						if len(w.Parts) > 1 && rest == "" {
							return out, fmt.Sprintf("tilde expansion other than `~` or `~/` (`%s`)", out.src)
						}
						if rest != "" && rest[0] != '/' {
							return out, fmt.Sprintf("tilde expansion other than `~` or `~/` (`%s`)", out.src)
						}
					}
				}
				b.WriteByte(ch)
			}
		case *syntax.SglQuoted:
			if p.Dollar {
				return out, fmt.Sprintf("ANSI-C quoting (`%s`)", out.src)
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				return out, fmt.Sprintf("locale quoting (`%s`)", out.src)
			}
			for _, q := range p.Parts {
				lit, ok := q.(*syntax.Lit)
				if !ok {
					return out, expansion(q, out.src)
				}
				v := lit.Value
				for j := 0; j < len(v); j++ {
					if v[j] == '\\' && j+1 < len(v) && strings.IndexByte("$`\"\\", v[j+1]) >= 0 {
						j++
					}
					b.WriteByte(v[j])
				}
			}
		default:
			return out, expansion(part, out.src)
		}
	}
	out.val = b.String()
	if openBrace && (strings.Contains(out.val, ",") || strings.Contains(out.val, "..")) {
		out.brace = true
	}
	return out, ""
}

// expansion names the expansion that makes a word's value unknown.
func expansion(p syntax.WordPart, src string) string {
	src = shorten(src)
	switch p.(type) {
	case *syntax.CmdSubst:
		return fmt.Sprintf("command substitution (`%s`)", src)
	case *syntax.ProcSubst:
		return fmt.Sprintf("process substitution (`%s`)", src)
	case *syntax.ParamExp:
		return fmt.Sprintf("parameter expansion (`%s`)", src)
	case *syntax.ArithmExp:
		return fmt.Sprintf("arithmetic expansion (`%s`)", src)
	case *syntax.ExtGlob:
		return fmt.Sprintf("an extended glob (`%s`)", src)
	default:
		return fmt.Sprintf("an unsupported expansion (`%s`)", src)
	}
}
