package prompt

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/template"
	"time"
)

//go:embed system.md
var systemText string

// system is the tool-use part of every system prompt, parsed on first use.
var system = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("system.md").Parse(systemText))
})

// Input is what one turn's prompt is built from.
type Input struct {
	// Workspace is the session's workspace (absolute).
	Workspace string
	// UserDir is the directory of the user's own AGENTS.md
	// (${XDG_CONFIG_HOME:-~/.config}/maka, see UserDir); "" reads none.
	UserDir string
	// Protected are the host's own paths (storage root, control
	// directory): nothing in or under them is read.
	Protected []string
	// Now is the turn's clock reading; its date is today's date.
	Now time.Time
	// Shell is the shell Bash runs commands with ("": not known).
	Shell string
	// Mode is the session's permission mode.
	Mode string
	// Sandbox is the sandbox Bash calls run in ("" or "off": none).
	Sandbox string
	// Tools are the names of the tools the turn offers the model.
	Tools []string
}

// Note says why an instruction file was left out, or where the
// instructions were cut; the host logs it.
type Note struct {
	Path   string
	Reason string
}

// Notes are the notes of one Build.
type Notes []Note

// Log writes each note to log.
func (n Notes) Log(log *slog.Logger, args ...any) {
	for _, note := range n {
		log.Warn("instruction file left out of the system prompt", append(args, "path", note.Path, "reason", note.Reason)...)
	}
}

// Builder builds system prompts; it keeps the instruction files it read,
// by path, until they change. It is safe for concurrent use.
type Builder struct {
	files fileCache
	// git reports the repository state of a directory (gitStatus).
	git func(ctx context.Context, dir string) gitState
}

// New returns a Builder.
func New() *Builder {
	return &Builder{git: gitStatus}
}

// Build returns the system prompt of a turn and the notes on what it left
// out: the tool-use instructions, the instruction files, then the
// environment (last, as it changes most often).
func (b *Builder) Build(ctx context.Context, in Input) (string, Notes) {
	var sb strings.Builder
	sb.WriteString(strings.TrimSpace(toolSection(in.Tools)))
	instr, notes := b.instructions(in)
	if instr != "" {
		sb.WriteString("\n\n")
		sb.WriteString(instr)
	}
	sb.WriteString("\n\n")
	sb.WriteString(b.environment(ctx, in))
	return sb.String(), notes
}

// toolData is what system.md is rendered with.
type toolData struct {
	names  []string
	Tasks  string   // the task tools, comma-separated
	Others []string // the lines of the tools system.md does not describe
}

// Has reports whether the turn offers the tool name.
func (d toolData) Has(name string) bool { return slices.Contains(d.names, name) }

// toolSection renders system.md for the turn's tools.
func toolSection(names []string) string {
	builtin := []string{"Read", "Glob", "Grep", "Edit", "Write", "Bash", "WebFetch", "AskUserQuestion"}
	var tasks, others []string
	for _, n := range names {
		switch {
		case slices.Contains(builtin, n):
		case strings.HasPrefix(strings.ToLower(n), "task"):
			tasks = append(tasks, n)
		default:
			others = append(others, n+": see its description.")
		}
	}
	data := toolData{names: names, Tasks: strings.Join(tasks, ", "), Others: others}
	var sb strings.Builder
	if err := system().Execute(&sb, data); err != nil {
		// The template is fixed and its data always fits it.
		panic(fmt.Sprintf("prompt: system.md: %v", err))
	}
	return sb.String()
}

// environment is the block describing where the turn runs.
func (b *Builder) environment(ctx context.Context, in Input) string {
	var sb strings.Builder
	line := func(format string, args ...any) {
		fmt.Fprintf(&sb, "\n- "+format, args...)
	}
	sb.WriteString("# Environment")
	line("Workspace: %s", in.Workspace)
	line("Platform: %s/%s", runtime.GOOS, runtime.GOARCH)
	if in.Shell != "" {
		line("Shell of the Bash tool: %s", in.Shell)
	}
	if !in.Now.IsZero() {
		line("Today's date: %s", in.Now.Format("2006-01-02 (Monday)"))
	}
	switch g := b.git(ctx, in.Workspace); {
	case !g.Repo:
		line("Git: the workspace is not in a git repository")
	case g.Branch == "":
		line("Git: a repository (its state could not be read)")
	case g.Changed < 0:
		line("Git: a repository, branch %s", g.Branch)
	default:
		line("Git: a repository, branch %s, %d changed files", g.Branch, g.Changed)
	}
	if in.Mode != "" {
		line("Permission mode: %s (%s)", in.Mode, modeMeaning(in.Mode))
	}
	if in.Sandbox == "" || in.Sandbox == "off" {
		line("Sandbox: not in force; Bash commands run with the user's own rights")
	} else {
		line("Sandbox: in force for Bash (%s)", in.Sandbox)
	}
	return sb.String()
}

// modeMeaning says in a few words what a permission mode lets through.
func modeMeaning(mode string) string {
	switch mode {
	case "explore":
		return "read-only: tools that change files or run unsafe commands are refused"
	case "ask":
		return "the user approves each change and each command that is not read-only"
	case "execute":
		return "edits and sandboxed commands run without asking; the rest asks the user"
	case "bypass":
		return "every tool call runs without asking, unless a rule denies it"
	}
	return "unknown"
}
