package host_test

// The connection's own context, its one cleanup and the peer admission
// hook, as a client sees them.

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/transport"
	"github.com/maka-agent/maka/protocol"
)

// pinnedUntilReleased makes the host's composition hold a residency, so
// that a host with a tiny idle grace stays up until the test has its
// clients connected; the returned function releases it.
func pinnedUntilReleased(opts *host.Options) (release func()) {
	pinned := make(chan host.Residency, 1)
	factory := opts.CompositionFactory
	opts.CompositionFactory = func(ctx context.Context, k *host.Kernel) (host.Composition, error) {
		pinned <- k.AcquireResidency()
		return factory(ctx, k)
	}
	return func() { (<-pinned).Release() }
}

// readUntilClosed reads what the host sends on tc until it closes the
// connection, and returns the frames read; the test fails if the host
// keeps the connection open (bounded, so that a host that never closes it
// fails the test instead of hanging it).
func readUntilClosed(t *testing.T, tc *transport.Conn) []protocol.Value {
	t.Helper()
	var frames []protocol.Value
	for {
		v, err := tc.ReadFrame(10 * time.Second)
		if transport.IsCode(err, transport.CodeReadTimeout) {
			t.Fatalf("the host kept the connection open (read %d frames)", len(frames))
		}
		if err != nil {
			return frames
		}
		frames = append(frames, v)
	}
}

// panickingResult is a result whose own encoder panics.
type panickingResult struct{}

func (panickingResult) Validate() error            { return nil }
func (panickingResult) AppendJSON(b []byte) []byte { panic("result encoder panicked") }

// A panic while serving one client's request ends that client's
// connection, and only it: the host stops counting it, the other client
// connected at the same time is still served, and once that one leaves the
// host exits on idle (which it cannot while an operation or a connection
// is still counted), leaving no goroutine behind.
func TestPanicWhileServingARequestEndsOnlyThatConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		// query answers turn.query on the panicking connection.
		query func(call *host.Call) host.Outcome
		// answered: the client may see the response before the close.
		answered bool
	}{
		{name: "handler", query: func(*host.Call) host.Outcome { panic("handler panicked") }},
		{name: "result encoder", query: func(*host.Call) host.Outcome { return host.OK(panickingResult{}) }},
		{name: "after queued", answered: true, query: func(*host.Call) host.Outcome {
			return host.Outcome{
				Result:      runningSnapshot("session", "turn"),
				AfterQueued: func(error) { panic("after-queued callback panicked") },
			}
		}},
		{name: "push frame callback", answered: true, query: func(call *host.Call) host.Outcome {
			// A subscription owner's callback runs on the writer.
			if err := call.Conn.Send([]byte(`{"kind":"push"}`+"\n"), func(error) { panic("push callback panicked") }); err != nil {
				return host.Fail(protocol.ErrInternalFailure, err.Error())
			}
			return host.OK(runningSnapshot("session", "turn"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			var release func()
			logs := newRecordingHandler()
			f := withRuntimeHostOptions(t, testHandlers(func(_ context.Context, call *host.Call, in protocol.TurnQueryInput) host.Outcome {
				if in.TurnID == "panic" {
					return tc.query(call)
				}
				return host.OK(runningSnapshot(in.SessionID, in.TurnID))
			}), func(o *host.Options) {
				o.IdleGrace = time.Millisecond
				o.Logger = slog.New(logs)
				release = pinnedUntilReleased(o)
			})
			panicking := openAcceptedTransport(t, f.kernel.Endpoint(), "panicking-client")
			other := f.connectClient()
			release()
			if st, err := other.Status(t.Context()); err != nil || st.Connections != 2 {
				t.Fatalf("status before the panic: %+v %v, want 2 connections", st, err)
			}

			writeRequest(t, panicking, "panics", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "session", TurnID: "panic"})
			frames := readUntilClosed(t, panicking)
			if len(frames) > 0 && !tc.answered {
				t.Fatalf("the panicking request was answered (%d frames)", len(frames))
			}

			st, err := other.Status(t.Context())
			if err != nil {
				t.Fatalf("the other client is no longer served: %v", err)
			}
			if st.Connections != 1 {
				t.Fatalf("status after the panic: %+v, want 1 connection", st)
			}
			if snap, err := other.QueryTurn(t.Context(), protocol.TurnQueryInput{SessionID: "session", TurnID: "turn"}); err != nil || snap.TurnID != "turn" {
				t.Fatalf("turn.query on the other client: %+v %v", snap, err)
			}

			_ = other.Close()
			within(t, f.kernel.Done(), 10*time.Second, "the host did not exit on idle: the panicked connection or its operation is still counted")
			if err := f.kernel.Err(); err != nil {
				t.Fatalf("idle exit: %v", err)
			}
			goleak.VerifyNone(t, ignore)

			// The host says what happened, to which peer, and why the
			// connection ended.
			pid := int64(os.Getpid())
			ofThisProcess := func(a map[string]slog.Value) bool {
				for _, m := range a["peer"].Group() {
					if m.Key == "pid" && m.Value.Int64() == pid {
						return true
					}
				}
				return false
			}
			if a, ok := logs.find("connection panicked", ofThisProcess); !ok || a["stack"].String() == "" {
				t.Fatalf("no panic log line with the peer and a stack (%v)", a)
			}
			if _, ok := logs.find("connection closed", func(a map[string]slog.Value) bool {
				return a["reason"].String() == "panic" && ofThisProcess(a)
			}); !ok {
				t.Fatal(`no "connection closed" log line with reason panic`)
			}
		})
	}
}

