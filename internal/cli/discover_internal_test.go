package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/domaintest"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// With no connection, a run finds a local model server on loopback and
// gives the exact line that adds it.
func TestDiscoverLocalOffersTheServerItFinds(t *testing.T) {
	srv := modeltest.New(t, func(*modeltest.Request) modeltest.Reply { return modeltest.Reply{} })
	srv.SetModels("qwen3", "llama3")
	silent := modeltest.New(t, func(*modeltest.Request) modeltest.Reply { return modeltest.Reply{} })
	found := discoverLocal(t.Context(), []localServer{
		{Name: "nothing", Provider: "openai-compatible", BaseURL: "http://127.0.0.1:1/v1"},
		{Name: "no listing", Provider: "openai-compatible", BaseURL: silent.BaseURL()},
		{Name: "a llama.cpp server", Provider: "openai-compatible", BaseURL: srv.BaseURL()},
	})
	if len(found) != 1 || found[0].Name != "a llama.cpp server" || strings.Join(found[0].Models, ",") != "qwen3,llama3" {
		t.Fatalf("found %+v", found)
	}
	want := "maka connection add local --root /r --provider openai-compatible --base-url " + srv.BaseURL() + " --model qwen3 --no-key"
	if got := found[0].addCommand(" --root /r"); got != want {
		t.Fatalf("add line %q, want %q", got, want)
	}
}

// The terminal UI's offer adds a found server through the host as its
// 'maka connection add' line would: a keyless connection named as the
// line names it, with the chosen model as the default target; the probe
// reports the same line.
func TestTUIOfferAddsTheFoundServer(t *testing.T) {
	srv := modeltest.New(t, func(*modeltest.Request) modeltest.Reply { return modeltest.Reply{} })
	srv.SetModels("qwen3", "llama3")
	conn := domaintest.Start(t, "", domain.Options{}).Connect(t, protocol.SurfaceTUI, 10*time.Second)
	_, add := tuiLocalServers(" --root /r")
	s := LocalServer{Name: "a llama.cpp server", Slug: "local", Provider: "openai-compatible", BaseURL: srv.BaseURL(),
		Models: []string{"qwen3", "llama3"}}
	if err := add(t.Context(), conn, s, "llama3"); err != nil {
		t.Fatal(err)
	}
	cat, err := readCatalog(t.Context(), conn)
	if err != nil {
		t.Fatal(err)
	}
	c := cat.bySlug("local")
	if c == nil || c.ProviderType != "openai-compatible" || c.BaseURL != srv.BaseURL() || !c.Enabled ||
		strings.Join(c.EnabledModelIDs, ",") != "llama3" {
		t.Fatalf("catalog %+v", cat)
	}
	if d := cat.DefaultTarget; d == nil || d.ConnectionID != c.ConnectionID || d.ModelID != "llama3" {
		t.Fatalf("default target %+v", cat.DefaultTarget)
	}
	// A second add of the same server is refused, as 'connection add' is.
	if err := add(t.Context(), conn, s, "qwen3"); err == nil || !strings.Contains(err.Error(), "a connection named local exists") {
		t.Fatalf("second add: %v", err)
	}
}

// A server's listing is untrusted: an id with an escape sequence, a space
// or over maxModelIDBytes is left out, so it is neither offered nor stored.
func TestDiscoveryLeavesOutUnusableModelIDs(t *testing.T) {
	srv := modeltest.New(t, func(*modeltest.Request) modeltest.Reply { return modeltest.Reply{} })
	srv.SetModels("m\x1b]52;c;cm0gLXJmIH4K\x07", strings.Repeat("x", maxModelIDBytes+1), "two words", "qwen3:8b")
	found := discoverLocal(t.Context(), []localServer{{Name: "a llama.cpp server", Provider: "openai-compatible", BaseURL: srv.BaseURL()}})
	if len(found) != 1 || strings.Join(found[0].Models, ",") != "qwen3:8b" {
		t.Fatalf("found %+v, want only qwen3:8b listed", found)
	}
}
