package e2e_test

import (
	"testing"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// TestTurnUsageNoticeClampsHugeCounts: a provider reporting a token count
// above 2^53-1 (a buggy or hostile OpenAI-compatible server) gets a notice
// whose counts are clamped to the wire's range, so a notice subscriber's
// connection survives and sees the turn end.
func TestTurnUsageNoticeClampsHugeCounts(t *testing.T) {
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "ok"}}, Usage: &modeltest.Usage{Prompt: 1 << 60, Completion: 1}}
	})
	c := h.conn
	createSession(t, c, "huge", protocol.PermissionModeBypass)
	w := watch(t, c, "huge", client.WithNotices())
	startTurn(t, c, "huge", "t1", "count")
	frames := w.untilTerminal(t, "t1")
	if err := c.Err(); err != nil {
		t.Fatalf("the notice subscriber's connection failed: %v", err)
	}
	var final *protocol.SessionNotice
	for _, f := range frames {
		if n, ok := f.(protocol.NoticeFrame); ok && n.Notice.Kind == protocol.NoticeTurnUsage && n.Notice.Final {
			final = &n.Notice
		}
	}
	if final == nil || final.Usage.InputTokens != protocol.MaxSafeInteger || final.Usage.OutputTokens != 1 ||
		final.ContextTokens != protocol.MaxSafeInteger {
		t.Fatalf("final turn_usage notice %+v, want input and context clamped to %d", final, int64(protocol.MaxSafeInteger))
	}
}
