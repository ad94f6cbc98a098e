package shellsafe

import (
	"fmt"
	"strings"
)

// gitGlobal are the git options accepted before the subcommand. -C takes
// the next argument.
var gitGlobal = map[string]bool{
	"--no-pager": true, "-P": true, "--no-optional-locks": true, "--literal-pathspecs": true,
	"--glob-pathspecs": true, "--noglob-pathspecs": true, "--icase-pathspecs": true,
	"--no-replace-objects": true, "--no-lazy-fetch": true, "--no-advice": true, "--version": true,
}

// gitGlobalRefused explains the global options that are refused by prefix.
var gitGlobalRefused = []struct{ prefix, why string }{
	{"-c", "sets configuration"},
	{"--config-env", "sets configuration"},
	{"--exec-path", "chooses the programs git runs"},
	{"--git-dir", "chooses another repository"},
	{"--work-tree", "chooses another work tree"},
	{"--namespace", "chooses another namespace"},
	{"-p", "runs a pager"},
	{"--paginate", "runs a pager"},
}

// gitDenied are refused in every subcommand. Long names are refused by any
// prefix, since git accepts unambiguous abbreviations.
var gitDenied = []denied{
	{0, "output", "writes to a file"},
	{0, "output-directory", "writes files"},
	{0, "ext-diff", "runs an external diff program"},
	{0, "textconv", "runs a text conversion program"},
	{0, "show-signature", "runs gpg"},
	{0, "open-files-in-pager", "runs a pager"},
	{0, "help", "runs a manual viewer"},
}

// gitExact are long options that prefix a denied name but are safe.
var gitExact = map[string]bool{"text": true}

// gitRead are the subcommands that only read, given the shared denials.
var gitRead = map[string]bool{
	"status": true, "diff": true, "log": true, "show": true, "blame": true, "rev-parse": true,
	"ls-files": true, "describe": true, "shortlog": true, "grep": true, "version": true,
}

// checkGit allows the read-only subcommands and the listing forms of
// branch, tag, remote and config.
func checkGit(prog string, args []word) string {
	i := 0
	for ; i < len(args) && !args[i].operand(); i++ {
		v := args[i].val
		if v == "-C" {
			i++
			continue
		}
		if gitGlobal[v] {
			continue
		}
		for _, r := range gitGlobalRefused {
			if v == r.prefix || (strings.HasPrefix(r.prefix, "--") && strings.HasPrefix(v, r.prefix)) {
				return fmt.Sprintf("`%s %s` %s", prog, r.prefix, r.why)
			}
		}
		if strings.HasPrefix(v, "-c") {
			return fmt.Sprintf("`%s -c` sets configuration", prog)
		}
		return badOption(prog, v, nil)
	}
	if i >= len(args) {
		return ""
	}
	sub := args[i].val
	rest := args[i+1:]
	name := prog + " " + sub
	for _, a := range rest {
		if strings.Contains(a.val, "%G") {
			return fmt.Sprintf("a signature format (`%s`) runs gpg", shorten(a.val))
		}
	}
	if why := scanDenied(name, rest, gitDenied, gitExact); why != "" {
		return why
	}
	switch {
	case sub == "grep":
		return scanDenied(name, rest, []denied{{'O', "", "runs a pager"}}, nil)
	case gitRead[sub]:
		return ""
	case sub == "branch":
		return gitList(name, rest, branchOptions, branchListing, "changes branches")
	case sub == "tag":
		return gitList(name, rest, tagOptions, tagListing, "changes tags")
	case sub == "remote":
		if len(rest) == 0 || (len(rest) == 1 && (rest[0].val == "-v" || rest[0].val == "--verbose")) {
			return ""
		}
		return fmt.Sprintf("`%s` is read-only only as `git remote` or `git remote -v`", name)
	case sub == "config":
		return gitConfig(name, rest)
	}
	return fmt.Sprintf("`%s` is not read-only", shorten(name))
}

