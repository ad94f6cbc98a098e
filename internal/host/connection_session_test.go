package host_test

// One Go test per scenario of the original host's connection-session test,
// with the same scenario and assertions; names follow the originals.

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/continuity"
	"github.com/maka-agent/maka/internal/control"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/transport"
	"github.com/maka-agent/maka/protocol"
)

// "concurrent responses remain framed and correlated in reverse completion order"
func TestConcurrentResponsesRemainFramedAndCorrelatedInReverseCompletionOrder(t *testing.T) {
	const requestCount = 16
	entered := make([]*gate, requestCount)
	release := make([]*gate, requestCount)
	for i := range entered {
		entered[i], release[i] = newGate(), newGate()
	}
	defer func() {
		for _, g := range release {
			g.open()
		}
	}()
	f := withRuntimeHost(t, func(_ context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
		var index int
		for i := range requestCount {
			if in.TurnID == "turn-"+itoa(i) {
				index = i
			}
		}
		entered[index].open()
		<-release[index].wait()
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	})
	c := f.connectClient()

	type result struct {
		snap protocol.TurnSnapshot
		err  error
	}
	results := make([]chan result, requestCount)
	for i := range requestCount {
		results[i] = make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s, err := c.QueryTurn(ctx, protocol.TurnQueryInput{SessionID: "session", TurnID: "turn-" + itoa(i)})
			results[i] <- result{s, err}
		}()
	}
	for i := range requestCount {
		within(t, entered[i].wait(), 10*time.Second, "concurrent handlers were not all admitted")
	}
	got := make([]protocol.TurnSnapshot, requestCount)
	for i := requestCount - 1; i >= 0; i-- {
		release[i].open()
		r := <-results[i]
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.snap.TurnID != "turn-"+itoa(i) || r.snap.RunID != "run-turn-"+itoa(i) {
			t.Fatalf("request %d answered with %+v", i, r.snap)
		}
		got[i] = r.snap
	}
	for i, s := range got {
		if s.TurnID != "turn-"+itoa(i) {
			t.Fatalf("results out of correlation: %d -> %s", i, s.TurnID)
		}
	}
}

// gatedWriter blocks writes until released (the seed's patched writeEncoded).
type gatedWriter struct {
	w       host.FrameWriter
	blocked *gate
	release *gate
}

func (g *gatedWriter) Write(frames ...[]byte) error {
	g.blocked.open()
	<-g.release.wait()
	return g.w.Write(frames...)
}

type receipt struct {
	done chan struct{}
	err  error
}

func enqueue(w *host.OutboundWriter, frame []byte) (*receipt, error) {
	r := &receipt{done: make(chan struct{})}
	err := w.Enqueue(frame, host.SettleFunc(func(err error) {
		r.err = err
		close(r.done)
	}))
	return r, err
}

