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
// added; fail, when set, makes the first add fail; be, when set, gets the
// added connection in its catalog, as the host would.
type offerRecorder struct {
	mu     sync.Mutex
	probes int
	added  []string
	fail   bool
	be     *fakeBackend
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
			if r.be != nil {
				r.be.mu.Lock()
				r.be.models = Models{Default: ModelChoice{Slug: s.Slug, Model: model},
					Connections: []ModelConnection{{Slug: s.Slug, Enabled: true, Models: []string{model}}}}
				r.be.mu.Unlock()
			}
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
	rec := &offerRecorder{fail: true, be: be}
	h := newHarness(t, be, rec.options())
	h.until("the offer", func() bool { return h.m.offer != nil })
	v := h.m.View()
	for _, want := range []string{"Found Ollama at http://127.0.0.1:11434/v1 with models llama3.1, qwen3",
		"Add it as connection ollama with model llama3.1? [y/N]", "2. qwen3", "[1-2] add with that model"} {
		if !strings.Contains(v, want) {
			t.Fatalf("the offer lacks %q:\n%s", want, v)
		}
	}
	h.typ("x") // a key that answers nothing goes to the input; then the offer takes no key
	h.typ("y")
	if h.m.input.Value() != "xy" || h.m.offer == nil || len(rec.addedList()) != 0 {
		t.Fatalf("input %q, offer %v, added %v", h.m.input.Value(), h.m.offer != nil, rec.addedList())
	}
	if v := h.m.View(); !strings.Contains(v, "clear the input to answer") {
		t.Fatalf("the offer does not say the input holds text:\n%s", v)
	}
	h.key(tea.KeyBackspace)
	h.key(tea.KeyBackspace)
	h.typ("y")
	h.until("the failed add", func() bool { return h.m.noticeErr && h.m.offer != nil && !h.m.offer.adding })
	if !strings.Contains(h.m.notice, "could not add ollama: the catalog keeps changing") {
		t.Fatalf("notice %q", h.m.notice)
	}
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

// The offer appears while a message is being typed: its next letters stay
// in the input, even a y, and nothing is added.
func TestOfferDoesNotTakeTypedKeys(t *testing.T) {
	rec := &offerRecorder{}
	opts := rec.options()
	release := make(chan struct{})
	find := opts.LocalServers
	opts.LocalServers = func(ctx context.Context) []LocalServer { <-release; return find(ctx) }
	h := newHarness(t, newFakeBackend(), opts)
	h.until("the catalog", func() bool { return h.m.models != nil })
	h.typ("wh")
	close(release)
	h.until("the offer", func() bool { return h.m.offer != nil })
	h.typ("y1")
	if got := rec.addedList(); len(got) > 0 || h.m.input.Value() != "why1" {
		t.Fatalf("typing added %v; input %q", got, h.m.input.Value())
	}
}

// Enter (the [y/N] default) and Esc decline.
func TestOfferEnterAndEscDecline(t *testing.T) {
	for _, k := range []tea.KeyType{tea.KeyEnter, tea.KeyEsc} {
		rec := &offerRecorder{}
		h := newHarness(t, newFakeBackend(), rec.options())
		h.until("the offer", func() bool { return h.m.offer != nil })
		h.key(k)
		if h.m.offer != nil || len(rec.addedList()) != 0 {
			t.Fatalf("%v: offer still shown %v, added %v", k, h.m.offer != nil, rec.addedList())
		}
		if v := h.m.View(); !strings.Contains(v, "not added; add it later with:") {
			t.Fatalf("%v: view lacks the add line:\n%s", k, v)
		}
	}
}

// A server's model id with a terminal escape sequence never reaches the
// terminal: not in the card, not in its key line.
func TestOfferSanitizesModelIDs(t *testing.T) {
	rec := &offerRecorder{}
	opts := rec.options()
	find := opts.LocalServers
	opts.LocalServers = func(ctx context.Context) []LocalServer {
		s := find(ctx)
		s[0].Models = []string{"m\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J"}
		return s
	}
	h := newHarness(t, newFakeBackend(), opts)
	h.until("the offer", func() bool { return h.m.offer != nil })
	if v := h.m.View(); strings.Contains(v, "\x1b]52") || strings.Contains(v, "\x07") || strings.Contains(v, "\x1b[2J") {
		t.Fatalf("the view carries the server's escape sequence: %q", v)
	}
}