// A handler's context carries the peer the operating system reported for
// its connection. A query's context ends when its client disconnects; a
// command's does not: what it changes must not depend on the client
// staying.
func TestHandlerContextCarriesThePeerAndAQueryEndsWithItsClient(t *testing.T) {
	type seen struct {
		ctx      context.Context
		fromCtx  host.Peer
		ok       bool
		fromConn host.Peer
	}
	queryEntered, commandEntered := make(chan seen, 1), make(chan seen, 1)
	releaseCommand := newGate()
	defer releaseCommand.open()
	commandDone := make(chan error, 1)
	handlers := testHandlers(func(ctx context.Context, call *host.Call, in protocol.TurnQueryInput) host.Outcome {
		p, ok := host.PeerFromContext(ctx)
		queryEntered <- seen{ctx, p, ok, call.Conn.Peer}
		<-ctx.Done()
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	})
	handlers[protocol.OpTurnStart] = func(ctx context.Context, call *host.Call) host.Outcome {
		p, ok := host.PeerFromContext(ctx)
		commandEntered <- seen{ctx, p, ok, call.Conn.Peer}
		<-releaseCommand.wait()
		commandDone <- ctx.Err()
		in := call.Input.(protocol.TurnStartInput)
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	}
	f := withRuntimeHostOptions(t, handlers, nil)
	tc := openAcceptedTransport(t, f.kernel.Endpoint(), "leaving-client")
	writeRequest(t, tc, "query", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "session", TurnID: "turn"})
	writeRequest(t, tc, "command", protocol.OpTurnStart, protocol.TurnStartInput{
		SessionID: "session", TurnID: "turn", Content: protocol.MessageContent{Text: "hello"},
	})

	want := host.Peer{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), PID: os.Getpid()}
	var query, command seen
	for _, got := range []*seen{&query, &command} {
		var ch chan seen
		if got == &query {
			ch = queryEntered
		} else {
			ch = commandEntered
		}
		select {
		case *got = <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("handler not entered")
		}
		if !got.ok || got.fromCtx != want || got.fromConn != want {
			t.Fatalf("peer: from ctx %+v (%v), from call %+v; want %+v", got.fromCtx, got.ok, got.fromConn, want)
		}
	}
	if query.ctx.Err() != nil || command.ctx.Err() != nil {
		t.Fatal("a handler's context ended while its client was connected")
	}

	_ = tc.Close()
	within(t, query.ctx.Done(), 10*time.Second, "the query's context did not end when its client disconnected")
	if !errors.Is(query.ctx.Err(), context.Canceled) {
		t.Fatalf("query context: %v", query.ctx.Err())
	}
	// The connection is gone (the host cancels a query's context only in
	// its teardown), and the command is still running with a live context.
	if err := command.ctx.Err(); err != nil {
		t.Fatalf("the command's context ended with its client: %v", err)
	}
	releaseCommand.open()
	select {
	case err := <-commandDone:
		if err != nil {
			t.Fatalf("command context at its end: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("command did not finish")
	}
	observer := f.connectClient()
	if st, err := observer.Status(t.Context()); err != nil || st.Connections != 1 {
		t.Fatalf("status after the client left: %+v %v, want 1 connection", st, err)
	}
}

// recordingHandler keeps every log record.
type recordingHandler struct {
	mu      *sync.Mutex
	records *[]slog.Record
	attrs   []slog.Attr
}

func newRecordingHandler() *recordingHandler {
	return &recordingHandler{mu: new(sync.Mutex), records: new([]slog.Record)}
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.mu.Lock()
	*h.records = append(*h.records, r)
	h.mu.Unlock()
	return nil
}

func (h *recordingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

func (h *recordingHandler) WithGroup(string) slog.Handler { return h }

// find returns the attributes of the first record with message msg whose
// attributes match (match may be nil).
func (h *recordingHandler) find(msg string, match func(map[string]slog.Value) bool) (map[string]slog.Value, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range *h.records {
		if r.Message != msg {
			continue
		}
		attrs := map[string]slog.Value{}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.Resolve()
			return true
		})
		if match == nil || match(attrs) {
			return attrs, true
		}
	}
	return nil, false
}

