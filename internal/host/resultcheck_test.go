package host_test

import (
	"context"
	"errors"
	"testing"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/protocol"
)

// With result checks on (in these tests and in a makadebug build), a result
// its operation's output codec rejects is answered as internal_failure, and
// the outcome's AfterQueued learns that the client never saw it.
func TestResultRejectedByItsOutputCodec(t *testing.T) {
	queued := make(chan error, 1)
	f := withRuntimeHost(t, func(_ context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
		snap := runningSnapshot(in.SessionID, in.TurnID)
		snap.RunID = "" // a running turn always names its run
		return host.Outcome{Result: snap, AfterQueued: func(err error) { queued <- err }}
	})
	c := f.connectClient()
	_, err := c.QueryTurn(t.Context(), protocol.TurnQueryInput{SessionID: "session", TurnID: "turn"})
	var oe *client.OperationError
	if !errors.As(err, &oe) || oe.Code != protocol.ErrInternalFailure || oe.Message != protocol.MessageOperationFailed {
		t.Fatalf("turn.query with an invalid result: %v, want internal_failure", err)
	}
	if err := <-queued; err == nil {
		t.Fatal("AfterQueued was told the client saw the rejected result")
	}
}