// "serial outbound writer flushes accepted frames in FIFO order over a real socket"
func TestSerialOutboundWriterFlushesAcceptedFramesInFIFOOrderOverARealSocket(t *testing.T) {
	pair := openTransportPair(t)
	var failureCalls atomic.Int32
	w := host.NewOutboundWriter(pair.client, func(error) { failureCalls.Add(1) })
	defer func() { w.Close(); <-w.Done() }()

	ids := []string{"first", "second", "third"}
	var receipts []*receipt
	for _, id := range ids {
		r, err := enqueue(w, statusResponse(id))
		if err != nil {
			t.Fatal(err)
		}
		receipts = append(receipts, r)
	}
	for _, r := range receipts {
		within(t, r.done, 10*time.Second, "frame not flushed")
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	for _, id := range ids {
		f := readHostFrame(t, pair.server)
		resp, ok := f.(*protocol.Response)
		if !ok || resp.RequestID != id {
			t.Fatalf("got %#v, want response %s", f, id)
		}
	}
	if n := failureCalls.Load(); n != 0 {
		t.Fatalf("failure calls = %d", n)
	}
	w.Close()
	if _, err := enqueue(w, statusResponse("after-close")); !errors.Is(err, host.ErrWriterClosed) {
		t.Fatalf("enqueue after close: %v", err)
	}
}

// "serial outbound writer fails once when its real transport is closed"
func TestSerialOutboundWriterFailsOnceWhenItsRealTransportIsClosed(t *testing.T) {
	pair := openTransportPair(t)
	var failureCalls atomic.Int32
	w := host.NewOutboundWriter(pair.client, func(error) { failureCalls.Add(1) })
	defer func() { w.Close(); <-w.Done() }()

	_ = pair.client.Close()
	r, err := enqueue(w, statusResponse("closed-transport"))
	if err != nil {
		t.Fatal(err)
	}
	within(t, r.done, 10*time.Second, "receipt did not settle")
	if r.err == nil {
		t.Fatal("write to a closed transport was acknowledged")
	}
	within(t, w.Done(), 10*time.Second, "writer did not stop")
	if n := failureCalls.Load(); n != 1 {
		t.Fatalf("failure calls = %d, want 1", n)
	}
	if _, err := enqueue(w, statusResponse("after-failure")); !errors.Is(err, host.ErrWriterClosed) {
		t.Fatalf("enqueue after failure: %v", err)
	}
	if n := failureCalls.Load(); n != 1 {
		t.Fatalf("failure calls = %d, want 1", n)
	}
}

// "serial outbound writer reports its 2 MiB byte bound before its frame bound"
func TestSerialOutboundWriterReportsItsByteBoundBeforeItsFrameBound(t *testing.T) {
	pair := openTransportPair(t)
	var failureCalls atomic.Int32
	g := &gatedWriter{w: pair.client, blocked: newGate(), release: newGate()}
	w := host.NewOutboundWriter(g, func(error) { failureCalls.Add(1) })
	defer func() { g.release.open(); w.Close(); <-w.Done() }()

	var receipts []*receipt
	var overload error
	for i := range 64 {
		r, err := enqueue(w, largeFailureResponse("byte-bound-"+itoa(i)))
		if err != nil {
			overload = err
			break
		}
		receipts = append(receipts, r)
	}
	var qe *host.OutboundQueueError
	if !errors.As(overload, &qe) || qe.Code != "byte_limit" {
		t.Fatalf("overload = %v, want byte_limit", overload)
	}
	if len(receipts) >= 64 {
		t.Fatal("frame bound fired before the 2 MiB byte bound")
	}
	if n := failureCalls.Load(); n != 1 {
		t.Fatalf("failure calls = %d, want 1", n)
	}
	g.release.open()
	for _, r := range receipts {
		within(t, r.done, 10*time.Second, "receipt did not settle")
		if r.err != overload {
			t.Fatalf("receipt settled with %v, want the overload error", r.err)
		}
	}
}

// halfClosedConn is the seed's openHalfClosedDispatchedSession: a Conn
// with one dispatched turn.query whose client has half-closed.
type halfClosedConn struct {
	pair           *transportPair
	releaseHandler *gate
	teardown       *gate
	teardownCalls  *atomic.Int32
	run            chan struct{}
}

func openHalfClosedDispatchedConn(t *testing.T, turnID string) *halfClosedConn {
	pair := openTransportPair(t)
	handlerEntered, releaseHandler, teardown := newGate(), newGate(), newGate()
	var teardownCalls atomic.Int32
	handlers := testHandlers(func(_ context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
		handlerEntered.open()
		<-releaseHandler.wait()
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	})
	handlers[protocol.OpHostStatus] = statusHandler
	conn := host.NewConn(host.ConnConfig{
		Transport:       pair.server,
		Conn:            connInfo(turnID + "-client"),
		ResolveHandlers: func() host.Handlers { return handlers },
		BeginOperation: func(context.Context, *protocol.OperationSpec) (host.OperationLease, *protocol.OpError) {
			return &lease{}, nil
		},
		OnTeardown: func(error) {
			teardownCalls.Add(1)
			teardown.open()
		},
	})
	run := make(chan struct{})
	go func() { _ = conn.Run(); close(run) }()
	hs := &halfClosedConn{pair: pair, releaseHandler: releaseHandler, teardown: teardown, teardownCalls: &teardownCalls, run: run}
	t.Cleanup(func() {
		releaseHandler.open()
		_ = pair.client.Close()
		<-run
	})
	writeRequest(t, pair.client, turnID+"-request", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "session", TurnID: turnID})
	within(t, handlerEntered.wait(), 10*time.Second, "handler was not dispatched")
	if err := pair.client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	return hs
}

