package shellsafe

import (
	"strings"
	"testing"

	"mvdan.cc/sh/v3/syntax"
)

// FuzzClassify checks that Classify never panics, gives a one-line reason
// exactly when it refuses, and that a safe verdict holds up against the
// parse tree checked independently: the command parses, has only simple
// commands joined by pipes and lists, no expansion, assignment or
// background job, only the allowed redirections, each of its commands alone
// is safe, and an unsafe command before or after it makes it unsafe.
func FuzzClassify(f *testing.F) {
	for _, s := range safeCommands {
		f.Add(s)
	}
	for _, s := range []string{
		"rm x", "ls > out", "cat a; rm b", "cat $(rm x)", "cat `rm x`", "find . -exec rm {} \\;",
		"git -c core.pager=sh log", "FOO=1 ls", "$CMD", "ls &", "(ls)", "{ ls; }", "echo a\nrm b",
		"tail -f log", "sort -o out f", "env rm x", "git log --output=/tmp/x", "ls <(rm x)",
		"echo > /dev/null; rm x", "\u217cs", "ls 'x", "ls {a,-la}", "ls ~root", "cat < /dev/tcp/h/1",
		"ls \\\nrm", "git branch -D x", "uniq a b", "date 0101", "go list example.com/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, command string) {
		v := Classify(command)
		if v != Classify(command) {
			t.Fatalf("Classify(%q) is not deterministic", command)
		}
		if v.Safe != (v.Reason == "") {
			t.Fatalf("Classify(%q) = %+v: a reason must be given exactly when unsafe", command, v)
		}
		if strings.ContainsAny(v.Reason, "\n\r") {
			t.Fatalf("Classify(%q).Reason = %q spans lines", command, v.Reason)
		}
		if !v.Safe {
			return
		}
		file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(command), "")
		if err != nil {
			t.Fatalf("Classify(%q) is safe but it does not parse: %v", command, err)
		}
		var calls []*syntax.Stmt
		syntax.Walk(file, func(n syntax.Node) bool {
			switch x := n.(type) {
			case *syntax.Stmt:
				if x.Background || x.Coprocess || x.Disown {
					t.Fatalf("Classify(%q) is safe with a background job", command)
				}
				if _, ok := x.Cmd.(*syntax.CallExpr); ok {
					calls = append(calls, x)
				}
			case *syntax.File, *syntax.CallExpr, *syntax.BinaryCmd, *syntax.TimeClause, *syntax.Word,
				*syntax.Lit, *syntax.SglQuoted, *syntax.DblQuoted, *syntax.Comment:
			case *syntax.Redirect:
				if !allowedRedirect(x) {
					t.Fatalf("Classify(%q) is safe with the redirection %v %q", command, x.Op, x.Word.Lit())
				}
			case nil:
			default:
				t.Fatalf("Classify(%q) is safe with a %T", command, n)
			}
			return true
		})
		if len(calls) == 0 {
			t.Fatalf("Classify(%q) is safe without a command", command)
		}
		for _, s := range calls {
			part := command[s.Pos().Offset():s.End().Offset()]
			if !Classify(part).Safe {
				t.Fatalf("Classify(%q) is safe but its command %q is not: %s", command, part, Classify(part).Reason)
			}
		}
		for _, joined := range []string{command + "\n;rm -rf x", "rm -rf x;" + command} {
			if Classify(joined).Safe {
				t.Fatalf("Classify(%q) is safe: the unsafe command was overlooked", joined)
			}
		}
	})
}

// allowedRedirect is the redirection rule restated: read, duplicate or close
// a standard descriptor, or write to /dev/null.
func allowedRedirect(r *syntax.Redirect) bool {
	if r.N != nil && strings.Trim(r.N.Value, "0123456789") != "" {
		return false
	}
	switch r.Op {
	case syntax.RdrIn, syntax.WordHdoc:
		return true
	case syntax.DplIn, syntax.DplOut:
		switch r.Word.Lit() {
		case "0", "1", "2", "-":
			return true
		}
	case syntax.RdrOut, syntax.AppOut, syntax.RdrClob, syntax.RdrAll, syntax.AppAll:
		return r.Word.Lit() == "/dev/null"
	}
	return false
}