// A peer the admission hook refuses is closed before its hello is read,
// with a log line, and never counted; the hook is asked with the peer the
// operating system reported, and a peer it admits is served.
func TestRefusedPeerIsClosedBeforeItsHello(t *testing.T) {
	errRefused := errors.New("peer started inside a sandboxed tool call")
	var refuse atomic.Bool
	refuse.Store(true)
	asked := make(chan host.Peer, 16)
	logs := newRecordingHandler()
	f := withRuntimeHostOptions(t, testHandlers(nil), func(o *host.Options) {
		o.Logger = slog.New(logs)
		o.RefusePeer = func(p host.Peer) error {
			// A pidfd of the peer where the kernel has SO_PEERPIDFD,
			// closed once the checks ran.
			p.PIDFD = nil
			asked <- p
			if refuse.Load() {
				return errRefused
			}
			return nil
		}
	})
	want := host.Peer{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), PID: os.Getpid()}

	nc, err := net.Dial("unix", f.kernel.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	refused := transport.New(nc)
	defer refused.Close()
	// The host may have closed the socket already: the hello may not even
	// be written.
	_ = refused.WriteValue(protocol.Hello{Kind: "hello", ClientInstanceID: "refused", Surface: protocol.SurfaceTUI})
	if frames := readUntilClosed(t, refused); len(frames) > 0 {
		t.Fatalf("a refused peer was answered (%d frames)", len(frames))
	}
	if p := <-asked; p != want {
		t.Fatalf("hook asked about %+v, want %+v", p, want)
	}
	attrs, ok := logs.find("connection refused", nil)
	if !ok {
		t.Fatal("no log line for the refused peer")
	}
	if got := attrs["err"].String(); got != errRefused.Error() {
		t.Fatalf("refusal logged with err %q", got)
	}

	refuse.Store(false)
	c := f.connectClient()
	if p := <-asked; p != want {
		t.Fatalf("hook asked about %+v, want %+v", p, want)
	}
	if st, err := c.Status(t.Context()); err != nil || st.Connections != 1 {
		t.Fatalf("status: %+v %v, want only the admitted connection", st, err)
	}
}

// panickingReader is a transport whose second read panics once release
// is closed.
type panickingReader struct {
	*transport.Conn
	reads   atomic.Int32
	release chan struct{}
}