// "clean read EOF drains an already dispatched response before closing"
func TestCleanReadEOFDrainsAnAlreadyDispatchedResponseBeforeClosing(t *testing.T) {
	hs := openHalfClosedDispatchedConn(t, "half-close")
	hs.releaseHandler.open()
	f := readHostFrame(t, hs.pair.client)
	resp, ok := f.(*protocol.Response)
	if !ok || resp.Operation != protocol.OpTurnQuery || !resp.OK {
		t.Fatalf("expected the dispatched turn.query response, got %#v", f)
	}
	within(t, hs.run, 10*time.Second, "connection did not close after draining its response")
	if n := hs.teardownCalls.Load(); n != 1 {
		t.Fatalf("teardown calls = %d, want 1", n)
	}
}

// "a fatal transport close during clean EOF drain tears down exactly once"
func TestFatalTransportCloseDuringCleanEOFDrainTearsDownExactlyOnce(t *testing.T) {
	hs := openHalfClosedDispatchedConn(t, "fatal-close-after-eof")
	_ = hs.pair.server.Close() // forced transport failure
	within(t, hs.teardown.wait(), 10*time.Second, "fatal transport close did not interrupt EOF drain")
	if n := hs.teardownCalls.Load(); n != 1 {
		t.Fatalf("teardown calls = %d, want 1", n)
	}
	hs.releaseHandler.open()
	within(t, hs.run, 10*time.Second, "connection did not settle after its handler completed")
	if n := hs.teardownCalls.Load(); n != 1 {
		t.Fatalf("teardown calls = %d, want 1", n)
	}
}

// "a connection accepted before composition exists resolves ready handlers without reconnecting"
func TestConnectionAcceptedBeforeCompositionExistsResolvesReadyHandlersWithoutReconnecting(t *testing.T) {
	_, capability := newRoot(t)
	owner := acquireOwner(t, capability)
	factoryEntered, releaseFactory := newGate(), newGate()
	defer releaseFactory.open()
	type started struct {
		k   *host.Kernel
		err error
	}
	hostTask := make(chan started, 1)
	go func() {
		k, err := host.Start(context.Background(), host.Options{
			Owner:     owner,
			IdleGrace: 10 * time.Second,
			CompositionFactory: func(context.Context, *host.Kernel) (host.Composition, error) {
				factoryEntered.open()
				<-releaseFactory.wait()
				return &testComposition{handlers: testHandlers(func(_ context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
					return host.OK(runningSnapshot(in.SessionID, in.TurnID))
				})}, nil
			},
		})
		hostTask <- started{k, err}
	}()
	var k *host.Kernel
	defer func() {
		releaseFactory.open()
		if k == nil {
			if s := <-hostTask; s.k != nil {
				k = s.k
			}
		}
		if k != nil {
			_ = k.Close(context.Background())
		}
	}()
	within(t, factoryEntered.wait(), 10*time.Second, "runtime host did not enter composition")
	reg, found, err := control.ReadRegistration(owner.ControlDirectory())
	if err != nil || !found {
		t.Fatalf("registration: found=%v err=%v", found, err)
	}
	if reg.State != protocol.StateRecovering {
		t.Fatalf("registration state = %s, want recovering", reg.State)
	}
	tc := openAcceptedTransport(t, reg.Endpoint, "pre-ready-client")

	writeRequest(t, tc, "before-ready", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "session", TurnID: "turn"})
	before, ok := readHostFrame(t, tc).(*protocol.Response)
	if !ok || before.OK {
		t.Fatalf("pre-ready request unexpectedly succeeded: %#v", before)
	}
	if before.Error.Code != protocol.ErrHostNotReady {
		t.Fatalf("code = %s, want host_not_ready", before.Error.Code)
	}

	releaseFactory.open()
	select {
	case s := <-hostTask:
		if s.err != nil {
			t.Fatal(s.err)
		}
		k = s.k
	case <-time.After(time.Second):
		t.Fatal("runtime host did not become ready")
	}
	writeRequest(t, tc, "after-ready", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "session", TurnID: "turn"})
	after, ok := readHostFrame(t, tc).(*protocol.Response)
	if !ok || after.Operation != protocol.OpTurnQuery || !after.OK {
		t.Fatalf("expected a turn.query success, got %#v", after)
	}
	if after.Result.(protocol.TurnSnapshot).RunID != "run-turn" {
		t.Fatalf("runId = %s", after.Result.(protocol.TurnSnapshot).RunID)
	}
}

