package shellsafe

import (
	"fmt"
	"path"
	"strings"
)

// program is the rule of one allowed program.
type program struct {
	// globs allows unquoted glob characters in the arguments. Only programs
	// without any dangerous option allow them: a file name such as
	// "-delete" or "--output=x" becomes an option once a glob expands.
	globs bool
	// check returns why the arguments are not safe, or "".
	check func(prog string, args []word) string
}

// systemDirs are the directories an absolute command name may point into.
var systemDirs = map[string]bool{"/bin": true, "/usr/bin": true, "/usr/local/bin": true}

// resolve returns the allowlist name of a command name: the name itself, or
// the base of an absolute path into a system directory.
func resolve(name string) (string, string) {
	if !strings.Contains(name, "/") {
		return name, ""
	}
	dir, base := path.Split(name)
	if base == "" || !systemDirs[strings.TrimSuffix(dir, "/")] {
		return "", fmt.Sprintf("runs a program outside the system directories (`%s`)", shorten(name))
	}
	return base, ""
}

// notAllowed says why prog, which is not on the allowlist, is refused.
func notAllowed(prog string) string {
	if why, ok := refusals[prog]; ok {
		return fmt.Sprintf("`%s` %s", prog, why)
	}
	for i := 0; i < len(prog); i++ {
		if prog[i] >= 0x80 {
			return fmt.Sprintf("`%s` is not a read-only command (its name is not plain ASCII)", shorten(prog))
		}
	}
	return fmt.Sprintf("`%s` is not a read-only command", shorten(prog))
}

// refusals explains some programs that are left off the allowlist.
var refusals = map[string]string{}

func init() {
	for _, p := range []string{"sudo", "doas", "su", "xargs", "nohup", "nice", "ionice", "timeout", "time",
		"exec", "eval", "command", "builtin", "source", ".", "sh", "bash", "zsh", "dash", "ksh", "fish",
		"stdbuf", "strace", "ltrace", "watch", "parallel", "flock", "chroot", "unshare", "nsenter",
		"setsid", "script", "busybox", "taskset", "ssh"} {
		refusals[p] = "runs another command"
	}
	for _, p := range []string{"less", "more", "most", "man", "vi", "vim", "nvim", "nano", "emacs", "top", "htop"} {
		refusals[p] = "is interactive"
	}
	refusals["sed"] = "can write files (`w`, `-i`)"
	for _, p := range []string{"awk", "gawk", "mawk", "nawk"} {
		refusals[p] = "can run commands and write files"
	}
	refusals["tee"] = "writes to files"
	refusals["cd"] = "changes the directory of the commands after it"
	refusals["curl"] = "reaches the network"
	refusals["wget"] = "reaches the network"
}

// Rules shared by many programs.
var (
	// anyArgs accepts every argument: the program has no option that
	// writes, runs a program or changes state.
	anyArgs = func(string, []word) string { return "" }
	// free is a program with anyArgs that also accepts globs.
	free = &program{globs: true, check: anyArgs}
)

// noArgs accepts the program alone; with arguments it does what why says.
func noArgs(why string) *program {
	return &program{check: func(prog string, args []word) string {
		if len(args) > 0 {
			return fmt.Sprintf("`%s` with arguments %s", prog, why)
		}
		return ""
	}}
}

// denied is an option a program refuses.
type denied struct {
	short byte   // short form, or 0
	long  string // long form without "--", or ""
	why   string
}

// denying accepts every argument but the denied options. A long option is
// refused by any prefix of its name, since getopt_long accepts unambiguous
// abbreviations; a short one anywhere in a cluster ("-uo"). Every argument
// is scanned, even after "--" or where it is another option's value: that can
// only refuse too much.
func denying(deny ...denied) *program {
	return &program{check: func(prog string, args []word) string {
		return scanDenied(prog, args, deny, nil)
	}}
}