func (p *panickingReader) ReadClientFrameTo(timeout time.Duration, req *protocol.Request) (any, error) {
	if p.reads.Add(1) == 2 {
		<-p.release
		panic("reader panicked")
	}
	return p.Conn.ReadClientFrameTo(timeout, req)
}

// A panic on one of a Conn's goroutines, the reader or the goroutine of a
// request (in its handler), tears the Conn down once: the client sees the
// close, Run returns, and the Conn's goroutines are gone.
func TestPanicOnTheReaderTearsTheConnDownOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reader bool // the transport panics, not the handler
	}{{name: "reader", reader: true}, {name: "handler"}} {
		t.Run(tc.name, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			pair := openTransportPair(t)
			var teardowns atomic.Int32
			handlers := testHandlers(func(_ context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
				if !tc.reader {
					panic("handler panicked")
				}
				return host.OK(runningSnapshot(in.SessionID, in.TurnID))
			})
			l := &lease{}
			var tr host.Transport = pair.server
			release := make(chan struct{})
			if tc.reader {
				tr = &panickingReader{Conn: pair.server, release: release}
			}
			conn := host.NewConn(host.ConnConfig{
				Transport:       tr,
				Conn:            connInfo("panicking-reader"),
				ResolveHandlers: func() host.Handlers { return handlers },
				BeginOperation: func(context.Context, *protocol.OperationSpec) (host.OperationLease, *protocol.OpError) {
					return l, nil
				},
				OnTeardown: func(error) { teardowns.Add(1) },
			})
			run := make(chan error, 1)
			go func() { run <- conn.Run() }()

			writeRequest(t, pair.client, "first", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "session", TurnID: "turn"})
			var frames []protocol.Value
			if tc.reader {
				// The request read before the panic is answered; then
				// the reader panics.
				v, err := pair.client.ReadFrame(10 * time.Second)
				if err != nil {
					t.Fatalf("the first request was not answered: %v", err)
				}
				frames = append(frames, v)
				close(release)
			}
			frames = append(frames, readUntilClosed(t, pair.client)...)
			if tc.reader && len(frames) != 1 {
				t.Fatalf("read %d frames, want the first request's answer", len(frames))
			}
			if !tc.reader && len(frames) != 0 {
				t.Fatalf("the panicking request was answered (%d frames)", len(frames))
			}
			select {
			case err := <-run:
				if err == nil {
					t.Fatal("Run reported a clean end after a panic")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return")
			}
			if n := teardowns.Load(); n != 1 {
				t.Fatalf("teardowns = %d, want 1", n)
			}
			if n := l.finishCount(); n != 1 {
				t.Fatalf("lease finishes = %d, want 1", n)
			}
			_ = pair.client.Close()
			goleak.VerifyNone(t, ignore)
		})
	}
}

// A client that only half-closes its socket has not gone: its query keeps
// its context and is answered before the host closes the connection.
func TestHalfClosedClientIsStillAnswered(t *testing.T) {
	entered, release := newGate(), newGate()
	defer release.open()
	queryErr := make(chan error, 1)
	f := withRuntimeHost(t, func(ctx context.Context, _ *host.Call, in protocol.TurnQueryInput) host.Outcome {
		entered.open()
		<-release.wait()
		queryErr <- ctx.Err()
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	})
	tc := openAcceptedTransport(t, f.kernel.Endpoint(), "half-closing-client")
	writeRequest(t, tc, "query", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "session", TurnID: "turn"})
	within(t, entered.wait(), 10*time.Second, "handler not entered")
	if err := tc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	release.open()
	frames := readUntilClosed(t, tc)
	if len(frames) != 1 {
		t.Fatalf("read %d frames, want the query's answer", len(frames))
	}
	resp, err := protocol.DecodeHostFrame(frames[0])
	if r, ok := resp.(*protocol.Response); err != nil || !ok || !r.OK || r.RequestID != "query" {
		t.Fatalf("answer %#v %v", resp, err)
	}
	if err := <-queryErr; err != nil {
		t.Fatalf("the query's context ended while its client was reading: %v", err)
	}
}