// "connection reset while operation admission is pending does not execute the handler"
func TestConnectionResetWhileOperationAdmissionIsPendingDoesNotExecuteTheHandler(t *testing.T) {
	pair := openTransportPair(t)
	admissionEntered, releaseAdmission, teardown := newGate(), newGate(), newGate()
	defer releaseAdmission.open()
	var handlerCalls atomic.Int32
	l := &lease{}
	handlers := testHandlers(func(_ context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
		handlerCalls.Add(1)
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	})
	handlers[protocol.OpHostStatus] = statusHandler
	conn := host.NewConn(host.ConnConfig{
		Transport:       pair.server,
		Conn:            connInfo("pending-admission"),
		ResolveHandlers: func() host.Handlers { return handlers },
		BeginOperation: func(context.Context, *protocol.OperationSpec) (host.OperationLease, *protocol.OpError) {
			admissionEntered.open()
			<-releaseAdmission.wait()
			return l, nil
		},
		OnTeardown: func(error) { teardown.open() },
	})
	run := make(chan struct{})
	go func() { _ = conn.Run(); close(run) }()

	writeRequest(t, pair.client, "pending-request", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "session", TurnID: "turn"})
	within(t, admissionEntered.wait(), 10*time.Second, "operation did not enter admission")
	resetAndDestroy(t, pair.client)
	within(t, teardown.wait(), 10*time.Second, "connection did not tear down while admission was pending")
	releaseAdmission.open()
	within(t, run, 10*time.Second, "connection did not settle after admission completed")
	if n := handlerCalls.Load(); n != 0 {
		t.Fatalf("handler calls = %d, want 0", n)
	}
	if n := l.finishCount(); n != 1 {
		t.Fatalf("finish calls = %d, want 1", n)
	}
}

// "an admitted operation settles without connection or residency leakage after disconnect"
func TestAdmittedOperationSettlesWithoutConnectionOrResidencyLeakageAfterDisconnect(t *testing.T) {
	handlerEntered, releaseHandler, handlerSettled := newGate(), newGate(), newGate()
	defer releaseHandler.open()
	f := withRuntimeHost(t, func(_ context.Context, call *host.Call, in protocol.TurnQueryInput) host.Outcome {
		r := call.AcquireResidency()
		handlerEntered.open()
		defer func() {
			r.Release()
			handlerSettled.open()
		}()
		<-releaseHandler.wait()
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	})
	c := f.connectClient()
	failure := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.QueryTurn(ctx, protocol.TurnQueryInput{SessionID: "session", TurnID: "disconnect"})
		failure <- err
	}()
	within(t, handlerEntered.wait(), 10*time.Second, "handler was not admitted")
	_ = c.Close()
	releaseHandler.open()
	within(t, handlerSettled.wait(), 10*time.Second, "handler did not settle after disconnect")
	if err := <-failure; err == nil {
		t.Fatal("request on a closed connection succeeded")
	}
	observer := f.connectClient()
	st := waitForStatus(t, observer, func(s protocol.HostStatus) bool {
		return s.Connections == 1 && s.ActiveOperations == 1 && s.ActiveResidencies == 0
	})
	if st.Connections != 1 || st.ActiveOperations != 1 || st.ActiveResidencies != 0 {
		t.Fatalf("status %+v", st)
	}
}

