package e2e_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/domaintest"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// failAfter bounds every wait so that a broken host fails the test instead
// of hanging it; it never orders events.
const failAfter = 20 * time.Second

// apiKey is the credential stored for the fake model connection.
const apiKey = "sk-e2e-fake-key-4b1d"

// testHost is one in-process runtime host on a temporary storage root whose
// default model target is a fake chat-completions server.
type testHost struct {
	t     *testing.T
	host  *domaintest.Host
	model *modeltest.Server
	// conn is the client that configured the host.
	conn *client.Conn
}

// newHost starts the full host with a fake model whose replies reply
// decides, and configures that model over the socket. Everything stops at
// the end of the test: clients, then the host, then the model server.
func newHost(t *testing.T, reply func(*modeltest.Request) modeltest.Reply) *testHost {
	t.Helper()
	return newHostSpeaking(t, "openai-compatible", reply)
}

// newHostSpeaking is newHost with the connection's provider type
// ("openai-responses-compatible": the Responses API).
func newHostSpeaking(t *testing.T, providerType string, reply func(*modeltest.Request) modeltest.Reply) *testHost {
	t.Helper()
	return newHostAt(t, "", providerType, reply)
}

// newHostAt is newHostSpeaking on the storage root at root ("": a fresh
// one).
func newHostAt(t *testing.T, root, providerType string, reply func(*modeltest.Request) modeltest.Reply) *testHost {
	t.Helper()
	return newHostWindow(t, root, providerType, 0, reply)
}

// newHostWindow is newHostAt with the context window the fake model's
// connection declares (0: none).
func newHostWindow(t *testing.T, root, providerType string, window int64, reply func(*modeltest.Request) modeltest.Reply) *testHost {
	t.Helper()
	// Registered first, so it runs last: no idle model connection outlives
	// the test.
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	srv := modeltest.New(t, reply)

	dh := domaintest.Start(t, root, domain.Options{HTTPClient: &http.Client{Transport: transport}})
	h := &testHost{t: t, host: dh, model: srv}
	h.conn = h.dial()
	if err := modeltest.ConfigureWindow(opCtx(t), h.conn, providerType, srv.BaseURL(), apiKey, window); err != nil {
		t.Fatal(err)
	}
	return h
}

// dial connects a new client; it is closed at the end of the test.
func (h *testHost) dial() *client.Conn {
	h.t.Helper()
	return h.host.Connect(h.t, protocol.SurfaceTUI, failAfter)
}

func opCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	t.Cleanup(cancel)
	return ctx
}

// createSession creates a session working in a fresh directory with the
// given permission mode and returns that directory.
func createSession(t *testing.T, c *client.Conn, sessionID string, mode string) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Call(opCtx(t), protocol.OpSessionCreate, protocol.SessionCreateInput{
		SessionID: sessionID, Workspace: protocol.HostPathWorkspace(dir), Name: "e2e " + sessionID,
		PermissionMode: protocol.PermissionMode(mode),
	})
	if err != nil {
		t.Fatalf("session create %s: %v", sessionID, err)
	}
	if sum, ok := res.(protocol.SessionSummary); !ok || string(sum.PermissionMode) != mode {
		t.Fatalf("session create %s: %#v", sessionID, res)
	}
	return dir
}

// startTurn calls turn.start with a text message.
func startTurn(t *testing.T, c *client.Conn, sessionID, turnID, text string) protocol.TurnSnapshot {
	t.Helper()
	snap, err := c.StartTurn(opCtx(t), startInput(sessionID, turnID, text))
	if err != nil {
		t.Fatalf("turn.start %s/%s: %v", sessionID, turnID, err)
	}
	if snap.SessionID != sessionID || snap.TurnID != turnID || snap.RunID == "" {
		t.Fatalf("turn.start %s/%s: %+v", sessionID, turnID, snap)
	}
	return snap
}

func startInput(sessionID, turnID, text string) protocol.TurnStartInput {
	return protocol.TurnStartInput{SessionID: sessionID, TurnID: turnID, Content: protocol.MessageContent{Text: text}}
}

// queryTurn calls turn.query.
func queryTurn(t *testing.T, c *client.Conn, sessionID, turnID string) protocol.TurnSnapshot {
	t.Helper()
	snap, err := c.QueryTurn(opCtx(t), protocol.TurnQueryInput{SessionID: sessionID, TurnID: turnID})
	if err != nil {
		t.Fatalf("turn.query %s/%s: %v", sessionID, turnID, err)
	}
	return snap
}

// transcript reads every page of a session's transcript.
func transcript(t *testing.T, c *client.Conn, sessionID string) []protocol.TranscriptMessage {
	t.Helper()
	var out []protocol.TranscriptMessage
	in := protocol.SessionTranscriptPageInput{SessionID: sessionID}
	for {
		res, err := c.Call(opCtx(t), protocol.OpSessionTranscriptPage, in)
		if err != nil {
			t.Fatalf("transcript of %s: %v", sessionID, err)
		}
		page := res.(protocol.SessionTranscriptPage)
		out = append(out, page.Messages...)
		if page.NextCursor == nil {
			return out
		}
		in.Cursor = *page.NextCursor
	}
}

// textsOf returns the texts of the transcript messages with role.
func textsOf(msgs []protocol.TranscriptMessage, role protocol.TranscriptRole) []string {
	var out []string
	for _, m := range msgs {
		if m.Role == role {
			out = append(out, m.Text)
		}
	}
	return out
}
