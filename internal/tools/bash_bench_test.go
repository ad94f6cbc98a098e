package tools

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/maka-agent/maka/internal/sandbox"
)

// BenchmarkBashCall measures one Bash tool call of `true` as the agent
// makes it: unconfined (the per-call helper that contains the command),
// sandboxed with Landlock, and, for comparison, a bare bash started the way
// the tool started it before the helper existed.
func BenchmarkBashCall(b *testing.B) {
	env := newEnv(b)
	args := json.RawMessage(`{"command":"true"}`)
	run := func(b *testing.B, box sandbox.Mode) {
		env := env
		env.Sandbox = sandbox.Policy{Mode: box, Workspace: env.Workspace}
		for b.Loop() {
			res, err := bashTool{}.Run(context.Background(), env, args)
			if err != nil || res.IsError {
				b.Fatalf("%v %s", err, res.ModelText)
			}
		}
	}
	b.Run("bare-bash", func(b *testing.B) {
		shell, err := shellPath()
		if err != nil {
			b.Skip(err)
		}
		for b.Loop() {
			if err := exec.Command(shell, "-c", "true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("contained", func(b *testing.B) { run(b, sandbox.Off) })
	b.Run("workspace-write", func(b *testing.B) {
		if st := sandbox.Status(); !st.Available {
			b.Skipf("landlock unavailable: %s", st.Reason)
		}
		run(b, sandbox.WorkspaceWrite)
	})
}
