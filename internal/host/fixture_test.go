package host_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/internal/transport"
	"github.com/maka-agent/maka/protocol"
)

func TestMain(m *testing.M) {
	if endpoint := os.Getenv(peerDialEnv); endpoint != "" {
		os.Exit(peerDial(endpoint)) // a helper process of TestPeerOfAnotherUIDIsClosedBeforeHello
	}
	goleak.VerifyTestMain(m)
}

// gate is a one-shot release signal (the seed's deferred()).
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open()                 { g.once.Do(func() { close(g.ch) }) }
func (g *gate) wait() <-chan struct{} { return g.ch }
func (g *gate) isOpen() bool {
	select {
	case <-g.ch:
		return true
	default:
		return false
	}
}

// within fails the test unless ch closes within d.
func within(t *testing.T, ch <-chan struct{}, d time.Duration, msg string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatal(msg)
	}
}

// newRoot creates a storage root in a temp dir; its control directory
// (under the real home) is removed when the test ends.
func newRoot(t *testing.T) (string, *storageroot.Capability) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	capability, err := storageroot.Resolve(root, storageroot.KindInteractive)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns, err := storageroot.ControlNamespace()
		if err == nil {
			_ = os.RemoveAll(filepath.Join(ns, capability.RootID()))
		}
	})
	return root, capability
}

func acquireOwner(t *testing.T, capability *storageroot.Capability) *storageroot.Owner {
	t.Helper()
	owner, err := storageroot.TryAcquireOwner(capability)
	if err != nil || owner == nil {
		t.Fatalf("owner not acquired: %v", err)
	}
	return owner
}

// turnQuery is the turn.query handler a fixture installs.
type turnQuery func(ctx context.Context, call *host.Call, in protocol.TurnQueryInput) host.Outcome

func runningSnapshot(sessionID, turnID string) protocol.TurnSnapshot {
	return protocol.TurnSnapshot{SessionID: sessionID, TurnID: turnID, RunID: "run-" + turnID, Status: protocol.TurnRunning}
}

// testHandlers mirrors the seed's createHandlers: turn.start / turn.stop
// answer a running snapshot, turn.query is the test's, the rest are
// unavailable.
func testHandlers(q turnQuery) host.Handlers {
	h := host.UnavailableHandlers()
	h[protocol.OpTurnStart] = func(_ context.Context, call *host.Call) host.Outcome {
		in := call.Input.(protocol.TurnStartInput)
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	}
	h[protocol.OpTurnStop] = func(_ context.Context, call *host.Call) host.Outcome {
		in := call.Input.(protocol.TurnStopInput)
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	}
	h[protocol.OpTurnQuery] = func(ctx context.Context, call *host.Call) host.Outcome {
		return q(ctx, call, call.Input.(protocol.TurnQueryInput))
	}
	return h
}

type testComposition struct {
	handlers host.Handlers
}

func (c *testComposition) Handlers() host.Handlers             { return c.handlers }
func (c *testComposition) Continuity() host.ConnectionObserver { return nil }
func (c *testComposition) Recover(context.Context) error       { return nil }
func (c *testComposition) BeginDrain()                         {}
func (c *testComposition) Close(context.Context) error         { return nil }

// hostFixture is a running kernel on a fresh root (the seed's withRuntimeHost).
type hostFixture struct {
	t      *testing.T
	root   string
	kernel *host.Kernel
	mu     sync.Mutex
	conns  []*client.Conn
}

func withRuntimeHost(t *testing.T, q turnQuery) *hostFixture {
	t.Helper()
	return withRuntimeHostOptions(t, testHandlers(q), nil)
}

// withRuntimeHostOptions is withRuntimeHost with a handler table of the
// test's and options it adjusts (configure may be nil).
func withRuntimeHostOptions(t *testing.T, handlers host.Handlers, configure func(*host.Options)) *hostFixture {
	t.Helper()
	root, capability := newRoot(t)
	owner := acquireOwner(t, capability)
	opts := host.Options{
		Owner:     owner,
		IdleGrace: 10 * time.Second,
		CompositionFactory: func(context.Context, *host.Kernel) (host.Composition, error) {
			return &testComposition{handlers: handlers}, nil
		},
	}
	if configure != nil {
		configure(&opts)
	}
	k, err := host.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	f := &hostFixture{t: t, root: root, kernel: k}
	t.Cleanup(func() {
		f.mu.Lock()
		conns := f.conns
		f.mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := k.Close(ctx); err != nil {
			t.Errorf("host close: %v", err)
		}
	})
	return f
}

func (f *hostFixture) connectClient() *client.Conn {
	f.t.Helper()
	res, err := client.Connect(context.Background(), client.Options{RootPath: f.root, Surface: protocol.SurfaceTUI})
	if err != nil {
		f.t.Fatal(err)
	}
	if res.Kind != client.Connected {
		f.t.Fatalf("connect: %s %s %v", res.Kind, res.Reason, res.Err)
	}
	f.mu.Lock()
	f.conns = append(f.conns, res.Conn)
	f.mu.Unlock()
	return res.Conn
}

