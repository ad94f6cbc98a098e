package turns

import (
	"github.com/maka-agent/maka/internal/model"
)

// DefaultContextWindow is the context window, in tokens, assumed for a
// model whose connection does not declare one.
const DefaultContextWindow = 128_000

// historyBytesPerToken converts a context window into the bytes of
// replayed history it may hold: about three bytes a token for code and
// JSON, and half of the window, so that the system prompt, the tools and
// the turn's own work still fit.
const historyBytesPerToken = 3 * 0.5

// OmittedNote opens the oldest kept message of a history that was cut.
const OmittedNote = "[Earlier messages of this conversation were left out to fit the model's context window.]\n\n"

// fitContext returns history cut to fit a model with the given context
// window (tokens; DefaultContextWindow when not positive): when it is too
// large, whole earlier exchanges are dropped from the front, so that it
// starts at a user message (tool calls and their results stay together)
// and that message says that earlier ones were left out. It reports how
// many messages were dropped. A history whose newest exchange alone is too
// large is dropped whole.
func fitContext(history []model.Message, window int64) ([]model.Message, int) {
	if window <= 0 {
		window = DefaultContextWindow
	}
	budget := int(float64(window) * historyBytesPerToken)
	size := 0
	for i := range history {
		size += messageBytes(history[i])
	}
	if size <= budget {
		return history, 0
	}
	// Find the earliest user message from which the rest fits.
	for i := range history {
		if history[i].Role == model.RoleUser && size+len(OmittedNote) <= budget {
			kept := append([]model.Message(nil), history[i:]...)
			kept[0].Text = OmittedNote + kept[0].Text
			return kept, i
		}
		size -= messageBytes(history[i])
	}
	return nil, len(history)
}

// messageBytes estimates what a message adds to a request.
func messageBytes(m model.Message) int {
	n := len(m.Text) + len(m.Thinking) + len(m.ThinkingSignature) + len(m.ToolCallID) + len(m.ToolName) + 16
	for _, c := range m.ToolCalls {
		n += len(c.ID) + len(c.Name) + len(c.Input) + 16
	}
	return n
}
