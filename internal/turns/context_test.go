package turns

import (
	"strings"
	"testing"

	"github.com/maka-agent/maka/internal/model"
)

func TestFitContext(t *testing.T) {
	big := strings.Repeat("x", 1000)
	history := []model.Message{
		user("first " + big),
		assistant("", toolCall("a", "Read", `{"path":"a"}`)),
		toolMsg("a", "Read", big, false),
		assistant("done " + big),
		user("second"),
		assistant("ok " + big),
		user("steer"), // a steering message opens no new turn, but may open the kept part
		assistant("third " + big),
	}
	total := 0
	for _, m := range history {
		total += messageBytes(m)
	}
	window := func(bytes int) int64 { return int64(float64(bytes)/historyBytesPerToken) + 1 }

	if got, n := fitContext(history, window(total)); n != 0 || !historyEqual(got, history) {
		t.Fatalf("a history that fits was cut: %d dropped", n)
	}
	// Room for the last two exchanges, not for the first.
	rest := total - messageBytes(history[0]) - messageBytes(history[1]) - messageBytes(history[2]) - messageBytes(history[3])
	got, n := fitContext(history, window(rest+len(OmittedNote)))
	if n != 4 || len(got) != 4 || got[0].Text != OmittedNote+"second" || got[1].Text != history[5].Text {
		t.Fatalf("cut to %d messages (%d dropped): %s", len(got), n, dump(got))
	}
	if history[4].Text != "second" {
		t.Fatal("the caller's history was changed")
	}
	// Room only for the newest exchange.
	got, n = fitContext(history, window(messageBytes(history[6])+messageBytes(history[7])+len(OmittedNote)))
	if n != 6 || len(got) != 2 || got[0].Text != OmittedNote+"steer" {
		t.Fatalf("cut to %d messages (%d dropped): %s", len(got), n, dump(got))
	}
	// Not even that: nothing is replayed.
	if got, n := fitContext(history, window(100)); n != len(history) || got != nil {
		t.Fatalf("a history too large for any cut: %d kept, %d dropped", len(got), n)
	}
	// No user message to cut at: nothing fits but the whole.
	calls := history[1:4]
	if got, n := fitContext(calls, window(10)); got != nil || n != 3 {
		t.Fatalf("history without a user message: %d kept", len(got))
	}
	// An unknown window is the default one.
	if got, n := fitContext(history, 0); n != 0 || len(got) != len(history) {
		t.Fatalf("default window cut a small history")
	}
}
