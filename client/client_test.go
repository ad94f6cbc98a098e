package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/continuity"
	"github.com/maka-agent/maka/internal/control"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/internal/transport"
	"github.com/maka-agent/maka/protocol"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(listenAsEnv); path != "" {
		os.Exit(listenAs(path)) // a helper process of TestSocketOfAnotherUserIsRefused
	}
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait for something the host or client does on
// its own goroutines.
const waitTimeout = 5 * time.Second

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func within(t *testing.T, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		t.Fatal(msg)
	}
}

// deadlineGate is a context whose deadline passes when the test calls
// expire (at the latest after waitTimeout, so that a test that never
// expires it cannot hang): a call bounded by it times out only once the
// host has seen it, however slowly the machine runs, and fails with
// context.DeadlineExceeded like any call whose deadline passed.
type deadlineGate struct {
	context.Context
	deadline time.Time
	done     chan struct{}
	once     sync.Once
}

func newDeadlineGate(t *testing.T) *deadlineGate {
	t.Helper()
	g := &deadlineGate{Context: context.Background(), deadline: time.Now().Add(waitTimeout), done: make(chan struct{})}
	timer := time.AfterFunc(waitTimeout, g.expire)
	t.Cleanup(func() {
		timer.Stop()
		g.expire()
	})
	return g
}

func (g *deadlineGate) expire()                     { g.once.Do(func() { close(g.done) }) }
func (g *deadlineGate) Deadline() (time.Time, bool) { return g.deadline, true }
func (g *deadlineGate) Done() <-chan struct{}       { return g.done }
func (g *deadlineGate) Err() error {
	select {
	case <-g.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// signal is a one-shot event.
type signal struct {
	once sync.Once
	ch   chan struct{}
}

func newSignal() *signal                { return &signal{ch: make(chan struct{})} }
func (s *signal) fire()                 { s.once.Do(func() { close(s.ch) }) }
func (s *signal) done() <-chan struct{} { return s.ch }

// ---- storage root ----

// newRoot resolves a fresh storage root under t.TempDir(); its control
// directory (under the account's home) is removed when the test ends.
func newRoot(t *testing.T) (string, *storageroot.Capability) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	capability, err := storageroot.Resolve(root, storageroot.KindInteractive)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ns, err := storageroot.ControlNamespace(); err == nil {
			_ = os.RemoveAll(filepath.Join(ns, capability.RootID()))
		}
	})
	return root, capability
}

