package soak_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/transport"
	"github.com/maka-agent/maka/protocol"
)

// stallHandshakeTimeout is the host's handshake timeout in
// TestHalfFrameClients.
const stallHandshakeTimeout = 500 * time.Millisecond

// dialRaw connects to the host's socket without the client library; the
// connection is closed when the test ends.
func dialRaw(t *testing.T, endpoint string) *transport.Conn {
	t.Helper()
	nc, err := net.DialTimeout("unix", endpoint, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tc := transport.New(nc)
	t.Cleanup(func() { tc.Close() })
	return tc
}

// TestHalfFrameClients connects clients that send half a frame and stall:
// one in its hello, one in a request after the handshake. The host keeps
// serving everybody else; the half hello is closed at the handshake
// timeout; the half request waits harmlessly and is answered once its
// frame is complete; a stalled connection does not hold up shutdown; and
// after a restart the turns acknowledged meanwhile are intact.
func TestHalfFrameClients(t *testing.T) {
	r := newRig(t, newRoot(t), domain.Options{Provider: newDispatcher(t, 2)}, host.Options{HandshakeTimeout: stallHandshakeTimeout})
	k := r.start()
	ep := k.Endpoint()

	// Half a hello, then nothing.
	halfHello := dialRaw(t, ep)
	helloStart := time.Now()
	if err := halfHello.Write([]byte(`{"kind":"hello","clientInstanceId":"half-hel`)); err != nil {
		t.Fatal(err)
	}
	// A complete handshake, then half a request, then nothing.
	halfRequest := dialRaw(t, ep)
	if err := halfRequest.WriteValue(protocol.Hello{Kind: protocol.KindHello, ClientInstanceID: "half-request", Surface: protocol.SurfaceTUI}); err != nil {
		t.Fatal(err)
	}
	v, err := halfRequest.ReadFrame(failAfter)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if hs, err := protocol.DecodeHostFrame(v); err != nil {
		t.Fatal(err)
	} else if _, ok := hs.(*protocol.Accepted); !ok {
		t.Fatalf("handshake: %T", hs)
	}
	status, err := protocol.AppendRequest(nil, "status-1", protocol.OpHostStatus, protocol.HostStatusInput{})
	if err != nil {
		t.Fatal(err)
	}
	if err := halfRequest.Write(status[:len(status)/2]); err != nil {
		t.Fatal(err)
	}

	// Everybody else is served meanwhile.
	c := r.dial()
	var recorded []acked
	for _, kind := range []string{kindText, kindRead, kindGlob} {
		sid := "served-" + kind
		if err := createSession(opCtx(t), c, sid, workspace(t), protocol.PermissionModeBypass); err != nil {
			t.Fatal(err)
		}
		f := follow(t, c, sid)
		for i := range 2 {
			turnID := fmt.Sprintf("turn-%d", i)
			user := kind + " " + turnID
			streamed, end := runTurn(t, c, f, sid, turnID, user)
			if end.Status != protocol.TurnCompleted || streamed != expectedText(kind, user) {
				t.Fatalf("turn %s/%s ended %+v, streamed %q", sid, turnID, end, streamed)
			}
			recorded = append(recorded, record(t, c, sid, turnID))
		}
	}

	// The half hello was closed without a reply, not before the handshake
	// timeout.
	if v, err := halfHello.ReadFrame(failAfter); err == nil {
		t.Fatalf("the half hello got a frame: %v", v)
	} else if transport.IsCode(err, transport.CodeReadTimeout) {
		t.Fatalf("the half hello is still open after %v", failAfter)
	}
	if waited := time.Since(helloStart); waited < stallHandshakeTimeout {
		t.Fatalf("the half hello was closed after %v, before the %v handshake timeout", waited, stallHandshakeTimeout)
	}

	// The half request got nothing; completing it gets its answer.
	if v, err := halfRequest.ReadFrame(100 * time.Millisecond); !transport.IsCode(err, transport.CodeReadTimeout) {
		t.Fatalf("the half request got %v, %v; want nothing yet", v, err)
	}
	if err := halfRequest.Write(status[len(status)/2:]); err != nil {
		t.Fatal(err)
	}
	v, err = halfRequest.ReadFrame(failAfter)
	if err != nil {
		t.Fatalf("the completed request: %v", err)
	}
	frame, err := protocol.DecodeHostFrame(v)
	if err != nil {
		t.Fatal(err)
	}
	if resp, ok := frame.(*protocol.Response); !ok || !resp.OK || resp.RequestID != "status-1" {
		t.Fatalf("the completed request got %#v", frame)
	} else if st, ok := resp.Result.(protocol.HostStatus); !ok || st.State != protocol.StateReady {
		t.Fatalf("host.status %#v", resp.Result)
	}

	// A connection stalled in the middle of a frame does not hold up the
	// shutdown.
	if err := halfRequest.Write(status[:len(status)/2]); err != nil {
		t.Fatal(err)
	}
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), host.DefaultShutdownGrace)
	defer cancel()
	if err := k.Close(ctx); err != nil {
		t.Fatalf("host close with a stalled connection: %v", err)
	}
	if _, err := halfRequest.ReadFrame(failAfter); err == nil || transport.IsCode(err, transport.CodeReadTimeout) {
		t.Fatalf("the stalled connection outlived the host: %v", err)
	}
	_ = r.stop()
	r.start()
	checkIntact(t, r.dial(), recorded)
}
