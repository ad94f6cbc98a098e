package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
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

// hostOnly are the packages only the runtime host (cmd/maka-host) may
// link: the store's SQLite, the model SDKs, the MCP SDK, the web page
// converter, the Landlock library and the host's own packages. A client
// that links them pays for their code and tables in every command.
var hostOnly = []string{
	"modernc.org/sqlite",
	"modernc.org/libc",
	"github.com/openai/openai-go",
	"github.com/anthropics/anthropic-sdk-go",
	"github.com/modelcontextprotocol/go-sdk",
	"github.com/JohannesKaufmann/html-to-markdown",
	"github.com/landlock-lsm/go-landlock",
	"github.com/maka-agent/maka/internal/domain",
	"github.com/maka-agent/maka/internal/host",
	"github.com/maka-agent/maka/internal/hostproc",
	"github.com/maka-agent/maka/internal/store",
	"github.com/maka-agent/maka/internal/model",
	"github.com/maka-agent/maka/internal/tools",
	"github.com/maka-agent/maka/internal/sandbox",
	"github.com/maka-agent/maka/internal/turns",
	"github.com/maka-agent/maka/internal/mcp",
	"github.com/maka-agent/maka/internal/config",
}

// clientPackages are the packages of this module a client (maka, and
// maka-tui with internal/tui) may link: the protocol, the client, the
// command line and the small packages they share with the host. Any other
// package of the module is the host's; a new one a client needs is added
// here on purpose.
var clientPackages = map[string]bool{
	"github.com/maka-agent/maka/cmd/maka":               true,
	"github.com/maka-agent/maka/cmd/maka-tui":           true,
	"github.com/maka-agent/maka/client":                 true,
	"github.com/maka-agent/maka/protocol":               true,
	"github.com/maka-agent/maka/internal/cli":           true,
	"github.com/maka-agent/maka/internal/tui":           true,
	"github.com/maka-agent/maka/internal/baseurl":       true,
	"github.com/maka-agent/maka/internal/bashcategory":  true,
	"github.com/maka-agent/maka/internal/wireredact":    true,
	"github.com/maka-agent/maka/internal/storageroot":   true,
	"github.com/maka-agent/maka/internal/control":       true,
	"github.com/maka-agent/maka/internal/peercred":      true,
	"github.com/maka-agent/maka/internal/transport":     true,
	"github.com/maka-agent/maka/internal/exitcode":      true,
	"github.com/maka-agent/maka/internal/landlockprobe": true,
	"github.com/maka-agent/maka/internal/permsyntax":    true,
	"github.com/maka-agent/maka/internal/providerinfo":  true,
}

// Of this module, the clients link only clientPackages.
func TestClientsLinkOnlyClientPackages(t *testing.T) {
	for _, client := range []string{"cmd/maka", "cmd/maka-tui"} {
		for _, d := range goListDeps(t, "github.com/maka-agent/maka/"+client) {
			if linked(d, "github.com/maka-agent/maka") && !clientPackages[d] {
				t.Errorf("%s links %s, which is not one of the client's packages (cmd/maka/deps_test.go)", client, d)
			}
		}
	}
	if tui := goListDeps(t, "github.com/maka-agent/maka/cmd/maka-tui"); !slices.Contains(tui, "github.com/maka-agent/maka/internal/tui") {
		t.Errorf("cmd/maka-tui does not link internal/tui: the dependency list is not what this test expects")
	}
}

// linked reports whether dep is pkg or one of its subpackages (or, for a
// prefix ending in "/", under it).
func linked(dep, pkg string) bool {
	return dep == pkg || strings.HasPrefix(dep, pkg+"/") || strings.HasSuffix(pkg, "/") && strings.HasPrefix(dep, pkg)
}

// Neither maka nor maka-tui links the runtime host: they start maka-host.
func TestClientsDoNotLinkTheHost(t *testing.T) {
	for _, client := range []string{"cmd/maka", "cmd/maka-tui"} {
		for _, d := range goListDeps(t, "github.com/maka-agent/maka/"+client) {
			for _, p := range hostOnly {
				if linked(d, p) {
					t.Errorf("%s links %s; the runtime host's packages belong to cmd/maka-host only", client, d)
				}
			}
		}
	}
	// The check can fail: the host does link them.
	host := goListDeps(t, "github.com/maka-agent/maka/cmd/maka-host")
	for _, p := range []string{"modernc.org/sqlite", "github.com/openai/openai-go", "github.com/landlock-lsm/go-landlock", "github.com/maka-agent/maka/internal/domain"} {
		found := false
		for _, d := range host {
			found = found || linked(d, p)
		}
		if !found {
			t.Errorf("cmd/maka-host does not link %s: the dependency list is not what this test expects", p)
		}
	}
	for _, d := range host {
		for _, p := range tuiOnly {
			if strings.HasPrefix(d, p) {
				t.Errorf("cmd/maka-host links %s; the terminal UI's packages belong to cmd/maka-tui only", d)
			}
		}
	}
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