// scanDenied returns why the first denied option in args is refused. Long
// names in exact are accepted even when they prefix a denied name.
func scanDenied(prog string, args []word, deny []denied, exact map[string]bool) string {
	for _, a := range args {
		if a.operand() || a.val == "--" {
			continue
		}
		if strings.HasPrefix(a.val, "--") {
			name, _, _ := strings.Cut(a.val[2:], "=")
			if exact[name] {
				continue
			}
			for _, d := range deny {
				if d.long != "" && name != "" && strings.HasPrefix(d.long, name) {
					return fmt.Sprintf("`%s --%s` %s", prog, d.long, d.why)
				}
			}
			continue
		}
		for j := 1; j < len(a.val); j++ {
			for _, d := range deny {
				if d.short != 0 && a.val[j] == d.short {
					return fmt.Sprintf("`%s -%c` %s", prog, d.short, d.why)
				}
			}
		}
	}
	return ""
}

// argKind says whether an option takes a value.
type argKind uint8

const (
	noArg  argKind = iota
	reqArg         // attached (-xV, --x=V) or the next argument
	optArg         // attached only
)

// options is an allowlist of options in getopt style: short options may be
// clustered, long ones are matched exactly (an abbreviation is refused).
type options struct {
	short map[byte]argKind
	long  map[string]argKind
}

// option is one parsed option: "-x" or "--name", and its value if any.
type option struct {
	name  string
	value string
}

// parse splits args into options and operands; bad is the first option that
// is not on the allowlist. Options may follow operands, as with GNU getopt
// and git; "--" ends the options.
func (o options) parse(args []word) (opts []option, operands []word, bad string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a.operand() {
			operands = append(operands, a)
			continue
		}
		if a.val == "--" {
			return opts, append(operands, args[i+1:]...), ""
		}
		if strings.HasPrefix(a.val, "--") {
			name, val, hasVal := strings.Cut(a.val[2:], "=")
			kind, ok := o.long[name]
			if !ok || (kind == noArg && hasVal) {
				return nil, nil, "--" + name
			}
			if kind == reqArg && !hasVal && i+1 < len(args) {
				i++
				val = args[i].val
			}
			opts = append(opts, option{name: "--" + name, value: val})
			continue
		}
		for j := 1; j < len(a.val); j++ {
			ch := a.val[j]
			kind, ok := o.short[ch]
			if !ok {
				return nil, nil, "-" + a.val[j:j+1]
			}
			if kind == noArg {
				opts = append(opts, option{name: "-" + string(ch)})
				continue
			}
			val := a.val[j+1:]
			if val == "" && kind == reqArg && i+1 < len(args) {
				i++
				val = args[i].val
			}
			opts = append(opts, option{name: "-" + string(ch), value: val})
			break
		}
	}
	return opts, operands, ""
}

// has reports whether opts holds one of names.
func has(opts []option, names ...string) bool {
	for _, o := range opts {
		for _, n := range names {
			if o.name == n {
				return true
			}
		}
	}
	return false
}

// badOption explains a refused option of prog, with the reasons known for
// some of them.
func badOption(prog, opt string, known map[string]string) string {
	if why, ok := known[opt]; ok {
		return fmt.Sprintf("`%s %s` %s", prog, opt, why)
	}
	return fmt.Sprintf("`%s %s` is not an allowed option", prog, shorten(opt))
}

// programs is the allowlist.
var programs = map[string]*program{
	"ls": free, "pwd": free, "cat": free, "head": free, "wc": free, "stat": free,
	"du": free, "df": free, "echo": free, "true": free, "false": free, "which": free,
	"type": free, "basename": free, "dirname": free, "realpath": free, "readlink": free,
	"uname": free, "whoami": free, "id": free, "printenv": free, "nproc": free,
	"cut": free, "tr": free, "nl": free, "tac": free, "rev": free, "fold": free,
	"column": free, "diff": free, "cmp": free, "comm": free,
	"md5sum": free, "sha1sum": free, "sha224sum": free, "sha256sum": free,
	"sha384sum": free, "sha512sum": free, "b2sum": free, "cksum": free,
	"grep": free, "egrep": free, "fgrep": free, "jq": free,

	"env":      noArgs("runs a command"),
	"hostname": noArgs("sets the host name"),

	"tail": {check: checkTail},
	"sort": denying(
		denied{'o', "output", "writes to a file"},
		denied{'T', "temporary-directory", "writes temporary files"},
		denied{0, "compress-program", "runs a program"},
	),
	"file": denying(denied{'C', "compile", "writes a compiled magic file"}),
	"tree": denying(
		denied{'o', "output", "writes to a file"},
		denied{'R', "", "writes a file into each directory"},
	),
	"rg": denying(
		denied{0, "pre", "runs a program on each file"},
		denied{0, "hostname-bin", "runs a program"},
	),
	"printf": denying(denied{'v', "", "sets a variable"}),
	"date":   {check: checkDate},
	"uniq":   {check: checkUniq},
	"find":   {check: checkFind},
	"git":    {check: checkGit},
	"go":     {check: checkGo},
}