// "a duplicate active request id tears down only the offending connection"
func TestDuplicateActiveRequestIDTearsDownOnlyTheOffendingConnection(t *testing.T) {
	handlerEntered, releaseHandler := newGate(), newGate()
	defer releaseHandler.open()
	var handlerCalls atomic.Int32
	f := withRuntimeHost(t, func(_ context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
		handlerCalls.Add(1)
		handlerEntered.open()
		<-releaseHandler.wait()
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	})
	tc := openAcceptedTransport(t, f.kernel.Endpoint(), "duplicate-request-client")
	writeRequest(t, tc, "duplicate-request", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "session", TurnID: "first"})
	within(t, handlerEntered.wait(), 10*time.Second, "first request was not admitted")
	writeRequest(t, tc, "duplicate-request", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "session", TurnID: "second"})
	waitClosed(t, tc, 10*time.Second, "duplicate request id did not close its connection")
	if n := handlerCalls.Load(); n != 1 {
		t.Fatalf("handler calls = %d, want 1", n)
	}
	releaseHandler.open()
	_ = tc.Close()

	observer := f.connectClient()
	st := waitForStatus(t, observer, func(s protocol.HostStatus) bool {
		return s.Connections == 1 && s.ActiveOperations == 1 && s.ActiveResidencies == 0
	})
	if st.State != protocol.StateReady {
		t.Fatalf("state = %s", st.State)
	}
}

// "a sixty-fifth in-flight request tears down only the overflowing connection"
func TestSixtyFifthInFlightRequestTearsDownOnlyTheOverflowingConnection(t *testing.T) {
	releaseHandlers := newGate()
	defer releaseHandlers.open()
	f := withRuntimeHost(t, func(_ context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
		<-releaseHandlers.wait()
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	})
	tc := openAcceptedTransport(t, f.kernel.Endpoint(), "overflowing-client")
	observer := f.connectClient()
	var batch bytes.Buffer
	for i := range 64 {
		b, err := protocol.AppendRequest(nil, "overflow-"+itoa(i), protocol.OpTurnQuery,
			protocol.TurnQueryInput{SessionID: "session", TurnID: "turn-" + itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		batch.Write(b)
	}
	if err := tc.Write(batch.Bytes()); err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, observer, func(s protocol.HostStatus) bool {
		return s.Connections == 2 && s.ActiveOperations == 65 && s.ActiveResidencies == 0
	})
	writeRequest(t, tc, "overflow-64", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "session", TurnID: "turn-64"})
	waitClosed(t, tc, 10*time.Second, "in-flight overflow did not close its connection")
	releaseHandlers.open()
	_ = tc.Close()

	st := waitForStatus(t, observer, func(s protocol.HostStatus) bool {
		return s.Connections == 1 && s.ActiveOperations == 1 && s.ActiveResidencies == 0
	})
	if st.State != protocol.StateReady {
		t.Fatalf("state = %s", st.State)
	}
}

func canonicalProjection(sessionID string) continuity.Projection {
	root := protocol.TurnSnapshot{SessionID: sessionID, TurnID: "turn-" + sessionID, RunID: "run-" + sessionID, Status: protocol.TurnRunning}
	return continuity.Projection{
		Session: protocol.SessionContinuityIdentity{
			SessionID: sessionID, Status: protocol.SessionRunning, CreatedAt: 1, LastUsedAt: 1,
		},
		RootTurn: &root,
		Queue: protocol.SessionMessageQueueProjection{
			HostEpoch: "host-epoch", Steering: []protocol.MessageQueueEntrySnapshot{}, Followup: []protocol.MessageQueueEntrySnapshot{},
		},
		Interactions: protocol.InteractionProjection{Pending: []protocol.InteractionSnapshot{}},
	}
}

func connectionTextEvent(sessionID string, index int) continuity.Event {
	return continuity.Event{
		Type: continuity.TextDelta, TurnID: "turn-" + sessionID,
		MessageID: "message-" + sessionID, Text: "chunk-" + itoa(index),
	}
}

func openSubscription(t *testing.T, pair *transportPair, sessionID, requestID string) protocol.SubscriptionOpenResult {
	t.Helper()
	writeRequest(t, pair.client, requestID, protocol.OpSubscriptionOpen, protocol.SubscriptionOpenInput{SessionID: sessionID})
	resp, ok := readHostFrame(t, pair.client).(*protocol.Response)
	if !ok || resp.Operation != protocol.OpSubscriptionOpen || !resp.OK {
		t.Fatalf("unable to open %s subscription: %#v", sessionID, resp)
	}
	return resp.Result.(protocol.SubscriptionOpenResult)
}

