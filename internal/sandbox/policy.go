// Package sandbox confines and contains the processes of one Bash call. Every
// call runs under a per-call helper (the host executable, maka-host, re-run with
// HelperArg) that is a child subreaper: whatever the command forks, setsid or
// daemonises stays its descendant and is killed when the call returns, is
// stopped or times out, or the host exits. Where the kernel has Landlock,
// the helper also restricts itself (and so the command) to the call's
// Policy before it runs the shell.
package sandbox

// Mode is how much of the machine a sandboxed command may change.
type Mode string

// Sandbox modes (maka run --sandbox).
const (
	// Off runs the command unconfined (still contained: nothing of it
	// outlives the call).
	Off Mode = "off"
	// WorkspaceWrite lets the command write under the workspace and the
	// temporary directory only.
	WorkspaceWrite Mode = "workspace-write"
	// ReadOnly lets the command write nothing but the null devices.
	ReadOnly Mode = "read-only"
)

// Modes lists the sandbox modes.
var Modes = []Mode{Off, WorkspaceWrite, ReadOnly}

// ParseMode parses a sandbox mode name.
func ParseMode(s string) (Mode, bool) {
	for _, m := range Modes {
		if string(m) == s {
			return m, true
		}
	}
	return "", false
}

// Policy is what one call's processes may do.
type Policy struct {
	// Mode is the confinement; the zero value is Off.
	Mode Mode
	// Workspace is the session workspace (absolute): writable under
	// WorkspaceWrite, readable always.
	Workspace string
	// Hidden are paths the command may neither read nor write, whatever
	// else is granted: the storage root, the control directory, the
	// credentials file. Grants are built around them.
	Hidden []string
	// Network allows TCP connect and bind; the default policy has none.
	Network bool
	// TempDir is the temporary directory, writable under WorkspaceWrite;
	// empty means the host's os.TempDir().
	TempDir string
}

// Confined reports whether the policy asks for a sandbox at all.
func (p Policy) Confined() bool { return p.Mode == WorkspaceWrite || p.Mode == ReadOnly }