// openAcceptedTransport dials the endpoint and completes a handshake by hand.
func openAcceptedTransport(t *testing.T, endpoint, clientInstanceID string) *transport.Conn {
	t.Helper()
	nc, err := net.Dial("unix", endpoint)
	if err != nil {
		t.Fatal(err)
	}
	tc := transport.New(nc)
	t.Cleanup(func() { _ = tc.Close() })
	if err := tc.WriteValue(protocol.Hello{Kind: "hello", ClientInstanceID: clientInstanceID, Surface: protocol.SurfaceTUI}); err != nil {
		t.Fatal(err)
	}
	v, err := tc.ReadFrame(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := protocol.DecodeHostFrame(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := hs.(*protocol.Accepted); !ok {
		t.Fatalf("handshake: got %T", hs)
	}
	return tc
}

func writeRequest(t *testing.T, tc *transport.Conn, requestID string, op protocol.Operation, input any) {
	t.Helper()
	b, err := protocol.AppendRequest(nil, requestID, op, input)
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.Write(b); err != nil {
		t.Fatal(err)
	}
}

func readHostFrame(t *testing.T, tc *transport.Conn) any {
	t.Helper()
	v, err := tc.ReadFrame(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	f, err := protocol.DecodeHostFrame(v)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// waitClosed waits until the host closes tc (a read returns an error).
func waitClosed(t *testing.T, tc *transport.Conn, d time.Duration, msg string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		_, err := tc.ReadFrame(time.Until(deadline))
		if err == nil {
			continue
		}
		if transport.IsCode(err, transport.CodeReadTimeout) {
			t.Fatal(msg)
		}
		return
	}
}

// waitForStatus polls host.status until pred holds (bounded), like the
// seed's waitForStatus; the counters settle asynchronously.
func waitForStatus(t *testing.T, c *client.Conn, pred func(protocol.HostStatus) bool) protocol.HostStatus {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		st, err := c.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if pred(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("host operation counters did not settle: %+v", st)
		}
		time.Sleep(5 * time.Millisecond) // polling a remote counter, not synchronisation
	}
}

// transportPair is a connected pair of framed transports over loopback TCP
// (the seed's openTransportPair).
type transportPair struct {
	client, server *transport.Conn
}

func openTransportPair(t *testing.T) *transportPair {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	p := &transportPair{client: transport.New(cc), server: transport.New(sc)}
	t.Cleanup(func() {
		_ = p.client.Close()
		_ = p.server.Close()
	})
	return p
}

func statusResponse(requestID string) []byte {
	b, err := protocol.AppendSuccess(nil, requestID, protocol.OpHostStatus,
		[]byte(`{"hostEpoch":"host-epoch","state":"ready","connections":1,"activeOperations":0,"activeResidencies":0}`))
	if err != nil {
		panic(err)
	}
	return b
}

func largeFailureResponse(requestID string) []byte {
	msg := make([]byte, 48*1024)
	for i := range msg {
		msg[i] = 'x'
	}
	b, err := protocol.AppendFailure(nil, requestID, protocol.OpHostStatus,
		&protocol.OpError{Code: protocol.ErrInternalFailure, Message: string(msg)})
	if err != nil {
		panic(err)
	}
	return b
}

// lease is a test OperationLease counting its calls.
type lease struct {
	mu       sync.Mutex
	finishes int
}

func (l *lease) AcquireResidency() host.Residency { return nopResidency{} }
func (l *lease) Seal()                            {}
func (l *lease) Finish() {
	l.mu.Lock()
	l.finishes++
	l.mu.Unlock()
}
func (l *lease) finishCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.finishes
}

type nopResidency struct{}

func (nopResidency) Release() {}

func statusHandler(context.Context, *host.Call) host.Outcome {
	return host.OK(protocol.HostStatus{HostEpoch: "host-epoch", State: protocol.StateReady, Connections: 1, ActiveOperations: 1})
}

func connInfo(id string) host.ConnInfo {
	return host.ConnInfo{HostEpoch: "host-epoch", ConnectionID: id, Surface: protocol.SurfaceTUI, Principal: "local_os_user"}
}

var errTest = errors.New("forced transport failure")

func itoa(i int) string { return fmt.Sprint(i) }

// resetAndDestroy closes the TCP connection with a reset (SO_LINGER 0).
func resetAndDestroy(t *testing.T, tc *transport.Conn) {
	t.Helper()
	if c, ok := tc.NetConn().(*net.TCPConn); ok {
		if err := c.SetLinger(0); err != nil {
			t.Fatal(err)
		}
	}
	_ = tc.Close()
}