// switchableWriter lets the test block the server transport's writes.
type switchableWriter struct {
	w       host.Transport
	mu      sync.Mutex
	blocked *gate
	release *gate
}

func (s *switchableWriter) Write(frames ...[]byte) error {
	s.mu.Lock()
	blocked, release := s.blocked, s.release
	s.mu.Unlock()
	if blocked != nil {
		blocked.open()
		<-release.wait()
	}
	return s.w.Write(frames...)
}

func (s *switchableWriter) block() (blocked, release *gate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blocked, s.release = newGate(), newGate()
	return s.blocked, s.release
}

type blockableTransport struct {
	host.Transport
	sw *switchableWriter
}

func (b blockableTransport) Write(frames ...[]byte) error { return b.sw.Write(frames...) }

// "evicting one slow subscription keeps sibling subscriptions and requests usable"
func TestEvictingOneSlowSubscriptionKeepsSiblingSubscriptionsAndRequestsUsable(t *testing.T) {
	pair := openTransportPair(t)
	gateLane := lane.New()
	coordinator := continuity.New("host-epoch", func(_ context.Context, sessionID string) (continuity.Projection, bool, error) {
		return canonicalProjection(sessionID), true, nil
	}, gateLane, nil)
	defer coordinator.Close()
	defer func() { _ = gateLane.Close(context.Background()) }()
	handlers := testHandlers(func(_ context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	})
	handlers[protocol.OpHostStatus] = statusHandler
	for op, h := range coordinator.Handlers() {
		handlers[op] = h
	}
	sw := &switchableWriter{w: pair.server}
	conn := host.NewConn(host.ConnConfig{
		Transport:         blockableTransport{Transport: pair.server, sw: sw},
		Conn:              connInfo("shared-subscription-connection"),
		ResolveHandlers:   func() host.Handlers { return handlers },
		ResolveContinuity: func() host.ConnectionObserver { return coordinator },
		BeginOperation: func(context.Context, *protocol.OperationSpec) (host.OperationLease, *protocol.OpError) {
			return &lease{}, nil
		},
	})
	run := make(chan struct{})
	go func() { _ = conn.Run(); close(run) }()
	var release *gate
	defer func() {
		if release != nil {
			release.open()
		}
		_ = pair.client.Close()
		<-run
	}()

	slow := openSubscription(t, pair, "slow-session", "open-slow")
	sibling := openSubscription(t, pair, "sibling-session", "open-sibling")
	var writeBlocked *gate
	writeBlocked, release = sw.block()

	for i := 1; i <= 32; i++ {
		if err := coordinator.AcceptRuntimeEvent("slow-session", "run-slow-session", connectionTextEvent("slow-session", i)); err != nil {
			t.Fatal(err)
		}
	}
	within(t, writeBlocked.wait(), 10*time.Second, "slow subscription never blocked in-flight")
	release.open()

	if err := coordinator.AcceptRuntimeEvent("sibling-session", "run-sibling-session", connectionTextEvent("sibling-session", 1)); err != nil {
		t.Fatal(err)
	}
	writeRequest(t, pair.client, "status-after-eviction", protocol.OpHostStatus, protocol.HostStatusInput{})

	var slowClosed *protocol.ClosedFrame
	var siblingDelta, status bool
	for slowClosed == nil || !siblingDelta || !status {
		switch f := readHostFrame(t, pair.client).(type) {
		case protocol.ClosedFrame:
			if f.SubscriptionID == slow.SubscriptionID {
				slowClosed = &f
			}
		case protocol.DeltaFrame:
			if f.SubscriptionID == sibling.SubscriptionID {
				siblingDelta = true
			}
		case *protocol.Response:
			if f.RequestID == "status-after-eviction" {
				status = true
			}
		}
	}
	if slowClosed.Reason != protocol.CloseSlowConsumer {
		t.Fatalf("reason = %s", slowClosed.Reason)
	}
	if slowClosed.Sequence != 2 {
		t.Fatalf("closed sequence = %d, want 2", slowClosed.Sequence)
	}
	select {
	case <-pair.server.Closed():
		t.Fatal("the shared connection was destroyed")
	default:
	}
}

var _ = client.Connected

