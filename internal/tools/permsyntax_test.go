package tools

import (
	"slices"
	"testing"

	"github.com/maka-agent/maka/internal/permsyntax"
	"github.com/maka-agent/maka/internal/sandbox"
)

// The command line checks modes, sandbox modes and rule categories with
// permsyntax: its lists are the engine's.
func TestPermsyntaxIsTheEngines(t *testing.T) {
	for cat := range permissionMatrix {
		if !permsyntax.KnownCategory(cat) {
			t.Errorf("permsyntax does not know the category %q", cat)
		}
	}
	if permsyntax.KnownCategory("nope") {
		t.Error("permsyntax knows the category nope")
	}
	var modes []string
	for _, m := range Modes {
		modes = append(modes, string(m))
	}
	if !slices.Equal(modes, permsyntax.Modes) {
		t.Errorf("modes %q, permsyntax has %q", modes, permsyntax.Modes)
	}
	var sm []string
	for _, m := range sandbox.Modes {
		sm = append(sm, string(m))
	}
	if !slices.Equal(sm, permsyntax.SandboxModes) {
		t.Errorf("sandbox modes %q, permsyntax has %q", sm, permsyntax.SandboxModes)
	}
}
