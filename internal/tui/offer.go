package tui

import (
	"context"
	"fmt"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

// LocalServer is a model server found on loopback (Ollama, LM Studio, a
// llama.cpp server) that the interface offers as a connection when the
// catalog has none.
type LocalServer struct {
	// Name says what it is ("Ollama"); Slug is the connection it would
	// become; Provider its provider type.
	Name, Slug, Provider, BaseURL string
	// Models are the ids it lists, at least one.
	Models []string
	// AddCommand is the 'maka connection add' line that adds it.
	AddCommand string
}

// offerTimeout bounds the probe and the adding of a found server.
const offerTimeout = 10 * time.Second

// maxOfferedModels bounds the models an offer lists (keys 1-9).
const maxOfferedModels = 9

type (
	serversFoundMsg struct{ servers []LocalServer }
	serverAddedMsg  struct {
		server LocalServer
		model  string
		err    error
	}
)

// offer is a found server shown as a choice until it is taken or declined.
type offer struct {
	server LocalServer
	adding bool
}

// findServers looks for local model servers once, when the catalog read
// at start has no connection.
func (m *model) findServers(ms Models) tea.Cmd {
	if m.opts.LocalServers == nil || m.opts.AddLocalServer == nil || m.offerAsked || len(ms.Connections) > 0 {
		return nil
	}
	m.offerAsked = true
	find := m.opts.LocalServers
	return m.task(func(ctx context.Context) tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, offerTimeout)
		defer cancel()
		return serversFoundMsg{servers: find(ctx)}
	})
}

func (m *model) onServersFound(msg serversFoundMsg) tea.Cmd {
	for _, s := range msg.servers {
		if len(s.Models) > 0 && (m.models == nil || len(m.models.Connections) == 0) {
			m.offer = &offer{server: s}
			return nil
		}
	}
	return nil
}

// offerKey answers the offer while the input is empty: y adds the server
// with its first model, 1-9 with that model, n, Enter (the [y/N] default)
// or Esc declines (the note says how to add it later). It reports whether
// the key was the offer's; any other key goes to the input as usual, and
// once the input holds text the offer takes no key, so a message being
// typed when the offer appears is never read as an answer.
func (m *model) offerKey(k tea.KeyMsg) (tea.Cmd, bool) {
	o := m.offer
	key := k.String()
	pick := -1
	switch {
	case key == "y" || key == "Y":
		pick = 0
	case len(key) == 1 && key[0] >= '1' && key[0] <= '9':
		pick = int(key[0] - '1')
	case key == "n" || key == "N" || key == "esc" || (k.Type == tea.KeyEnter && !k.Alt && !k.Paste):
		if o.adding {
			return nil, true
		}
		m.offer = nil
		m.note(false, "not added; add it later with: "+o.server.AddCommand, "")
		return nil, true
	default:
		return nil, false
	}
	if o.adding || pick >= min(len(o.server.Models), maxOfferedModels) {
		return nil, true
	}
	o.adding = true
	add, s, modelID := m.opts.AddLocalServer, o.server, o.server.Models[pick]
	return m.task(func(ctx context.Context) tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, offerTimeout)
		defer cancel()
		return serverAddedMsg{server: s, model: modelID, err: add(ctx, s, modelID)}
	}), true
}

func (m *model) onServerAdded(msg serverAddedMsg) tea.Cmd {
	if msg.err != nil {
		if m.offer != nil {
			m.offer.adding = false
		}
		m.setNotice(true, "could not add %s: %v", msg.server.Slug, msg.err)
		// The connection may exist even so (the default target failed):
		// the catalog read says, and closes the offer if it does.
		return m.loadModels()
	}
	m.offer = nil
	m.note(false, fmt.Sprintf("added connection %s (%s at %s), default model %s", msg.server.Slug, msg.server.Name,
		msg.server.BaseURL, msg.model), "")
	return m.loadModels()
}

// offerView is the offer's card.
func (m *model) offerView() string {
	o := m.offer
	s := o.server
	models := s.Models[:min(len(s.Models), maxOfferedModels)]
	var b strings.Builder
	fmt.Fprintf(&b, "No model connection is configured.\nFound %s at %s with models %s.\n", s.Name, s.BaseURL, strings.Join(models, ", "))
	fmt.Fprintf(&b, "Add it as connection %s with model %s? [y/N]", s.Slug, models[0])
	keys := "[y] add with " + models[0] + "  [n] not now"
	if m.input.Value() != "" {
		keys = "clear the input to answer"
	}
	if len(models) > 1 && m.input.Value() == "" {
		keys = fmt.Sprintf("[y] add with %s  [1-%d] add with that model  [n] not now", models[0], len(models))
		for i, id := range models {
			fmt.Fprintf(&b, "\n  %d. %s", i+1, id)
		}
	}
	if o.adding {
		keys = "adding " + s.Slug + "…"
	}
	inner := max(m.width-4, 10)
	body := m.look.r.NewStyle().Width(inner).Render(sanitize(b.String()))
	return m.look.card.Width(m.width - 2).Render(m.look.cardTitle.Render("Local model server") + "\n" + body + "\n" + m.look.info.Render(sanitize(keys)))
}