// An answer to a request of a pipelined burst is written as soon as it is
// ready, not held until a slow request sent after it in the same write
// finishes.
func TestInlineAnswerIsNotHeldBehindASlowRequest(t *testing.T) {
	release := newGate()
	defer release.open()
	f := withRuntimeHost(t, func(_ context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
		<-release.wait()
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	})
	tc := openAcceptedTransport(t, f.kernel.Endpoint(), "inline-then-slow")
	var batch bytes.Buffer
	b1, _ := protocol.AppendRequest(nil, "status", protocol.OpHostStatus, protocol.HostStatusInput{})
	b2, _ := protocol.AppendRequest(nil, "slow", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "s", TurnID: "t"})
	batch.Write(b1)
	batch.Write(b2)
	if err := tc.Write(batch.Bytes()); err != nil {
		t.Fatal(err)
	}
	resp, ok := readHostFrame(t, tc).(*protocol.Response)
	if !ok || resp.RequestID != "status" {
		t.Fatalf("first frame %#v, want the host.status answer", resp)
	}
	release.open()
	if resp, ok := readHostFrame(t, tc).(*protocol.Response); !ok || resp.RequestID != "slow" {
		t.Fatalf("second frame %#v", resp)
	}
}

// A client that hangs up right after its hello must not leave the host's
// writer goroutine behind (TestMain's leak check fails otherwise).
func TestHangUpAfterHelloLeaksNothing(t *testing.T) {
	f := withRuntimeHost(t, func(_ context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	})
	for i := range 50 {
		nc, err := net.Dial("unix", f.kernel.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		tc := transport.New(nc)
		_ = tc.WriteValue(protocol.Hello{Kind: "hello", ClientInstanceID: "hang-up-" + itoa(i), Surface: protocol.SurfaceTUI})
		_ = tc.Close()
	}
	observer := f.connectClient()
	waitForStatus(t, observer, func(s protocol.HostStatus) bool { return s.Connections == 1 })
}

// A client that sends requests and never reads is torn down by the
// outbound bound; the reader never blocks on its socket.
func TestNonReadingFloodIsTornDown(t *testing.T) {
	f := withRuntimeHost(t, func(_ context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	})
	tc := openAcceptedTransport(t, f.kernel.Endpoint(), "flood")
	if uc, ok := tc.NetConn().(*net.UnixConn); ok {
		_ = uc.SetReadBuffer(4096) // let the host's writes back up quickly
	}
	done := make(chan error, 1)
	go func() {
		var batch bytes.Buffer
		for i := 0; ; i++ {
			batch.Reset()
			for j := range 64 {
				b, _ := protocol.AppendRequest(nil, "flood-"+itoa(i*64+j), protocol.OpHostStatus, protocol.HostStatusInput{})
				batch.Write(b)
			}
			if err := tc.Write(batch.Bytes()); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case <-done: // the host closed the connection
	case <-time.After(20 * time.Second):
		t.Fatal("a client that never reads was not torn down")
	}
	observer := f.connectClient()
	waitForStatus(t, observer, func(s protocol.HostStatus) bool { return s.Connections == 1 && s.ActiveOperations == 1 })
}

// An answer must go out even when the bytes read after it are only part of
// the next frame.
func TestAnswerIsWrittenWhenOnlyAPartialFrameFollows(t *testing.T) {
	f := withRuntimeHost(t, func(_ context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	})
	tc := openAcceptedTransport(t, f.kernel.Endpoint(), "partial")
	req, _ := protocol.AppendRequest(nil, "status", protocol.OpHostStatus, protocol.HostStatusInput{})
	// Pad the frame with JSON whitespace so it ends exactly where the host's
	// first read buffer (4 KiB) ends, then start another frame.
	pad := 4096 - len(req)
	frame := append(append([]byte{}, req[:len(req)-1]...), bytes.Repeat([]byte(" "), pad)...)
	frame = append(frame, '\n')
	frame = append(frame, `{"requestId":"q1",`...)
	if err := tc.Write(frame); err != nil {
		t.Fatal(err)
	}
	resp, ok := readHostFrame(t, tc).(*protocol.Response)
	if !ok || resp.RequestID != "status" || !resp.OK {
		t.Fatalf("got %#v, want the host.status answer", resp)
	}
}
