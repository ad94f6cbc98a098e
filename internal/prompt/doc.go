// Package prompt builds the system prompt of one turn: the tool-use
// instructions (system.md, embedded), the instruction files the user and
// the project keep (AGENTS.md, else CLAUDE.md, from the user's config
// directory and from the repository root down to the workspace), and the
// environment the turn runs in (workspace, platform, shell, date, git,
// permission mode, sandbox).
//
// Instruction files are model input that the user controls: they are
// read only from those places, never through a symlink that leaves them,
// never from the host's own protected paths, only when they are regular
// files of valid UTF-8, and at most MaxInstructionBytes in all.
package prompt
