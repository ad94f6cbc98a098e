package host_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/transport"
	"github.com/maka-agent/maka/protocol"
)

// afterQueuedConn serves one connection over an in-memory pipe whose
// turn.query handler is h, and returns the client's end.
func afterQueuedConn(t *testing.T, h host.Handler) (client net.Conn, server *transport.Conn, run <-chan struct{}) {
	t.Helper()
	cc, sc := net.Pipe()
	server = transport.New(sc)
	handlers := host.UnavailableHandlers()
	handlers[protocol.OpTurnQuery] = h
	conn := host.NewConn(host.ConnConfig{
		Transport:       server,
		Conn:            connInfo("after-queued"),
		ResolveHandlers: func() host.Handlers { return handlers },
		BeginOperation: func(context.Context, *protocol.OperationSpec) (host.OperationLease, *protocol.OpError) {
			return &lease{}, nil
		},
	})
	done := make(chan struct{})
	go func() { _ = conn.Run(); close(done) }()
	return cc, server, done
}

// The client cannot read a response before its outcome's AfterQueued has
// returned (what it set up, such as an active subscription, is in place
// when the client acts on the answer), and what AfterQueued sends reaches
// the client after the response.
func TestAResponseIsNotWrittenBeforeItsAfterQueuedReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lines := make(chan string, 4)
		var readEarly []string
		var queuedErr error
		afterQueued := make(chan struct{})
		pushed, err := protocol.EncodeFrame(protocol.ClosedFrame{
			HostEpoch: "host-epoch", SubscriptionID: "sub-1", Sequence: 1, Reason: protocol.CloseSlowConsumer,
		})
		if err != nil {
			t.Fatal(err)
		}
		cc, _, run := afterQueuedConn(t, func(_ context.Context, call *host.Call) host.Outcome {
			in := call.Input.(protocol.TurnQueryInput)
			return host.Outcome{Result: runningSnapshot(in.SessionID, in.TurnID), AfterQueued: func(err error) {
				queuedErr = err
				// Everything else runs until it blocks: a response already
				// written would now have been read.
				synctest.Wait()
				for len(lines) > 0 {
					readEarly = append(readEarly, <-lines)
				}
				if err := call.Conn.Send(pushed, nil); err != nil {
					t.Errorf("send from AfterQueued: %v", err)
				}
				close(afterQueued)
			}}
		})
		defer func() {
			_ = cc.Close()
			<-run
		}()
		go func() {
			r := bufio.NewReader(cc)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					close(lines)
					return
				}
				lines <- line
			}
		}()
		req, err := protocol.AppendRequest(nil, "q1", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "s", TurnID: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cc.Write(req); err != nil {
			t.Fatal(err)
		}
		<-afterQueued
		if len(readEarly) != 0 {
			t.Fatalf("the client read %q before AfterQueued returned", readEarly)
		}
		if queuedErr != nil {
			t.Fatalf("AfterQueued told %v, want nil", queuedErr)
		}
		first, second := <-lines, <-lines
		if !strings.Contains(first, `"requestId":"q1"`) {
			t.Fatalf("first frame %q, want the response to q1", first)
		}
		if second != string(pushed) {
			t.Fatalf("second frame %q, want the frame AfterQueued sent", second)
		}
	})
}

// A response that cannot be queued (the connection ended while its handler
// ran) still tells AfterQueued why, and nothing is written.
func TestAfterQueuedIsToldWhenTheResponseCannotBeQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		told := make(chan error, 1)
		started := make(chan struct{})
		cc, server, run := afterQueuedConn(t, func(ctx context.Context, call *host.Call) host.Outcome {
			close(started)
			<-ctx.Done() // a query's context ends with the connection
			in := call.Input.(protocol.TurnQueryInput)
			return host.Outcome{Result: runningSnapshot(in.SessionID, in.TurnID), AfterQueued: func(err error) { told <- err }}
		})
		defer cc.Close()
		req, err := protocol.AppendRequest(nil, "q1", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "s", TurnID: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cc.Write(req); err != nil {
			t.Fatal(err)
		}
		<-started
		_ = server.Close() // the reader fails: the connection is torn down
		<-run
		if err := <-told; !errors.Is(err, host.ErrWriterClosed) {
			t.Fatalf("AfterQueued told %v, want %v", err, host.ErrWriterClosed)
		}
	})
}
