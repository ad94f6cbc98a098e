package host_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/protocol"
)

// statusBurst returns n host.status requests in one buffer, with ids long
// enough that their answers fill several of the reader's bursts.
func statusBurst(t *testing.T, prefix string, n int) []byte {
	t.Helper()
	var batch bytes.Buffer
	for i := range n {
		b, err := protocol.AppendRequest(nil, fmt.Sprintf("%s-%03d-%s", prefix, i, bytes.Repeat([]byte("x"), 64)), protocol.OpHostStatus, protocol.HostStatusInput{})
		if err != nil {
			t.Fatal(err)
		}
		batch.Write(b)
	}
	return batch.Bytes()
}

// A pipelined burst of host.status requests sent in one write is answered
// whole, each request once, with a valid status, and every answered
// operation is released once its answer is written.
func TestPipelinedStatusBurstIsAnsweredWholeAndReleased(t *testing.T) {
	f := withRuntimeHost(t, func(_ context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	})
	tc := openAcceptedTransport(t, f.kernel.Endpoint(), "burst")
	const n = 60 // answers of about 200 bytes: several bursts
	if err := tc.Write(statusBurst(t, "burst", n)); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range n {
		resp, ok := readHostFrame(t, tc).(*protocol.Response)
		if !ok || !resp.OK || resp.Operation != protocol.OpHostStatus {
			t.Fatalf("got %#v, want a host.status answer", resp)
		}
		st, ok := resp.Result.(protocol.HostStatus)
		if !ok || st.State != protocol.StateReady || st.ActiveOperations < 1 {
			t.Fatalf("result %#v", resp.Result)
		}
		if seen[resp.RequestID] {
			t.Fatalf("%s answered twice", resp.RequestID)
		}
		seen[resp.RequestID] = true
	}
	for i := range n {
		if id := fmt.Sprintf("burst-%03d-%s", i, bytes.Repeat([]byte("x"), 64)); !seen[id] {
			t.Fatalf("%s not answered", id[:9])
		}
	}
	observer := f.connectClient()
	waitForStatus(t, observer, func(s protocol.HostStatus) bool { return s.Connections == 2 && s.ActiveOperations == 1 })
}

// A burst's answers not yet queued when a bad frame ends the connection
// are settled with it: the host counts none of their operations after.
func TestBurstCutShortByABadFrameReleasesItsOperations(t *testing.T) {
	f := withRuntimeHost(t, func(_ context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	})
	tc := openAcceptedTransport(t, f.kernel.Endpoint(), "burst-then-garbage")
	batch := append(statusBurst(t, "cut", 10), "{not json}\n"...)
	if err := tc.Write(batch); err != nil {
		t.Fatal(err)
	}
	readUntilClosed(t, tc)
	observer := f.connectClient()
	waitForStatus(t, observer, func(s protocol.HostStatus) bool { return s.Connections == 1 && s.ActiveOperations == 1 })
}
