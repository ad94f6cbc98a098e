package cli

import (
	"strings"
	"testing"

	"github.com/maka-agent/maka/internal/modeltest"
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