var branchOptions = options{
	short: map[byte]argKind{'a': noArg, 'r': noArg, 'v': noArg, 'l': noArg, 'i': noArg},
	long: map[string]argKind{"all": noArg, "remotes": noArg, "verbose": noArg, "list": noArg,
		"show-current": noArg, "merged": optArg, "no-merged": optArg, "contains": optArg,
		"no-contains": optArg, "points-at": reqArg, "sort": reqArg, "column": optArg,
		"no-column": noArg, "color": optArg, "no-color": noArg, "ignore-case": noArg,
		"abbrev": optArg, "no-abbrev": noArg, "omit-empty": noArg},
}

// branchListing are the options that put git branch in list mode, where
// operands are patterns and not new branch names. -l is left out: it once
// meant --create-reflog.
var branchListing = []string{"--list", "--merged", "--no-merged", "--contains", "--no-contains", "--points-at"}

var tagOptions = options{
	short: map[byte]argKind{'l': noArg, 'n': optArg, 'i': noArg},
	long: map[string]argKind{"list": noArg, "sort": reqArg, "contains": optArg, "no-contains": optArg,
		"merged": optArg, "no-merged": optArg, "points-at": reqArg, "column": optArg,
		"no-column": noArg, "color": optArg, "no-color": noArg, "ignore-case": noArg, "omit-empty": noArg},
}

// tagListing are the options that put git tag in list mode.
var tagListing = []string{"-l", "--list", "-n", "--contains", "--no-contains", "--merged", "--no-merged", "--points-at"}

// gitList allows the listing form of branch or tag: listing options only,
// and operands only in list mode, where they are patterns.
func gitList(name string, args []word, o options, listing []string, why string) string {
	opts, operands, bad := o.parse(args)
	if bad != "" {
		return fmt.Sprintf("`%s %s` is not a listing option", name, shorten(bad))
	}
	if len(operands) > 0 && !has(opts, listing...) {
		return fmt.Sprintf("`%s %s` %s", name, shorten(operands[0].val), why)
	}
	return ""
}

var configOptions = options{
	short: map[byte]argKind{'l': noArg, 'f': reqArg, 'z': noArg},
	long: map[string]argKind{"get": noArg, "get-all": noArg, "get-regexp": noArg, "get-urlmatch": noArg,
		"get-color": noArg, "get-colorbool": noArg, "list": noArg, "global": noArg, "system": noArg,
		"local": noArg, "worktree": noArg, "file": reqArg, "blob": reqArg, "show-origin": noArg,
		"show-scope": noArg, "name-only": noArg, "null": noArg, "includes": noArg, "no-includes": noArg,
		"type": reqArg, "bool": noArg, "int": noArg, "bool-or-int": noArg, "path": noArg,
		"expiry-date": noArg, "default": reqArg, "fixed-value": noArg, "all": noArg, "regexp": noArg,
		"value": reqArg, "url": reqArg, "show-names": noArg},
}

// gitConfig allows reading configuration: exactly one of the --get family
// or --list, or the get and list subcommands. Without one of them git config
// sets a value.
func gitConfig(name string, args []word) string {
	opts, operands, bad := configOptions.parse(args)
	if bad != "" {
		return fmt.Sprintf("`%s %s` is not a reading option", name, shorten(bad))
	}
	actions := 0
	limit := 2
	for _, o := range opts {
		switch o.name {
		case "--list", "-l":
			actions++
			limit = 0
		case "--get", "--get-all", "--get-regexp", "--get-urlmatch", "--get-color", "--get-colorbool":
			actions++
		}
	}
	if actions == 0 && len(operands) > 0 {
		switch operands[0].val {
		case "list":
			actions, limit, operands = 1, 0, operands[1:]
		case "get":
			actions, limit, operands = 1, 1, operands[1:]
		}
	}
	if actions != 1 {
		return fmt.Sprintf("`%s` without exactly one of --get or --list can change configuration", name)
	}
	if len(operands) > limit {
		return fmt.Sprintf("`%s` has too many operands for reading", name)
	}
	return ""
}
