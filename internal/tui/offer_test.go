package tui

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
)

// offerOptions finds one server with two models and records what is
// added; fail, when set, makes the first add fail.
type offerRecorder struct {
	mu     sync.Mutex
	probes int
	added  []string
	fail   bool
}

func (r *offerRecorder) options() Options {
	server := LocalServer{Name: "Ollama", Slug: "ollama", Provider: "ollama", BaseURL: "http://127.0.0.1:11434/v1",
		Models: []string{"llama3.1", "qwen3"}, AddCommand: "maka connection add ollama --provider ollama --model llama3.1 --no-key"}
	return Options{
		LocalServers: func(context.Context) []LocalServer {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.probes++
			return []LocalServer{server}
		},
		AddLocalServer: func(_ context.Context, s LocalServer, model string) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.fail {
				r.fail = false
				return errors.New("the catalog keeps changing")
			}
			r.added = append(r.added, s.Slug+"/"+model)
			return nil
		},
	}
}

func (r *offerRecorder) addedList() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.added...)
}

// With no connection, the found server is offered; 2 adds it with its
// second model, the note says so and the catalog is read again.
func TestOfferAddsAFoundServer(t *testing.T) {
	be := newFakeBackend()
	rec := &offerRecorder{fail: true}
	h := newHarness(t, be, rec.options())
	h.until("the offer", func() bool { return h.m.offer != nil })
	v := h.m.View()
	for _, want := range []string{"Found Ollama at http://127.0.0.1:11434/v1 with models llama3.1, qwen3",
		"Add it as connection ollama with model llama3.1? [y/N]", "2. qwen3", "[1-2] add with that model"} {
		if !strings.Contains(v, want) {
			t.Fatalf("the offer lacks %q:\n%s", want, v)
		}
	}
	h.typ("x") // other keys do nothing while it is shown
	if h.m.input.Value() != "" || h.m.offer == nil {
		t.Fatalf("a key leaked past the offer: input %q", h.m.input.Value())
	}
	h.typ("y")
	h.until("the failed add", func() bool { return h.m.noticeErr && h.m.offer != nil && !h.m.offer.adding })
	if !strings.Contains(h.m.notice, "could not add ollama: the catalog keeps changing") {
		t.Fatalf("notice %q", h.m.notice)
	}
	be.mu.Lock()
	be.models = Models{Default: ModelChoice{Slug: "ollama", Model: "qwen3"}, Connections: []ModelConnection{{Slug: "ollama", Enabled: true, Models: []string{"qwen3"}}}}
	be.mu.Unlock()
	h.typ("2")
	h.until("the added connection", func() bool { return h.m.offer == nil && h.m.models != nil && len(h.m.models.Connections) == 1 })
	if got := rec.addedList(); len(got) != 1 || got[0] != "ollama/qwen3" {
		t.Fatalf("added %v, want ollama/qwen3", got)
	}
	v = h.m.View()
	if !strings.Contains(v, "added connection ollama (Ollama at http://127.0.0.1:11434/v1), default model qwen3") || strings.Contains(v, "[y/N]") {
		t.Fatalf("view after adding:\n%s", v)
	}
	if !strings.Contains(strings.SplitN(v, "\n", 2)[0], "ollama/qwen3") {
		t.Fatalf("status line lacks the new model: %q", strings.SplitN(v, "\n", 2)[0])
	}
}

// n declines: nothing is added, the note gives the line that adds it, and
// typing works again.
func TestOfferDeclined(t *testing.T) {
	rec := &offerRecorder{}
	h := newHarness(t, newFakeBackend(), rec.options())
	h.until("the offer", func() bool { return h.m.offer != nil })
	h.typ("n")
	if h.m.offer != nil || len(rec.addedList()) != 0 {
		t.Fatalf("offer %+v, added %v", h.m.offer, rec.addedList())
	}
	if v := h.m.View(); !strings.Contains(v, "not added; add it later with: maka connection add ollama --provider ollama") {
		t.Fatalf("view lacks the add line:\n%s", v)
	}
	h.typ("hello")
	if h.m.input.Value() != "hello" {
		t.Fatalf("input %q after declining", h.m.input.Value())
	}
}

// A catalog with a connection never probes.
func TestNoOfferWithAConnection(t *testing.T) {
	be := newFakeBackend()
	be.models = Models{Connections: []ModelConnection{{Slug: "acme", Enabled: true, Models: []string{"m1"}}}}
	rec := &offerRecorder{}
	h := newHarness(t, be, rec.options())
	h.until("the catalog", func() bool { return h.m.models != nil })
	h.send(tea.WindowSizeMsg{Width: 100, Height: 40})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.probes != 0 || h.m.offer != nil {
		t.Fatalf("%d probes, offer %+v", rec.probes, h.m.offer)
	}
}