func controlDir(t *testing.T, capability *storageroot.Capability) string {
	t.Helper()
	dir, err := storageroot.PrepareControlDirectory(capability)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func readRegistration(t *testing.T, dir string) control.Registration {
	t.Helper()
	reg, found, err := control.ReadRegistration(dir)
	if err != nil || !found {
		t.Fatalf("registration: found=%v err=%v", found, err)
	}
	return reg
}

// ---- host fixture ----

// projections is the canonical projection source of the host's
// continuity coordinator.
type projections struct {
	mu    sync.Mutex
	epoch string
	m     map[string]continuity.Projection
}

func (p *projections) add(sessionID string) {
	root := protocol.TurnSnapshot{SessionID: sessionID, TurnID: "turn-" + sessionID, RunID: "run-" + sessionID, Status: protocol.TurnRunning}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[sessionID] = continuity.Projection{
		Session:  protocol.SessionContinuityIdentity{SessionID: sessionID, Status: protocol.SessionRunning, CreatedAt: 1, LastUsedAt: 1},
		RootTurn: &root,
		Queue: protocol.SessionMessageQueueProjection{
			HostEpoch: p.epoch, Steering: []protocol.MessageQueueEntrySnapshot{}, Followup: []protocol.MessageQueueEntrySnapshot{},
		},
		Interactions: protocol.InteractionProjection{Pending: []protocol.InteractionSnapshot{}},
	}
}

func (p *projections) setLastUsed(sessionID string, at int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := p.m[sessionID]
	pr.Session.LastUsedAt = at
	p.m[sessionID] = pr
}

func (p *projections) read(_ context.Context, sessionID string) (continuity.Projection, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr, ok := p.m[sessionID]
	return pr, ok, nil
}

type composition struct {
	handlers host.Handlers
	coord    *continuity.Publisher
	gate     *lane.Gate
}

func (c *composition) Handlers() host.Handlers             { return c.handlers }
func (c *composition) Continuity() host.ConnectionObserver { return c.coord }
func (c *composition) Recover(context.Context) error       { return nil }
func (c *composition) BeginDrain()                         {}
func (c *composition) Close(ctx context.Context) error {
	c.coord.Close()
	return c.gate.Close(ctx)
}

type fixture struct {
	t      *testing.T
	root   string
	kernel *host.Kernel
	coord  *continuity.Publisher
	store  *projections

	mu sync.Mutex
	// afterOpen runs after a successful subscription.open handler, before
	// its response is queued (the subscriber is still inactive).
	afterOpen func(sessionID string, res protocol.SubscriptionOpenResult)
	// closes receives the id of every subscription.close the host serves.
	closes chan string
}

func runningSnapshot(sessionID, turnID string) protocol.TurnSnapshot {
	return protocol.TurnSnapshot{SessionID: sessionID, TurnID: turnID, RunID: "run-" + turnID, Status: protocol.TurnRunning}
}

// startHost starts a kernel on a fresh root. Its composition serves
// subscriptions through a continuity coordinator, turn.query answers a
// running snapshot, and extra overrides handlers.
func startHost(t *testing.T, extra host.Handlers) *fixture {
	t.Helper()
	root, capability := newRoot(t)
	owner, err := storageroot.TryAcquireOwner(capability)
	if err != nil || owner == nil {
		t.Fatalf("owner not acquired: %v", err)
	}
	f := &fixture{t: t, root: root, closes: make(chan string, 64)}
	k, err := host.Start(context.Background(), host.Options{
		Owner:     owner,
		IdleGrace: host.MaxTimerDuration, // idle exit armed, but never within a test
		CompositionFactory: func(_ context.Context, k *host.Kernel) (host.Composition, error) {
			f.store = &projections{epoch: k.HostEpoch(), m: map[string]continuity.Projection{}}
			g := lane.New()
			f.coord = continuity.New(k.HostEpoch(), f.store.read, g, nil)
			h := host.Handlers{
				protocol.OpTurnQuery: func(_ context.Context, call *host.Call) host.Outcome {
					in := call.Input.(protocol.TurnQueryInput)
					return host.OK(runningSnapshot(in.SessionID, in.TurnID))
				},
			}
			sub := f.coord.Handlers()
			h[protocol.OpSubscriptionOpen] = func(ctx context.Context, call *host.Call) host.Outcome {
				out := sub[protocol.OpSubscriptionOpen](ctx, call)
				f.mu.Lock()
				hook := f.afterOpen
				f.mu.Unlock()
				if out.Err == nil && hook != nil {
					hook(call.Input.(protocol.SubscriptionOpenInput).SessionID, out.Result.(protocol.SubscriptionOpenResult))
				}
				return out
			}
			h[protocol.OpSubscriptionClose] = func(ctx context.Context, call *host.Call) host.Outcome {
				out := sub[protocol.OpSubscriptionClose](ctx, call)
				select {
				case f.closes <- call.Input.(protocol.SubscriptionCloseInput).SubscriptionID:
				default:
				}
				return out
			}
			for op, fn := range extra {
				h[op] = fn
			}
			return &composition{handlers: h, coord: f.coord, gate: g}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.kernel = k
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := k.Close(ctx); err != nil {
			t.Errorf("host close: %v", err)
		}
	})
	return f
}

func (f *fixture) setAfterOpen(hook func(sessionID string, res protocol.SubscriptionOpenResult)) {
	f.mu.Lock()
	f.afterOpen = hook
	f.mu.Unlock()
}

// connect connects a client with opts (RootPath and Surface filled in).
func connect(t *testing.T, root string, opts client.Options) client.Result {
	t.Helper()
	opts.RootPath = root
	if opts.Surface == "" {
		opts.Surface = protocol.SurfaceTUI
	}
	res, err := client.Connect(testContext(t), opts)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if res.Conn != nil {
		t.Cleanup(func() { _ = res.Conn.Close() })
	}
	return res
}

func (f *fixture) connect(opts client.Options) *client.Conn {
	f.t.Helper()
	res := connect(f.t, f.root, opts)
	if res.Kind != client.Connected {
		f.t.Fatalf("connect: %s %s %v", res.Kind, res.Reason, res.Err)
	}
	return res.Conn
}

func requireUnavailable(t *testing.T, res client.Result, reason client.UnavailableReason) {
	t.Helper()
	if res.Kind != client.Unavailable || res.Reason != reason {
		t.Fatalf("result %s/%s (%v), want unavailable/%s", res.Kind, res.Reason, res.Err, reason)
	}
	if res.Conn != nil || res.Handshake != nil {
		t.Fatalf("unavailable result carries a connection or handshake: %+v", res)
	}
}

func requireUsable(t *testing.T, c *client.Conn) {
	t.Helper()
	st, err := c.Status(testContext(t))
	if err != nil {
		t.Fatalf("connection no longer usable: %v", err)
	}
	if st.HostEpoch != c.HostEpoch() {
		t.Fatalf("status epoch %s, want %s", st.HostEpoch, c.HostEpoch())
	}
	if err := c.Err(); err != nil {
		t.Fatalf("connection failed: %v", err)
	}
}

// ---- Connect result kinds ----

func TestConnectReachesTheRegisteredHost(t *testing.T) {
	f := startHost(t, nil)
	res := connect(t, f.root, client.Options{ClientInstanceID: strings.Repeat("c", 128)})
	if res.Kind != client.Connected || res.Conn == nil || res.Registration == nil {
		t.Fatalf("result %+v", res)
	}
	c := res.Conn
	if c.HostEpoch() != f.kernel.HostEpoch() || res.Registration.HostEpoch != f.kernel.HostEpoch() {
		t.Fatalf("epoch %s / registration %s, want %s", c.HostEpoch(), res.Registration.HostEpoch, f.kernel.HostEpoch())
	}
	if res.Registration.Endpoint != f.kernel.Endpoint() {
		t.Fatalf("registration endpoint %s", res.Registration.Endpoint)
	}
	if _, err := uuid.Parse(c.ConnectionID()); err != nil {
		t.Fatalf("connection id %q", c.ConnectionID())
	}
	if c.SelectedProtocol() != protocol.HostProtocol.Max {
		t.Fatalf("selected protocol %d", c.SelectedProtocol())
	}
	st, err := c.Status(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.HostEpoch != c.HostEpoch() || st.State != protocol.StateReady || st.Connections != 1 {
		t.Fatalf("status %+v", st)
	}
	pid, err := c.PeerPID()
	if err != nil || pid != os.Getpid() {
		t.Fatalf("peer pid %d %v, want %d", pid, err, os.Getpid())
	}
}

func TestConnectWithoutAHostIsNotRegistered(t *testing.T) {
	root, _ := newRoot(t)
	res := connect(t, root, client.Options{})
	requireUnavailable(t, res, client.NotRegistered)
	if res.Registration != nil {
		t.Fatal("registration attached")
	}
}

func TestConnectWithAGarbageRegistrationIsInvalidRegistration(t *testing.T) {
	root, capability := newRoot(t)
	dir := controlDir(t, capability)
	if err := os.WriteFile(filepath.Join(dir, control.RegistrationFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	res := connect(t, root, client.Options{})
	requireUnavailable(t, res, client.InvalidRegistration)
	if res.Registration != nil || res.Err == nil {
		t.Fatalf("registration %v err %v", res.Registration, res.Err)
	}
}

func TestConnectWithAnotherRootsRegistrationIsRootMismatch(t *testing.T) {
	f := startHost(t, nil)
	capability, err := storageroot.Discover(f.root)
	if err != nil {
		t.Fatal(err)
	}
	dir := f.kernel.ControlDirectory()
	reg := readRegistration(t, dir)
	other := strings.Repeat("a", 64)
	if other == capability.RootID() {
		other = strings.Repeat("b", 64)
	}
	reg.RootID = other
	if err := control.WriteRegistration(dir, reg); err != nil {
		t.Fatal(err)
	}
	res := connect(t, f.root, client.Options{})
	requireUnavailable(t, res, client.RootMismatch)
	if res.Registration == nil || res.Registration.RootID != other {
		t.Fatalf("registration %+v", res.Registration)
	}
}

func TestConnectWithAStaleRegistrationIsConnectFailed(t *testing.T) {
	root, capability := newRoot(t)
	owner, err := storageroot.TryAcquireOwner(capability)
	if err != nil || owner == nil {
		t.Fatalf("owner: %v", err)
	}
	k, err := host.Start(context.Background(), host.Options{Owner: owner, DisableIdleExit: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := k.ControlDirectory()
	reg := readRegistration(t, dir)
	if err := k.Close(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(reg.Endpoint); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("endpoint still present after shutdown: %v", err)
	}
	// The registration of the stopped host is left behind.
	if err := control.WriteRegistration(dir, reg); err != nil {
		t.Fatal(err)
	}
	res := connect(t, root, client.Options{})
	requireUnavailable(t, res, client.ConnectFailed)
	if res.Registration == nil || res.Registration.HostEpoch != reg.HostEpoch || res.Err == nil {
		t.Fatalf("registration %+v err %v", res.Registration, res.Err)
	}
}

func TestConnectToAHostOfAnotherEpochIsEpochMismatch(t *testing.T) {
	f := startHost(t, nil)
	dir := f.kernel.ControlDirectory()
	reg := readRegistration(t, dir)
	reg.HostEpoch = uuid.NewString()
	if err := control.WriteRegistration(dir, reg); err != nil {
		t.Fatal(err)
	}
	res := connect(t, f.root, client.Options{})
	requireUnavailable(t, res, client.EpochMismatch)
	if res.Registration == nil || res.Registration.HostEpoch != reg.HostEpoch {
		t.Fatalf("registration %+v", res.Registration)
	}
	// Mismatching incompatible replies are rejected the same way.
	res = connect(t, f.root, client.Options{Protocol: protocol.ProtocolRange{Min: 1, Max: 1}})
	requireUnavailable(t, res, client.EpochMismatch)
}

func TestConnectWithoutACommonProtocolIsIncompatible(t *testing.T) {
	f := startHost(t, nil)
	res := connect(t, f.root, client.Options{Protocol: protocol.ProtocolRange{Min: 1, Max: 1}})
	if res.Kind != client.Incompatible || res.Conn != nil || res.Registration == nil {
		t.Fatalf("result %+v", res)
	}
	hs := res.Handshake
	if hs == nil {
		t.Fatal("no handshake attached")
	}
	if hs.HostEpoch != f.kernel.HostEpoch() || hs.ProtocolMin != protocol.HostProtocol.Min || hs.ProtocolMax != protocol.HostProtocol.Max ||
		hs.State != protocol.StateReady || hs.Replacement != protocol.ReplacementWaitForIdleExit {
		t.Fatalf("handshake %+v", hs)
	}
	// With another client connected the host cannot idle out.
	f.connect(client.Options{})
	res = connect(t, f.root, client.Options{Protocol: protocol.ProtocolRange{Min: 1, Max: 3}})
	if res.Kind != client.Incompatible || res.Handshake == nil || res.Handshake.Replacement != protocol.ReplacementBlockedByResidency {
		t.Fatalf("result %+v handshake %+v", res, res.Handshake)
	}
}

func TestConnectToADrainingHostIsDraining(t *testing.T) {
	entered, release := newSignal(), newSignal()
	defer release.fire()
	f := startHost(t, host.Handlers{
		protocol.OpTurnStart: func(_ context.Context, call *host.Call) host.Outcome {
			in := call.Input.(protocol.TurnStartInput)
			entered.fire()
			<-release.done()
			return host.OK(runningSnapshot(in.SessionID, in.TurnID))
		},
	})
	c := f.connect(client.Options{})
	started := make(chan error, 1)
	go func() {
		_, err := c.StartTurn(testContext(t), protocol.TurnStartInput{
			SessionID: "s1", TurnID: "t1", Content: protocol.MessageContent{Text: "hello"},
		})
		started <- err
	}()
	within(t, entered.done(), "turn.start was not admitted")
	f.kernel.RequestDrain() // the command keeps the host up

	res := connect(t, f.root, client.Options{})
	if res.Kind != client.Draining || res.Conn != nil || res.Registration == nil ||
		res.Registration.HostEpoch != f.kernel.HostEpoch() {
		t.Fatalf("result %+v", res)
	}
	release.fire()
	if err := <-started; err != nil {
		t.Fatalf("the admitted command failed: %v", err)
	}
}

func TestInvalidOptionsFailBeforeTouchingTheFilesystem(t *testing.T) {
	cases := map[string]client.Options{
		"inverted protocol range":  {Protocol: protocol.ProtocolRange{Min: 2, Max: 1}},
		"long client instance id":  {ClientInstanceID: strings.Repeat("c", 129)},
		"negative timeout":         {ConnectTimeout: -time.Millisecond},
		"negative request timeout": {RequestTimeout: -time.Second},
		"timeout over 120 s":       {HandshakeTimeout: 121 * time.Second},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			opts.RootPath = root
			opts.Surface = protocol.SurfaceTUI
			for _, connectFn := range []func(context.Context, client.Options) (client.Result, error){client.Connect, client.ConnectExisting} {
				res, err := connectFn(context.Background(), opts)
				if err == nil {
					t.Fatalf("options accepted: %+v", res)
				}
				if res.Conn != nil {
					t.Fatal("connection returned with an error")
				}
			}
			if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("root was touched: %v", err)
			}
		})
	}
	var pe *protocol.ProtocolError
	_, err := client.Connect(context.Background(), client.Options{RootPath: filepath.Join(t.TempDir(), "r"), Protocol: protocol.ProtocolRange{Min: 2, Max: 1}})
	if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidFrame {
		t.Fatalf("protocol range error %v, want invalid_frame", err)
	}
}

// ---- calls ----

func TestConcurrentCallsAreCorrelated(t *testing.T) {
	const n = 8
	var entered, release [n]*signal
	for i := range n {
		entered[i], release[i] = newSignal(), newSignal()
	}
	defer func() {
		for _, r := range release {
			r.fire()
		}
	}()
	index := func(turnID string) int {
		var i int
		_, _ = fmt.Sscanf(turnID, "turn-%d", &i)
		return i
	}
	f := startHost(t, host.Handlers{
		protocol.OpTurnQuery: func(_ context.Context, call *host.Call) host.Outcome {
			in := call.Input.(protocol.TurnQueryInput)
			i := index(in.TurnID)
			entered[i].fire()
			<-release[i].done()
			return host.OK(runningSnapshot(in.SessionID, in.TurnID))
		},
	})
	c := f.connect(client.Options{})
	type result struct {
		snap protocol.TurnSnapshot
		err  error
	}
	results := make([]chan result, n)
	for i := range n {
		results[i] = make(chan result, 1)
		go func() {
			s, err := c.QueryTurn(testContext(t), protocol.TurnQueryInput{SessionID: "s", TurnID: fmt.Sprintf("turn-%d", i)})
			results[i] <- result{s, err}
		}()
	}
	for i := range n {
		within(t, entered[i].done(), "not every call reached its handler")
	}
	// Answer in reverse order of submission.
	for i := n - 1; i >= 0; i-- {
		release[i].fire()
		r := <-results[i]
		if r.err != nil {
			t.Fatal(r.err)
		}
		if want := fmt.Sprintf("turn-%d", i); r.snap.TurnID != want || r.snap.RunID != "run-"+want {
			t.Fatalf("call %d answered with %+v", i, r.snap)
		}
	}
}

func TestOperationErrorKeepsTheConnectionUsable(t *testing.T) {
	f := startHost(t, host.Handlers{
		protocol.OpTurnQuery: func(_ context.Context, call *host.Call) host.Outcome {
			in := call.Input.(protocol.TurnQueryInput)
			if in.TurnID == "missing" {
				return host.Fail(protocol.ErrNotFound, "Turn was not found")
			}
			return host.OK(runningSnapshot(in.SessionID, in.TurnID))
		},
	})
	c := f.connect(client.Options{})
	_, err := c.QueryTurn(testContext(t), protocol.TurnQueryInput{SessionID: "s", TurnID: "missing"})
	var oe *client.OperationError
	if !errors.As(err, &oe) || oe.Code != protocol.ErrNotFound || oe.Operation != protocol.OpTurnQuery || oe.Message != "Turn was not found" {
		t.Fatalf("error %v, want a turn.query not_found OperationError", err)
	}
	if !client.IsCode(err, protocol.ErrNotFound) || client.IsCode(err, protocol.ErrInternalFailure) {
		t.Fatal("IsCode does not match the operation error")
	}
	// An operation the composition does not serve is a declared error too.
	if _, err := c.QueryRuntimePolicy(testContext(t)); !client.IsCode(err, protocol.ErrOperationUnavailable) {
		t.Fatalf("unserved operation: %v", err)
	}
	requireUsable(t, c)
	snap, err := c.QueryTurn(testContext(t), protocol.TurnQueryInput{SessionID: "s", TurnID: "t"})
	if err != nil || snap.TurnID != "t" {
		t.Fatalf("query after an operation error: %+v %v", snap, err)
	}
}

func TestTimedOutCallFailsAloneAndItsLateResponseIsDropped(t *testing.T) {
	entered, release, queued := newSignal(), newSignal(), newSignal()
	defer release.fire()
	f := startHost(t, host.Handlers{
		protocol.OpTurnQuery: func(_ context.Context, call *host.Call) host.Outcome {
			in := call.Input.(protocol.TurnQueryInput)
			if in.TurnID == "slow" {
				entered.fire()
				<-release.done()
				out := host.OK(runningSnapshot(in.SessionID, in.TurnID))
				out.AfterQueued = func(error) { queued.fire() }
				return out
			}
			return host.OK(runningSnapshot(in.SessionID, in.TurnID))
		},
	})
	c := f.connect(client.Options{})
	// The call's deadline passes while its handler holds it.
	ctx := newDeadlineGate(t)
	go func() {
		<-entered.done()
		ctx.expire()
	}()
	_, err := c.QueryTurn(ctx, protocol.TurnQueryInput{SessionID: "s", TurnID: "slow"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timed-out call: %v", err)
	}
	within(t, entered.done(), "the slow call never reached its handler")
	requireUsable(t, c)

	// The late response is queued before the next status response, so the
	// client reads it first and must drop it.
	release.fire()
	within(t, queued.done(), "the late response was not queued")
	requireUsable(t, c)
	if _, err := c.QueryTurn(testContext(t), protocol.TurnQueryInput{SessionID: "s", TurnID: "fast"}); err != nil {
		t.Fatal(err)
	}

	// A ctx without a deadline is bounded by Options.RequestTimeout.
	entered2, release2 := newSignal(), newSignal()
	defer release2.fire()
	g := startHost(t, host.Handlers{
		protocol.OpTurnQuery: func(_ context.Context, call *host.Call) host.Outcome {
			entered2.fire()
			<-release2.done()
			in := call.Input.(protocol.TurnQueryInput)
			return host.OK(runningSnapshot(in.SessionID, in.TurnID))
		},
	})
	short := g.connect(client.Options{RequestTimeout: 50 * time.Millisecond})
	if _, err := short.QueryTurn(context.Background(), protocol.TurnQueryInput{SessionID: "s", TurnID: "t"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call without deadline: %v", err)
	}
	within(t, entered2.done(), "call never reached its handler")
	release2.fire()
	requireUsable(t, short)
}

func TestCloseFailsPendingCalls(t *testing.T) {
	entered, release := newSignal(), newSignal()
	defer release.fire()
	f := startHost(t, host.Handlers{
		protocol.OpTurnQuery: func(_ context.Context, call *host.Call) host.Outcome {
			entered.fire()
			<-release.done()
			in := call.Input.(protocol.TurnQueryInput)
			return host.OK(runningSnapshot(in.SessionID, in.TurnID))
		},
	})
	c := f.connect(client.Options{})
	pending := make(chan error, 1)
	go func() {
		_, err := c.QueryTurn(testContext(t), protocol.TurnQueryInput{SessionID: "s", TurnID: "t"})
		pending <- err
	}()
	within(t, entered.done(), "call never reached its handler")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-pending; !errors.Is(err, client.ErrConnectionClosed) {
		t.Fatalf("pending call: %v, want ErrConnectionClosed", err)
	}
	within(t, c.Done(), "Done not closed")
	if !errors.Is(c.Err(), client.ErrConnectionClosed) {
		t.Fatalf("Err() = %v", c.Err())
	}
	if _, err := c.Status(testContext(t)); !errors.Is(err, client.ErrConnectionClosed) {
		t.Fatalf("call after close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// ---- a scripted host ----

// fakeHost is a registered endpoint for a root whose replies the test
// scripts: it accepts every handshake with epoch and answers each request
// with respond(request).
type fakeHost struct {
	epoch string
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []*transport.Conn
	// handshake, if set, answers the hello instead of an accepted frame;
	// it reports whether to go on serving requests.
	handshake func(tc *transport.Conn) bool
	respond   func(req *protocol.Request) []byte
}

func startFakeHost(t *testing.T, respond func(req *protocol.Request) []byte) (root string, fh *fakeHost) {
	t.Helper()
	return startScriptedHost(t, nil, respond)
}

func startScriptedHost(t *testing.T, handshake func(tc *transport.Conn) bool, respond func(req *protocol.Request) []byte) (root string, fh *fakeHost) {
	t.Helper()
	root, capability := newRoot(t)
	dir := controlDir(t, capability)
	sockDir, err := os.MkdirTemp("", "mkc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	endpoint := filepath.Join(sockDir, "h.sock")
	ln, err := net.Listen("unix", endpoint)
	if err != nil {
		t.Fatal(err)
	}
	fh = &fakeHost{epoch: uuid.NewString(), ln: ln, handshake: handshake, respond: respond}
	err = control.WriteRegistration(dir, control.Registration{
		Kind: control.RegistrationKind, SchemaVersion: control.RegistrationSchemaVersion, RootID: capability.RootID(),
		HostEpoch: fh.epoch, Endpoint: endpoint, ProtocolMin: 0, ProtocolMax: 0,
		State: protocol.StateReady, PID: int64(os.Getpid()), CreatedAt: "2024-01-01T00:00:00.000Z",
	})
	if err != nil {
		t.Fatal(err)
	}
	fh.wg.Add(1)
	go fh.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		fh.mu.Lock()
		for _, c := range fh.conns {
			_ = c.Close()
		}
		fh.mu.Unlock()
		fh.wg.Wait()
	})
	return root, fh
}

func (fh *fakeHost) serve() {
	defer fh.wg.Done()
	for {
		nc, err := fh.ln.Accept()
		if err != nil {
			return
		}
		tc := transport.New(nc)
		fh.mu.Lock()
		fh.conns = append(fh.conns, tc)
		fh.mu.Unlock()
		fh.wg.Add(1)
		go func() {
			defer fh.wg.Done()
			defer tc.Close()
			if _, err := tc.ReadFrame(waitTimeout); err != nil {
				return
			}
			if fh.handshake != nil {
				if !fh.handshake(tc) {
					return
				}
			} else if err := tc.WriteValue(protocol.Accepted{
				Kind: protocol.KindAccepted, HostEpoch: fh.epoch, ConnectionID: uuid.NewString(), State: protocol.StateReady,
			}); err != nil {
				return
			}
			for {
				v, err := tc.ReadFrame(0)
				if err != nil {
					return
				}
				fr, err := protocol.DecodeClientFrame(v)
				if err != nil {
					return
				}
				req, ok := fr.(*protocol.Request)
				if !ok {
					return
				}
				if err := tc.Write(fh.respond(req)); err != nil {
					return
				}
			}
		}()
	}
}

func TestHandshakeFailures(t *testing.T) {
	cases := map[string]func(epoch string) func(tc *transport.Conn) bool{
		"response instead of a handshake": func(string) func(tc *transport.Conn) bool {
			return func(tc *transport.Conn) bool {
				_ = tc.Write(statusFrame(t, "r", protocol.OpHostStatus, "x"))
				return false
			}
		},
		"protocol outside the offered range": func(epoch string) func(tc *transport.Conn) bool {
			return func(tc *transport.Conn) bool {
				_ = tc.WriteValue(protocol.Accepted{
					Kind: protocol.KindAccepted, HostEpoch: epoch, ConnectionID: uuid.NewString(), SelectedProtocol: 1, State: protocol.StateReady,
				})
				return false
			}
		},
		"end of stream": func(string) func(tc *transport.Conn) bool {
			return func(*transport.Conn) bool { return false }
		},
	}
	for name, script := range cases {
		t.Run(name, func(t *testing.T) {
			epoch := make(chan string, 1)
			root, fh := startScriptedHost(t, func(tc *transport.Conn) bool {
				return script(<-epoch)(tc)
			}, nil)
			epoch <- fh.epoch
			res := connect(t, root, client.Options{})
			requireUnavailable(t, res, client.HandshakeFailed)
			if res.Registration == nil || res.Registration.HostEpoch != fh.epoch {
				t.Fatalf("registration %+v", res.Registration)
			}
		})
	}
}

func TestConnectContextEndsTheHandshake(t *testing.T) {
	// The host reads the hello and never answers it; it waits until the
	// client is gone. The context's deadline passes once the hello is read.
	ctx := newDeadlineGate(t)
	root, _ := startScriptedHost(t, func(tc *transport.Conn) bool {
		ctx.expire()
		_, _ = tc.ReadFrame(0)
		return false
	}, nil)
	res, err := client.Connect(ctx, client.Options{RootPath: root, Surface: protocol.SurfaceTUI, HandshakeTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	requireUnavailable(t, res, client.HandshakeFailed)
	if !errors.Is(res.Err, context.DeadlineExceeded) {
		t.Fatalf("handshake error %v, want the context's", res.Err)
	}
}

func statusFrame(t *testing.T, requestID string, op protocol.Operation, epoch string) []byte {
	t.Helper()
	b, err := protocol.AppendSuccess(nil, requestID, op,
		[]byte(`{"hostEpoch":"`+epoch+`","state":"ready","connections":1,"activeOperations":1,"activeResidencies":0}`))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStatusChecksTheHostEpoch(t *testing.T) {
	// A real host answers with its own epoch.
	f := startHost(t, nil)
	requireUsable(t, f.connect(client.Options{}))

	// A host that answers host.status with another epoch fails the
	// connection, and the call reports that failure.
	root, fh := startFakeHost(t, func(req *protocol.Request) []byte {
		return statusFrame(t, req.RequestID, req.Operation.Key, uuid.NewString())
	})
	res := connect(t, root, client.Options{})
	if res.Kind != client.Connected || res.Conn.HostEpoch() != fh.epoch {
		t.Fatalf("result %+v", res)
	}
	c := res.Conn
	for range 20 {
		_, err := c.Status(testContext(t))
		if err == nil {
			t.Fatal("a status of another epoch was accepted")
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrConnectionClosed) {
			t.Fatalf("status: %v, want the epoch failure", err)
		}
		within(t, c.Done(), "the connection survived a status of another epoch")
		if !errors.Is(c.Err(), err) {
			t.Fatalf("Err() = %v, call error %v", c.Err(), err)
		}
		// Reconnect and try again: the failure must be reported every time.
		c = connect(t, root, client.Options{}).Conn
	}
}

func TestResponseNamingAnotherOperationFailsTheConnection(t *testing.T) {
	root, _ := startFakeHost(t, func(req *protocol.Request) []byte {
		return statusFrame(t, req.RequestID, protocol.OpHostStatus, "x")
	})
	c := connect(t, root, client.Options{}).Conn
	_, err := c.QueryTurn(testContext(t), protocol.TurnQueryInput{SessionID: "s", TurnID: "t"})
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call: %v, want the connection failure", err)
	}
	within(t, c.Done(), "connection survived a mismatched response")
}

// ---- subscriptions ----

func textEvent(sessionID string, i int) continuity.Event {
	return continuity.Event{
		Type: continuity.TextDelta, TurnID: "turn-" + sessionID, MessageID: "message-" + sessionID, Text: fmt.Sprintf("chunk-%d", i),
	}
}

func (f *fixture) accept(sessionID string, ev continuity.Event) {
	f.t.Helper()
	if err := f.coord.AcceptRuntimeEvent(sessionID, "run-"+sessionID, ev); err != nil {
		f.t.Fatalf("event rejected: %v", err)
	}
}

func next(t *testing.T, sub *client.Subscription) any {
	t.Helper()
	fr, err := sub.Next(testContext(t))
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return fr
}

func TestSubscriptionDeliversFramesInOrder(t *testing.T) {
	f := startHost(t, nil)
	f.store.add("s1")
	c := f.connect(client.Options{})
	sub, err := c.OpenSubscription(testContext(t), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if sub.ID() == "" || sub.Open.SubscriptionID != sub.ID() || sub.Open.NextSequence != 1 || sub.Open.HostEpoch != c.HostEpoch() ||
		sub.Open.Snapshot.ProjectionRevision != 1 || sub.Open.Snapshot.Session.SessionID != "s1" {
		t.Fatalf("open %+v", sub.Open)
	}
	for i := 1; i <= 3; i++ {
		f.accept("s1", textEvent("s1", i))
	}
	f.store.setLastUsed("s1", 9)
	if err := f.coord.Refresh(testContext(t), "s1"); err != nil {
		t.Fatal(err)
	}
	tool := protocol.SessionToolEvent{Type: protocol.ToolStart, ID: "e1", TurnID: "turn-s1", TS: 1, ToolUseID: "u1", ToolName: "bash"}
	f.accept("s1", continuity.Event{Type: protocol.ToolStart, TurnID: "turn-s1", Tool: tool})

	for i := 1; i <= 3; i++ {
		d, ok := next(t, sub).(protocol.DeltaFrame)
		if !ok || d.Sequence != int64(i) || d.Delta.Text != fmt.Sprintf("chunk-%d", i) || d.SubscriptionID != sub.ID() {
			t.Fatalf("frame %d: %#v", i, d)
		}
	}
	p, ok := next(t, sub).(protocol.ProjectionFrame)
	if !ok || p.Sequence != 4 || p.Snapshot.ProjectionRevision != 2 || p.Snapshot.Session.LastUsedAt != 9 {
		t.Fatalf("projection %#v", p)
	}
	e, ok := next(t, sub).(protocol.EventFrame)
	if !ok || e.Sequence != 5 || e.Event != tool || e.RunID != "run-s1" {
		t.Fatalf("event %#v", e)
	}
	requireUsable(t, c)

	// An unknown session is a declared error; the connection stays usable.
	if _, err := c.OpenSubscription(testContext(t), "missing"); !client.IsCode(err, protocol.ErrNotFound) {
		t.Fatalf("open of an unknown session: %v", err)
	}
	requireUsable(t, c)
}

func TestSubscriptionEndsWithEOFAfterItsClosedFrame(t *testing.T) {
	f := startHost(t, nil)
	f.store.add("evicted")
	f.store.add("other")
	// Before the open response is queued, enough frames pile up for the
	// still inactive subscriber to be evicted.
	f.setAfterOpen(func(sessionID string, _ protocol.SubscriptionOpenResult) {
		if sessionID != "evicted" {
			return
		}
		for i := 1; i <= continuity.SubscriberMaxFrames; i++ {
			f.accept("evicted", textEvent("evicted", i))
		}
	})
	c := f.connect(client.Options{})
	other, err := c.OpenSubscription(testContext(t), "other")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.OpenSubscription(testContext(t), "evicted")
	if err != nil {
		t.Fatal(err)
	}
	closed, ok := next(t, sub).(protocol.ClosedFrame)
	if !ok || closed.Reason != protocol.CloseSlowConsumer || closed.Sequence != 1 || closed.SubscriptionID != sub.ID() {
		t.Fatalf("first frame %#v, want subscription.closed slow_consumer sequence 1", closed)
	}
	for range 2 {
		if _, err := sub.Next(testContext(t)); err != io.EOF {
			t.Fatalf("after subscription.closed: %v, want io.EOF", err)
		}
	}
	if err := sub.Close(testContext(t)); err != nil {
		t.Fatalf("close of an ended subscription: %v", err)
	}
	// The connection and its other subscription are unaffected.
	requireUsable(t, c)
	f.accept("other", textEvent("other", 1))
	if d, ok := next(t, other).(protocol.DeltaFrame); !ok || d.Sequence != 1 {
		t.Fatalf("sibling frame %#v", d)
	}
}

func TestSubscriptionCloseEndsIt(t *testing.T) {
	f := startHost(t, nil)
	f.store.add("s1")
	c := f.connect(client.Options{})
	sub, err := c.OpenSubscription(testContext(t), "s1")
	if err != nil {
		t.Fatal(err)
	}
	f.accept("s1", textEvent("s1", 1))
	if d, ok := next(t, sub).(protocol.DeltaFrame); !ok || d.Sequence != 1 {
		t.Fatalf("frame %#v", d)
	}
	if err := sub.Close(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(testContext(t)); err != io.EOF {
		t.Fatalf("after close: %v, want io.EOF", err)
	}
	if subs, sessions := f.coord.Stats(); subs != 0 || sessions != 0 {
		t.Fatalf("host still holds %d subscriptions, %d sessions", subs, sessions)
	}
	f.accept("s1", textEvent("s1", 2))
	requireUsable(t, c)
	if err := sub.Close(testContext(t)); err != nil {
		t.Fatalf("second close: %v", err)
	}

	// Closing the connection fails the subscriptions it carries.
	sub2, err := c.OpenSubscription(testContext(t), "s1")
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	var se *client.SubscriptionError
	if _, err := sub2.Next(testContext(t)); !errors.As(err, &se) || se.Reason != client.SubscriptionConnectionClosed {
		t.Fatalf("after connection close: %v, want connection_closed", err)
	}
}

func TestSubscriptionLocalOverflowFailsOnlyThatSubscription(t *testing.T) {
	f := startHost(t, nil)
	f.store.add("flood")
	f.store.add("calm")
	c := f.connect(client.Options{})
	flood, err := c.OpenSubscription(testContext(t), "flood")
	if err != nil {
		t.Fatal(err)
	}
	calm, err := c.OpenSubscription(testContext(t), "calm")
	if err != nil {
		t.Fatal(err)
	}
	// One more frame than the local buffer holds, none of them read. A
	// status round trip after each event keeps the host's own queue short,
	// so the host never evicts the subscriber itself.
	for i := 1; i <= 33; i++ {
		f.accept("flood", textEvent("flood", i))
		requireUsable(t, c)
	}
	// The client fails the subscription and closes it on the host.
	select {
	case id := <-f.closes:
		if id != flood.ID() {
			t.Fatalf("host closed %s, want %s", id, flood.ID())
		}
	case <-time.After(waitTimeout):
		t.Fatal("the overflowing subscription was not closed on the host")
	}
	var se *client.SubscriptionError
	if _, err := flood.Next(testContext(t)); !errors.As(err, &se) || se.Reason != client.SubscriptionSlowConsumer {
		t.Fatalf("overflowed subscription: %v, want slow_consumer", err)
	}
	requireUsable(t, c)
	f.accept("calm", textEvent("calm", 1))
	if d, ok := next(t, calm).(protocol.DeltaFrame); !ok || d.Sequence != 1 {
		t.Fatalf("sibling frame %#v", d)
	}
	if err := f.coord.AcceptRuntimeEvent("flood", "run-flood", textEvent("flood", 34)); err != nil {
		t.Fatal(err)
	}
	requireUsable(t, c)
}

func TestSubscriptionOpenedAfterItsCallerGaveUpIsClosedAgain(t *testing.T) {
	f := startHost(t, nil)
	f.store.add("late")
	registered := make(chan string, 1)
	release := newSignal()
	defer release.fire()
	f.setAfterOpen(func(sessionID string, res protocol.SubscriptionOpenResult) {
		if sessionID != "late" {
			return
		}
		registered <- res.SubscriptionID
		<-release.done()
		// Frames of the subscription follow its late response.
		for i := 1; i <= 3; i++ {
			f.accept("late", textEvent("late", i))
		}
	})
	c := f.connect(client.Options{})
	// The caller's deadline passes once the host has registered the open.
	ctx := newDeadlineGate(t)
	var id string
	seen := make(chan struct{})
	go func() {
		select {
		case id = <-registered:
			close(seen)
			ctx.expire()
		case <-ctx.Done():
		}
	}()
	if _, err := c.OpenSubscription(ctx, "late"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("open: %v, want the deadline", err)
	}
	within(t, seen, "open never reached the host")
	release.fire()
	select {
	case closed := <-f.closes:
		if closed != id {
			t.Fatalf("host closed %s, want %s", closed, id)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the abandoned subscription was not closed on the host")
	}
	requireUsable(t, c)
	if subs, _ := f.coord.Stats(); subs != 0 {
		t.Fatalf("host still holds %d subscriptions", subs)
	}
}
