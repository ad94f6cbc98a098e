package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// tuiOnly are the packages only the terminal UI (cmd/maka-tui) may link:
// initialising them costs every maka process (each command, each Bash
// call of the host) milliseconds and megabytes.
var tuiOnly = []string{
	"github.com/maka-agent/maka/internal/tui",
	"github.com/charmbracelet/",
	"github.com/alecthomas/chroma",
	"github.com/microcosm-cc/bluemonday",
	"github.com/gorilla/css",
	"github.com/yuin/goldmark",
	"github.com/atotto/clipboard",
	"github.com/muesli/",
}

func TestMakaDoesNotLinkTheTerminalUI(t *testing.T) {
	deps := goListDeps(t, "github.com/maka-agent/maka/cmd/maka")
	for _, d := range deps {
		for _, p := range tuiOnly {
			if strings.HasPrefix(d, p) {
				t.Errorf("cmd/maka links %s; the terminal UI's packages belong to cmd/maka-tui only", d)
			}
		}
	}
	// The check can fail: the terminal UI does link them.
	found := false
	for _, d := range goListDeps(t, "github.com/maka-agent/maka/cmd/maka-tui") {
		found = found || strings.HasPrefix(d, "github.com/charmbracelet/bubbletea")
	}
	if !found {
		t.Fatal("cmd/maka-tui does not link bubbletea: the dependency list is not what this test expects")
	}
}

func goListDeps(t *testing.T, pkg string) []string {
	t.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(gobin, "list", "-deps", pkg)
	cmd.Env = append(cmd.Environ(), "GOTOOLCHAIN=local")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}
