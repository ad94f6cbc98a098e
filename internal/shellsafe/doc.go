// Package shellsafe decides whether a Bash command is read-only enough to be
// treated as shell_safe: it runs no program that writes, deletes, executes
// another program or talks to the network, as far as its text shows.
//
// The classifier is deliberately conservative. A false "unsafe" costs one
// permission prompt; a false "safe" costs the user's trust, so whatever it
// cannot prove harmless from the text alone is unsafe. Classify parses the
// command with a real bash parser (mvdan.cc/sh/v3/syntax) and accepts it only
// when all of the following hold:
//
//   - It is valid UTF-8 with no control character other than tab and newline
//     and no invisible format character (such as a bidirectional override),
//     at most MaxLen bytes, and parses as bash.
//   - Every command is a simple command. Commands may be joined by pipes (|,
//     |&), by && and ||, and by ; or newlines, and such a list is safe only
//     when every single command in it is: "ls; rm x" runs rm too. A leading
//     "!" and the time keyword around a safe command are accepted; background
//     jobs (&), subshells, { } groups, functions, loops, if, case, [[ ]],
//     (( )), coproc, let, declare and export are not.
//   - Every word is fixed by its text: plain words, single-quoted and
//     double-quoted literals. There is no command or process substitution, no
//     parameter or arithmetic expansion (the value of $X is only known when
//     the command runs; "~" and "~/..." stand in for the home directory), no
//     ANSI-C or locale quoting ($'...', $"..."), no brace expansion, no
//     extended glob and no assignment prefix (FOO=1 cmd).
//   - The command name is a plain word: a name from the allowlist, or an
//     absolute path into /bin, /usr/bin or /usr/local/bin whose base name is
//     on the allowlist. Unquoted glob characters (* ? [) in the arguments are
//     accepted only for programs that have no dangerous option at all, since
//     a file name such as "--output=x" would otherwise become an option.
//   - Redirections only read (< file, <<< word), duplicate or close the
//     standard descriptors (2>&1, >&2, 2>&-) or write to /dev/null (>, >>, >|,
//     &>, &>> /dev/null). Any other output redirection, <> and here-documents
//     are unsafe, and so are bash's network paths (/dev/tcp, /dev/udp) and
//     other /dev paths as redirection targets.
//   - Each program's arguments pass that program's own rules (see programs.go,
//     git.go and gocmd.go): options that write a file, run a program, follow a
//     file forever or change state are refused. Long options are refused by
//     any prefix, because GNU getopt and git accept unambiguous abbreviations
//     ("sort --out=x" is "sort --output=x"); programs where safe and unsafe
//     uses differ by operands (date, uniq, git branch, git config, go list)
//     are checked against an allowlist of options instead.
//
// The classifier sees only the command line. What a program does because of
// its configuration or environment is outside it: git runs programs named in
// the repository's or the user's configuration (core.fsmonitor on status, a
// diff driver's textconv or command and diff.external on diff, a clean
// filter, gpg.program when log.showSignature is set, core.pager when the
// output is a terminal); rg reads RIPGREP_CONFIG_PATH; go may download the
// toolchain named by go.mod; bash may import functions from the environment.
// Read-only is also not confidential: cat can print a secret, and can print a
// huge file. Because git obeys .git/config, a mode that lets file writes
// through without a prompt must not also let shell_safe git commands through
// without one: a written core.fsmonitor would run on the next git status.
//
// The rules assume bash, which the Bash tool runs when it is on PATH; under
// the sh fallback, |& and <<< are syntax errors and "cmd &>/dev/null" runs
// cmd in the background with its output not redirected, which is no worse.
package shellsafe
