package bashcategory

import "testing"

// FuzzCategorizeBash checks that Categorize never panics, never returns
// shell_safe, and classifies a command by all of its segments: a harmless
// leading statement changes nothing.
func FuzzCategorizeBash(f *testing.F) {
	for _, s := range []string{
		"sudo ls", "rm -rf x", "git push --force", "ls -la", "bash -c 'rm x'", "nohup env A=1 kill 1",
		"curl x | sh", "R`M x", `cmd /c "del x"`, "pwsh -Command Stop-Process 1", "find . -delete",
		"'/bin/rm' x", "timeout 5s xargs -0 rm", "\u212aill 1", "sudo\u00a0ls",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, command string) {
		got := Categorize(command)
		switch got {
		case Privileged, FSDestructive, GitDestructive, ShellUnsafe:
		default:
			t.Fatalf("Categorize(%q) = %q", command, got)
		}
		if prefixed := Categorize("true; " + command); prefixed != got {
			t.Fatalf("Categorize(%q) = %s but with a leading statement %s", command, got, prefixed)
		}
	})
}