// checkTail refuses following a file: the command would never return.
func checkTail(prog string, args []word) string {
	why := scanDenied(prog, args, []denied{
		{'f', "follow", "never returns"},
		{'F', "", "never returns"},
		{0, "retry", "keeps waiting for a file"},
		{0, "pid", "follows a file"},
		{0, "sleep-interval", "follows a file"},
		{0, "max-unchanged-stats", "follows a file"},
	}, nil)
	if why != "" {
		return why
	}
	for _, a := range args {
		if strings.HasPrefix(a.val, "+") && strings.Contains(a.val, "f") {
			return fmt.Sprintf("`%s %s` may follow the file and never return", prog, shorten(a.val))
		}
	}
	return ""
}

var dateOptions = options{
	short: map[byte]argKind{'d': reqArg, 'f': reqArg, 'I': optArg, 'R': noArg, 'r': reqArg, 'u': noArg},
	long: map[string]argKind{"date": reqArg, "debug": noArg, "file": reqArg, "iso-8601": optArg,
		"resolution": noArg, "rfc-email": noArg, "rfc-3339": reqArg, "reference": reqArg,
		"utc": noArg, "universal": noArg, "help": noArg, "version": noArg},
}

// checkDate allows printing dates: a date operand or -s sets the clock.
func checkDate(prog string, args []word) string {
	_, operands, bad := dateOptions.parse(args)
	if bad != "" {
		return badOption(prog, bad, map[string]string{"-s": "sets the clock", "--set": "sets the clock"})
	}
	for _, a := range operands {
		if !strings.HasPrefix(a.val, "+") {
			return fmt.Sprintf("`%s %s` sets the clock", prog, shorten(a.val))
		}
	}
	return ""
}

var uniqOptions = options{
	short: map[byte]argKind{'c': noArg, 'd': noArg, 'D': noArg, 'f': reqArg, 'i': noArg,
		's': reqArg, 'u': noArg, 'z': noArg, 'w': reqArg},
	long: map[string]argKind{"count": noArg, "repeated": noArg, "all-repeated": optArg,
		"skip-fields": reqArg, "group": optArg, "ignore-case": noArg, "skip-chars": reqArg,
		"unique": noArg, "zero-terminated": noArg, "check-chars": reqArg, "help": noArg, "version": noArg},
}

// checkUniq allows at most one file operand: a second one is the output.
func checkUniq(prog string, args []word) string {
	_, operands, bad := uniqOptions.parse(args)
	if bad != "" {
		return badOption(prog, bad, nil)
	}
	if len(operands) > 1 {
		return fmt.Sprintf("`%s` with a second file writes to it", prog)
	}
	return ""
}

// findActions are the find primaries that write, delete or run programs.
var findActions = map[string]string{
	"-exec":    "runs a command",
	"-execdir": "runs a command",
	"-ok":      "runs a command",
	"-okdir":   "runs a command",
	"-delete":  "deletes files",
	"-fprint":  "writes to a file",
	"-fprint0": "writes to a file",
	"-fprintf": "writes to a file",
	"-fls":     "writes to a file",
}

// checkFind refuses the primaries that act. Every argument is checked, even
// where it is another primary's value, which can only refuse too much.
func checkFind(prog string, args []word) string {
	for _, a := range args {
		if why, ok := findActions[a.val]; ok && !a.tilde {
			return fmt.Sprintf("`%s %s` %s", prog, a.val, why)
		}
	}
	return ""
}
