package host_test

// End-to-end tests of the kernel lifecycle over its real Unix socket:
// handshake outcomes, admission before ready, idle exit, the drain and close
// order, owner loss and per-connection isolation of bad input
// (host-client-storage.md §D, protocol.md §1–§3 and §8).

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/control"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/internal/transport"
	"github.com/maka-agent/maka/protocol"
)

// Wire messages of kernel-produced errors (protocol.md §3.3, §3.4).
const (
	msgDraining    = "Runtime Host is draining"
	msgNotReady    = "Runtime Host is not ready"
	msgUnavailable = "Runtime Host operation is unavailable in this composition"
)

// ---- recording composition ----

// recorder keeps the order of lifecycle events.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func (r *recorder) index(e string) int {
	for i, x := range r.list() {
		if x == e {
			return i
		}
	}
	return -1
}

// requireBefore fails unless both events happened and first came before second.
func (r *recorder) requireBefore(t *testing.T, first, second string) {
	t.Helper()
	i, j := r.index(first), r.index(second)
	if i < 0 || j < 0 || i >= j {
		t.Fatalf("want %q before %q; events %v", first, second, r.list())
	}
}

// blocker holds a handler until released.
type blocker struct {
	entered, release *gate
}

// lifecycleComposition serves turn.start (command), turn.query (query) and
// turn.stop (control), optionally blocking them, and records BeginDrain and
// Close.
type lifecycleComposition struct {
	rec          *recorder
	handlers     host.Handlers
	blockers     map[protocol.Operation]*blocker
	beginDrains  atomic.Int32
	closes       atomic.Int32
	closeEntered *gate
}

func newLifecycleComposition(blocked ...protocol.Operation) *lifecycleComposition {
	c := &lifecycleComposition{
		rec:          &recorder{},
		blockers:     map[protocol.Operation]*blocker{},
		closeEntered: newGate(),
	}
	for _, op := range blocked {
		c.blockers[op] = &blocker{entered: newGate(), release: newGate()}
	}
	h := host.UnavailableHandlers()
	h[protocol.OpTurnStart] = func(_ context.Context, call *host.Call) host.Outcome {
		in := call.Input.(protocol.TurnStartInput)
		c.hold(protocol.OpTurnStart)
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	}
	h[protocol.OpTurnQuery] = func(_ context.Context, call *host.Call) host.Outcome {
		in := call.Input.(protocol.TurnQueryInput)
		c.hold(protocol.OpTurnQuery)
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	}
	h[protocol.OpTurnStop] = func(_ context.Context, call *host.Call) host.Outcome {
		in := call.Input.(protocol.TurnStopInput)
		c.hold(protocol.OpTurnStop)
		return host.OK(runningSnapshot(in.SessionID, in.TurnID))
	}
	c.handlers = h
	return c
}

func (c *lifecycleComposition) hold(op protocol.Operation) {
	c.rec.add("enter:" + string(op))
	if b := c.blockers[op]; b != nil {
		b.entered.open()
		<-b.release.wait()
	}
	c.rec.add("return:" + string(op))
}

// releaseAll opens every blocker (deferred by tests so cleanup never hangs).
func (c *lifecycleComposition) releaseAll() {
	for _, b := range c.blockers {
		b.release.open()
	}
}

func (c *lifecycleComposition) Handlers() host.Handlers             { return c.handlers }
func (c *lifecycleComposition) Continuity() host.ConnectionObserver { return nil }
func (c *lifecycleComposition) Recover(context.Context) error       { return nil }
func (c *lifecycleComposition) BeginDrain() {
	c.beginDrains.Add(1)
	c.rec.add("beginDrain")
}
func (c *lifecycleComposition) Close(context.Context) error {
	c.closes.Add(1)
	c.rec.add("close")
	c.closeEntered.open()
	return nil
}

// ---- kernel harness ----

type harnessConfig struct {
	opts host.Options // Owner is filled in
	// comp is the composition; nil starts a bare kernel.
	comp *lifecycleComposition
	// factoryGate, if set, holds the composition factory (state recovering).
	factoryGate *gate
	// onFactory runs inside the factory just before it returns.
	onFactory func(k *host.Kernel)
	// root, if set, is an existing storage root to use instead of a fresh one.
	root string
}

type startResult struct {
	k   *host.Kernel
	err error
}

// kernelHarness is one kernel on its own storage root.
type kernelHarness struct {
	t          *testing.T
	root       string
	capability *storageroot.Capability
	owner      *storageroot.Owner

	factoryEntered *gate
	captured       atomic.Pointer[host.Kernel]

	started  chan startResult
	once     sync.Once
	result   startResult
	endpoint atomic.Value // string
}

func launch(t *testing.T, cfg harnessConfig) *kernelHarness {
	t.Helper()
	root, capability := cfg.root, (*storageroot.Capability)(nil)
	if root == "" {
		root, capability = newRoot(t)
	} else {
		var err error
		if capability, err = storageroot.Resolve(root, storageroot.KindInteractive); err != nil {
			t.Fatal(err)
		}
	}
	h := &kernelHarness{
		t: t, root: root, capability: capability,
		factoryEntered: newGate(),
		started:        make(chan startResult, 1),
	}
	h.owner = acquireOwner(t, capability)
	opts := cfg.opts
	opts.Owner = h.owner
	if cfg.comp != nil {
		comp := cfg.comp
		opts.CompositionFactory = func(ctx context.Context, k *host.Kernel) (host.Composition, error) {
			h.captured.Store(k)
			h.endpoint.Store(k.Endpoint())
			h.factoryEntered.open()
			if cfg.factoryGate != nil {
				select {
				case <-cfg.factoryGate.wait():
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			if cfg.onFactory != nil {
				cfg.onFactory(k)
			}
			return comp, nil
		}
	}
	go func() {
		k, err := host.Start(context.Background(), opts)
		h.started <- startResult{k, err}
	}()
	t.Cleanup(func() {
		if cfg.factoryGate != nil {
			cfg.factoryGate.open()
		}
		if cfg.comp != nil {
			cfg.comp.releaseAll()
		}
		r := h.wait()
		if r.k != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = r.k.Close(ctx) // tests assert the close result themselves
		}
		// A host that ended with process_termination_required leaves the
		// lock and its endpoint to the process exit; release them here.
		_ = h.owner.Close()
		if ep, ok := h.endpoint.Load().(string); ok {
			_ = os.RemoveAll(filepath.Dir(ep))
		}
	})
	return h
}

// wait returns the result of host.Start (bounded).
func (h *kernelHarness) wait() startResult {
	h.once.Do(func() {
		select {
		case h.result = <-h.started:
			if h.result.k != nil {
				h.endpoint.Store(h.result.k.Endpoint())
			}
		case <-time.After(10 * time.Second):
			h.t.Fatal("host.Start did not return")
		}
	})
	return h.result
}

// ready waits until Start has returned a ready kernel.
func (h *kernelHarness) ready() *host.Kernel {
	h.t.Helper()
	r := h.wait()
	if r.err != nil {
		h.t.Fatalf("host.Start: %v", r.err)
	}
	if st := r.k.State(); st != protocol.StateReady {
		h.t.Fatalf("state after Start = %s, want ready", st)
	}
	return r.k
}

// recovering waits until the composition factory runs and returns the
// kernel, which is not ready yet.
func (h *kernelHarness) recovering() *host.Kernel {
	h.t.Helper()
	within(h.t, h.factoryEntered.wait(), 5*time.Second, "composition factory did not run")
	return h.captured.Load()
}

func (h *kernelHarness) connect(opts client.Options) client.Result {
	h.t.Helper()
	opts.RootPath = h.root
	if opts.Surface == "" {
		opts.Surface = protocol.SurfaceTUI
	}
	res, err := client.Connect(context.Background(), opts)
	if err != nil {
		h.t.Fatal(err)
	}
	if res.Conn != nil {
		h.t.Cleanup(func() { _ = res.Conn.Close() })
	}
	return res
}

func (h *kernelHarness) connectClient() *client.Conn {
	h.t.Helper()
	res := h.connect(client.Options{})
	if res.Kind != client.Connected {
		h.t.Fatalf("connect: %s %s %v", res.Kind, res.Reason, res.Err)
	}
	return res.Conn
}

// requireShutDown checks the end state of a clean shutdown: registration
// removed, endpoint directory gone, owner lock released.
func (h *kernelHarness) requireShutDown(k *host.Kernel) {
	h.t.Helper()
	within(h.t, k.Done(), 5*time.Second, "host did not shut down")
	if err := k.Err(); err != nil {
		h.t.Fatalf("shutdown error: %v", err)
	}
	if _, found, err := control.ReadRegistration(h.owner.ControlDirectory()); err != nil || found {
		h.t.Fatalf("registration after shutdown: found=%v err=%v", found, err)
	}
	if _, err := os.Stat(filepath.Dir(k.Endpoint())); !errors.Is(err, os.ErrNotExist) {
		h.t.Fatalf("endpoint directory after shutdown: %v", err)
	}
	if !h.owner.Closed() {
		h.t.Fatal("owner is still open after shutdown")
	}
	requireLockFree(h.t, h.capability)
}

func requireLockFree(t *testing.T, capability *storageroot.Capability) {
	t.Helper()
	successor, err := storageroot.TryAcquireOwner(capability)
	if err != nil || successor == nil {
		t.Fatalf("owner lock not released: %v", err)
	}
	if err := successor.Close(); err != nil {
		t.Fatal(err)
	}
}

func registrationState(t *testing.T, h *kernelHarness) protocol.HostState {
	t.Helper()
	reg, found, err := control.ReadRegistration(h.owner.ControlDirectory())
	if err != nil || !found {
		t.Fatalf("registration: found=%v err=%v", found, err)
	}
	return reg.State
}

// ---- small wire helpers ----

// eventually polls cond (bounded); the kernel's counters settle
// asynchronously after a connection or an operation ends.
func eventually(t *testing.T, d time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(2 * time.Millisecond) // polling a condition, not synchronisation
	}
}

// notWithin fails if ch closes within d.
func notWithin(t *testing.T, ch <-chan struct{}, d time.Duration, msg string) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
		t.Fatal(msg)
	case <-timer.C:
	}
}

func dialHost(t *testing.T, endpoint string) *transport.Conn {
	t.Helper()
	nc, err := net.Dial("unix", endpoint)
	if err != nil {
		t.Fatal(err)
	}
	tc := transport.New(nc)
	t.Cleanup(func() { _ = tc.Close() })
	return tc
}

func hello(id string, min, max int64) protocol.Hello {
	return protocol.Hello{Kind: protocol.KindHello, ClientInstanceID: id, Surface: protocol.SurfaceTUI, ProtocolMin: min, ProtocolMax: max}
}

// handshakeRaw dials, sends a hello with the given range and returns the
// decoded reply.
func handshakeRaw(t *testing.T, endpoint string, min, max int64) (*transport.Conn, any) {
	t.Helper()
	tc := dialHost(t, endpoint)
	if err := tc.WriteValue(hello("raw-client", min, max)); err != nil {
		t.Fatal(err)
	}
	return tc, readHostFrame(t, tc)
}

func acceptedRaw(t *testing.T, endpoint string) (*transport.Conn, *protocol.Accepted) {
	t.Helper()
	tc, f := handshakeRaw(t, endpoint, 0, 0)
	a, ok := f.(*protocol.Accepted)
	if !ok {
		t.Fatalf("handshake reply %#v, want accepted", f)
	}
	return tc, a
}

// incompatibleReply performs a handshake no host version satisfies and
// checks the host then closes the socket.
func incompatibleReply(t *testing.T, endpoint string) *protocol.Incompatible {
	t.Helper()
	tc, f := handshakeRaw(t, endpoint, 1, 1)
	inc, ok := f.(*protocol.Incompatible)
	if !ok {
		t.Fatalf("handshake reply %#v, want incompatible", f)
	}
	if inc.ProtocolMin != 0 || inc.ProtocolMax != 0 {
		t.Fatalf("incompatible names host range %d..%d, want 0..0", inc.ProtocolMin, inc.ProtocolMax)
	}
	expectClosedWithoutReply(t, tc, 2*time.Second, "socket after incompatible")
	return inc
}

// expectClosedWithoutReply fails unless the host closes tc without sending
// another frame within d.
func expectClosedWithoutReply(t *testing.T, tc *transport.Conn, d time.Duration, what string) {
	t.Helper()
	v, err := tc.ReadFrame(d)
	if err == nil {
		b, _ := protocol.Marshal(v)
		t.Fatalf("%s: host sent %s instead of closing", what, b)
	}
	if transport.IsCode(err, transport.CodeReadTimeout) {
		t.Fatalf("%s: connection still open after %v", what, d)
	}
}

func requireResponse(t *testing.T, f any, requestID string) *protocol.Response {
	t.Helper()
	r, ok := f.(*protocol.Response)
	if !ok || r.RequestID != requestID {
		t.Fatalf("got %#v, want the response to %s", f, requestID)
	}
	return r
}

func requireFailure(t *testing.T, r *protocol.Response, code protocol.ErrorCode, message string) {
	t.Helper()
	if r.OK || r.Error == nil || r.Error.Code != code || r.Error.Message != message {
		t.Fatalf("%s %s: got %#v / %+v, want %s %q", r.Operation, r.RequestID, r, r.Error, code, message)
	}
}

func requireOpError(t *testing.T, err error, code protocol.ErrorCode, message string) {
	t.Helper()
	var oe *client.OperationError
	if !errors.As(err, &oe) || oe.Code != code || oe.Message != message {
		t.Fatalf("got %v, want %s %q", err, code, message)
	}
}

func rawStatus(t *testing.T, tc *transport.Conn, requestID string) protocol.HostStatus {
	t.Helper()
	writeRequest(t, tc, requestID, protocol.OpHostStatus, protocol.HostStatusInput{})
	r := requireResponse(t, readHostFrame(t, tc), requestID)
	if !r.OK {
		t.Fatalf("host.status failed: %+v", r.Error)
	}
	return r.Result.(protocol.HostStatus)
}

// domainInputs holds one valid input for every domain operation (all but
// host.status), v0 and extensions.
var domainInputs = map[protocol.Operation]string{
	protocol.OpTurnStart:              `{"sessionId":"s1","turnId":"t1","content":{"text":"hello"}}`,
	protocol.OpTurnQuery:              `{"sessionId":"s1","turnId":"t1"}`,
	protocol.OpTurnStop:               `{"sessionId":"s1","turnId":"t1","runId":"r1"}`,
	protocol.OpTurnMessageSubmit:      `{"originHostEpoch":"epoch-1","sessionId":"s1","messageId":"m1","content":{"text":"hi"},"placement":"current_turn"}`,
	protocol.OpQueueRetract:           `{"originHostEpoch":"epoch-1","sessionId":"s1","retractId":"x1"}`,
	protocol.OpTurnInterrupt:          `{"originHostEpoch":"epoch-1","sessionId":"s1","interruptId":"i1","turnId":"t1","runId":"r1"}`,
	protocol.OpInteractionQuery:       `{"sessionId":"s1","interactionId":"i1"}`,
	protocol.OpInteractionAnswer:      `{"interactionId":"i1","answer":{"kind":"permission","decision":"allow","rememberForTurn":false}}`,
	protocol.OpTaskLedgerQuery:        `{"kind":"list_start","sessionId":"s1"}`,
	protocol.OpSubscriptionOpen:       `{"sessionId":"s1"}`,
	protocol.OpSubscriptionClose:      `{"subscriptionId":"sub-1"}`,
	protocol.OpRuntimePolicyQuery:     `{}`,
	protocol.OpRuntimePolicyMutate:    `{"expectedRevision":3,"operation":{"kind":"set_privacy","value":{"incognitoActive":true}}}`,
	protocol.OpConnectionCatalogQuery: `{"kind":"start"}`,
	protocol.OpConnectionCatalogCreate: `{"expectedCatalogRevision":5,"connection":{"slug":"my-openai","name":"","providerType":"openai",` +
		`"enabled":true,"enabledModelIds":["gpt-4o"]}}`,
	protocol.OpConnectionCatalogUpdate: `{"expected":{"connectionId":"0f8fad5b-d9cb-469f-a165-70867728950e","revision":3},` +
		`"changes":{"name":"Renamed","enabled":false,"enabledModelIds":[]}}`,
	protocol.OpConnectionCatalogRemove:           `{"expected":{"connectionId":"0f8fad5b-d9cb-469f-a165-70867728950e","revision":3}}`,
	protocol.OpConnectionCatalogSetDefaultTarget: `{"expectedCatalogRevision":0,"target":null}`,
	protocol.OpCredentialVaultQuery:              `{"locator":{"scope":"network_proxy","kind":"password"}}`,
	protocol.OpCredentialVaultSet:                `{"locator":{"scope":"network_proxy","kind":"password"},"expected":null,"secret":"p"}`,
	protocol.OpCredentialVaultDelete: `{"expected":{"locator":{"scope":"connection","connectionId":"0f8fad5b-d9cb-469f-a165-70867728950e",` +
		`"kind":"api_key"},"credentialId":"7c9e6679-7425-40de-944b-e07fc1f90ae7","revision":2}}`,
	protocol.OpSessionCreate:         `{"sessionId":"s1","workspace":{"kind":"host_path","path":"/w"}}`,
	protocol.OpSessionCatalogQuery:   `{"kind":"list_start","includeArchived":false}`,
	protocol.OpSessionLifecycleSet:   `{"sessionId":"s1","action":"archive"}`,
	protocol.OpSessionTranscriptPage: `{"sessionId":"s1"}`,

	protocol.OpSessionPermissionsQuery:    `{"sessionId":"s1"}`,
	protocol.OpSessionPermissionsSet:      `{"sessionId":"s1","permissionMode":"ask"}`,
	protocol.OpRootPermissionsQuery:       `{}`,
	protocol.OpRootPermissionsSet:         `{"sandbox":"read-only"}`,
	protocol.OpMCPServersQuery:            `{}`,
	protocol.OpMCPServersSet:              `{"name":"echo","transport":"stdio","command":"/bin/echo"}`,
	protocol.OpMCPServersRemove:           `{"name":"echo"}`,
	protocol.OpSessionCompact:             `{"sessionId":"s1"}`,
	protocol.OpSubscriptionNoticesSet:     `{"subscriptionId":"sub-1","enabled":true}`,
	protocol.OpConnectionContextWindowSet: `{"expected":{"connectionId":"0f8fad5b-d9cb-469f-a165-70867728950e","revision":3},"contextWindow":8000}`,
}

// domainRequests returns a valid request per domain operation, checked
// against the operation's own input codec.
func domainRequests(t *testing.T) map[protocol.Operation]protocol.Value {
	t.Helper()
	out := map[protocol.Operation]protocol.Value{}
	for _, spec := range protocol.Operations() {
		if spec.Key == protocol.OpHostStatus {
			continue
		}
		text, ok := domainInputs[spec.Key]
		if !ok {
			t.Fatalf("no test input for operation %s", spec.Key)
		}
		v, err := protocol.Parse([]byte(text))
		if err != nil {
			t.Fatalf("%s: %v", spec.Key, err)
		}
		if _, err := spec.DecodeInput(v); err != nil {
			t.Fatalf("test input of %s is invalid: %v", spec.Key, err)
		}
		out[spec.Key] = v
	}
	if want := len(protocol.Operations()) - 1; len(out) != want || want < protocol.V0Operations-1 {
		t.Fatalf("%d domain operations, want %d", len(out), want)
	}
	return out
}

// requireEveryDomainOperationFails pipelines one request per domain
// operation on tc and checks every answer is the given error.
func requireEveryDomainOperationFails(t *testing.T, tc *transport.Conn, code protocol.ErrorCode, message string) {
	t.Helper()
	reqs := domainRequests(t)
	var batch []byte
	ids := map[string]protocol.Operation{}
	for op, in := range reqs {
		id := "req-" + string(op)
		ids[id] = op
		b, err := protocol.AppendRequest(nil, id, op, in)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, b...)
	}
	if err := tc.Write(batch); err != nil {
		t.Fatal(err)
	}
	for range reqs {
		r, ok := readHostFrame(t, tc).(*protocol.Response)
		if !ok {
			t.Fatal("expected a response frame")
		}
		op, known := ids[r.RequestID]
		if !known {
			t.Fatalf("response to unknown request %q", r.RequestID)
		}
		delete(ids, r.RequestID)
		if r.Operation != op {
			t.Fatalf("response to %s names %s", r.RequestID, r.Operation)
		}
		requireFailure(t, r, code, message)
	}
}

// ---- 1. handshake outcomes ----

func TestKernelHandshakeAcceptedEchoesStateAndCountsConnections(t *testing.T) {
	h := launch(t, harnessConfig{opts: host.Options{IdleGrace: 10 * time.Second}, comp: newLifecycleComposition()})
	k := h.ready()

	tc1, a1 := acceptedRaw(t, k.Endpoint())
	if a1.HostEpoch != k.HostEpoch() || a1.SelectedProtocol != 0 || a1.State != protocol.StateReady || a1.ConnectionID == "" {
		t.Fatalf("accepted %+v (host epoch %s)", a1, k.HostEpoch())
	}
	tc2, f := handshakeRaw(t, k.Endpoint(), 0, 7)
	a2, ok := f.(*protocol.Accepted)
	if !ok || a2.SelectedProtocol != 0 || a2.State != protocol.StateReady {
		t.Fatalf("overlapping range: %#v", f)
	}
	if a2.ConnectionID == a1.ConnectionID {
		t.Fatalf("two connections share connectionId %s", a1.ConnectionID)
	}
	st := rawStatus(t, tc1, "status-1")
	want := protocol.HostStatus{HostEpoch: k.HostEpoch(), State: protocol.StateReady, Connections: 2, ActiveOperations: 1}
	if st != want {
		t.Fatalf("status %+v, want %+v", st, want)
	}
	c := h.connectClient()
	if st, err := c.Status(context.Background()); err != nil || st.Connections != 3 {
		t.Fatalf("status with a third client: %+v %v", st, err)
	}
	_ = tc2.Close()
	waitForStatus(t, c, func(s protocol.HostStatus) bool { return s.Connections == 2 })
	if st := rawStatus(t, tc1, "status-2"); st.Connections != 2 || st.State != protocol.StateReady {
		t.Fatalf("status after one disconnect %+v", st)
	}
}

func TestKernelIncompatibleReplacementReflectsTrueIdleness(t *testing.T) {
	comp := newLifecycleComposition(protocol.OpTurnQuery)
	defer comp.releaseAll()
	h := launch(t, harnessConfig{opts: host.Options{IdleGrace: 10 * time.Second}, comp: comp})
	k := h.ready()
	ep := k.Endpoint()
	connections := func(n int64) func() bool { return func() bool { return k.Status().Connections == n } }

	t.Run("truly idle", func(t *testing.T) {
		// A socket that has not sent its hello is not a connection.
		silent := dialHost(t, ep)
		inc := incompatibleReply(t, ep)
		if inc.Replacement != protocol.ReplacementWaitForIdleExit || inc.State != protocol.StateReady || inc.HostEpoch != k.HostEpoch() {
			t.Fatalf("incompatible %+v, want wait_for_idle_exit in ready", inc)
		}
		_ = silent.Close()
	})

	t.Run("another client connected", func(t *testing.T) {
		c := h.connectClient()
		if inc := incompatibleReply(t, ep); inc.Replacement != protocol.ReplacementBlockedByResidency {
			t.Fatalf("replacement %s with a client connected", inc.Replacement)
		}
		_ = c.Close()
		eventually(t, 2*time.Second, connections(0), "client connection was not released")
		if inc := incompatibleReply(t, ep); inc.Replacement != protocol.ReplacementWaitForIdleExit {
			t.Fatalf("replacement %s after the client left", inc.Replacement)
		}
	})

	t.Run("composition residency", func(t *testing.T) {
		r := k.AcquireResidency()
		if inc := incompatibleReply(t, ep); inc.Replacement != protocol.ReplacementBlockedByResidency {
			t.Fatalf("replacement %s with a residency held", inc.Replacement)
		}
		r.Release()
		r.Release() // idempotent
		if st := k.Status(); st.ActiveResidencies != 0 {
			t.Fatalf("residencies after release: %d", st.ActiveResidencies)
		}
		if inc := incompatibleReply(t, ep); inc.Replacement != protocol.ReplacementWaitForIdleExit {
			t.Fatalf("replacement %s after the residency was released", inc.Replacement)
		}
	})

	t.Run("operation outliving its connection", func(t *testing.T) {
		tc, _ := acceptedRaw(t, ep)
		writeRequest(t, tc, "held-query", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "s1", TurnID: "t1"})
		within(t, comp.blockers[protocol.OpTurnQuery].entered.wait(), 2*time.Second, "turn.query was not admitted")
		// A protocol violation tears the connection down at once; the
		// handler keeps running.
		if err := tc.Write([]byte("{not json}\n")); err != nil {
			t.Fatal(err)
		}
		expectClosedWithoutReply(t, tc, 2*time.Second, "connection after invalid JSON")
		eventually(t, 2*time.Second, connections(0), "torn-down connection was not released")
		if st := k.Status(); st.ActiveOperations != 1 {
			t.Fatalf("active operations = %d, want 1", st.ActiveOperations)
		}
		if inc := incompatibleReply(t, ep); inc.Replacement != protocol.ReplacementBlockedByResidency {
			t.Fatalf("replacement %s with an operation in flight", inc.Replacement)
		}
		comp.blockers[protocol.OpTurnQuery].release.open()
		eventually(t, 2*time.Second, func() bool { return k.Status().ActiveOperations == 0 }, "operation did not finish")
		if inc := incompatibleReply(t, ep); inc.Replacement != protocol.ReplacementWaitForIdleExit {
			t.Fatalf("replacement %s after the operation finished", inc.Replacement)
		}
	})

	if st := k.State(); st != protocol.StateReady {
		t.Fatalf("state %s after incompatible handshakes", st)
	}
}

// A host that never exits when idle must not tell clients to wait for it.
func TestKernelIncompatibleWithIdleExitDisabledIsBlocked(t *testing.T) {
	h := launch(t, harnessConfig{opts: host.Options{DisableIdleExit: true}, comp: newLifecycleComposition()})
	k := h.ready()
	if inc := incompatibleReply(t, k.Endpoint()); inc.Replacement != protocol.ReplacementBlockedByResidency {
		t.Fatalf("replacement %s from a host that never idles out", inc.Replacement)
	}
}

func TestKernelHandshakeAnswersDrainingOnceDrainIsRequested(t *testing.T) {
	comp := newLifecycleComposition(protocol.OpTurnStart)
	defer comp.releaseAll()
	h := launch(t, harnessConfig{opts: host.Options{IdleGrace: 10 * time.Second}, comp: comp})
	k := h.ready()
	c := h.connectClient()
	// An unsealed command keeps the shutdown from committing, so the
	// listener is still open while the host drains.
	started := make(chan error, 1)
	go func() {
		_, err := c.StartTurn(context.Background(), protocol.TurnStartInput{SessionID: "s1", TurnID: "t1", Content: protocol.MessageContent{Text: "hi"}})
		started <- err
	}()
	within(t, comp.blockers[protocol.OpTurnStart].entered.wait(), 2*time.Second, "turn.start was not admitted")
	// Dialled and accepted before the drain, hello sent after it.
	early := dialHost(t, k.Endpoint())
	k.RequestDrain()

	for _, rng := range [][2]int64{{0, 0}, {1, 1}} {
		tc, f := handshakeRaw(t, k.Endpoint(), rng[0], rng[1])
		d, ok := f.(*protocol.Draining)
		if !ok || d.HostEpoch != k.HostEpoch() {
			t.Fatalf("hello %v while draining: %#v", rng, f)
		}
		expectClosedWithoutReply(t, tc, 2*time.Second, "socket after draining")
	}
	if err := early.WriteValue(hello("early", 0, 0)); err != nil {
		t.Fatal(err)
	}
	if d, ok := readHostFrame(t, early).(*protocol.Draining); !ok || d.HostEpoch != k.HostEpoch() {
		t.Fatal("socket accepted before the drain was not answered draining")
	}
	expectClosedWithoutReply(t, early, 2*time.Second, "early socket after draining")
	if res := h.connect(client.Options{}); res.Kind != client.Draining {
		t.Fatalf("client connect while draining: %s %s %v", res.Kind, res.Reason, res.Err)
	}

	comp.blockers[protocol.OpTurnStart].release.open()
	if err := <-started; err != nil {
		t.Fatalf("command admitted before the drain failed: %v", err)
	}
	h.requireShutDown(k)
}

func TestKernelHandshakeTimeoutAndNonHelloFirstFrameCloseSilently(t *testing.T) {
	const handshakeTimeout = 100 * time.Millisecond
	h := launch(t, harnessConfig{opts: host.Options{IdleGrace: 10 * time.Second, HandshakeTimeout: handshakeTimeout}, comp: newLifecycleComposition()})
	k := h.ready()
	ep := k.Endpoint()

	t.Run("silent client", func(t *testing.T) {
		start := time.Now()
		tc := dialHost(t, ep)
		expectClosedWithoutReply(t, tc, 3*time.Second, "silent handshake")
		if elapsed := time.Since(start); elapsed < handshakeTimeout {
			t.Fatalf("closed after %v, before the %v handshake timeout", elapsed, handshakeTimeout)
		}
	})
	t.Run("partial hello", func(t *testing.T) {
		start := time.Now()
		tc := dialHost(t, ep)
		if err := tc.Write([]byte(`{"kind":"hello","clientInstanceId":"slow"`)); err != nil {
			t.Fatal(err)
		}
		expectClosedWithoutReply(t, tc, 3*time.Second, "partial hello")
		if elapsed := time.Since(start); elapsed < handshakeTimeout {
			t.Fatalf("closed after %v, before the %v handshake timeout", elapsed, handshakeTimeout)
		}
	})

	requestFirst, err := protocol.AppendRequest(nil, "r1", protocol.OpHostStatus, protocol.HostStatusInput{})
	if err != nil {
		t.Fatal(err)
	}
	firstFrames := map[string][]byte{
		"request before hello":     requestFirst,
		"hello with bad surface":   []byte(`{"kind":"hello","clientInstanceId":"c","surface":"web","protocolMin":0,"protocolMax":0}` + "\n"),
		"hello with max below min": []byte(`{"kind":"hello","clientInstanceId":"c","surface":"tui","protocolMin":1,"protocolMax":0}` + "\n"),
		"hello with empty id":      []byte(`{"kind":"hello","clientInstanceId":"","surface":"tui","protocolMin":0,"protocolMax":0}` + "\n"),
		"invalid JSON":             []byte("{\"kind\":\"hello\",}\n"),
		"blank line":               []byte("\n"),
		"oversized frame":          bytes.Repeat([]byte("a"), protocol.MaxFrameBytes+1),
	}
	for name, frame := range firstFrames {
		t.Run(name, func(t *testing.T) {
			tc := dialHost(t, ep)
			_ = tc.Write(frame) // the host may close before reading everything
			expectClosedWithoutReply(t, tc, 3*time.Second, name)
		})
	}

	c := h.connectClient()
	st, err := c.Status(context.Background())
	if err != nil || st.State != protocol.StateReady || st.Connections != 1 {
		t.Fatalf("host after rejected handshakes: %+v %v", st, err)
	}
}

// ---- 2. admission before ready ----

func TestKernelAdmissionWhileRecovering(t *testing.T) {
	release := newGate()
	defer release.open()
	h := launch(t, harnessConfig{opts: host.Options{IdleGrace: 10 * time.Second}, comp: newLifecycleComposition(), factoryGate: release})
	k := h.recovering()
	if st := registrationState(t, h); st != protocol.StateRecovering {
		t.Fatalf("registration state %s, want recovering", st)
	}

	tc, a := acceptedRaw(t, k.Endpoint())
	if a.State != protocol.StateRecovering {
		t.Fatalf("accepted echoes state %s, want recovering", a.State)
	}
	st := rawStatus(t, tc, "status-recovering")
	want := protocol.HostStatus{HostEpoch: k.HostEpoch(), State: protocol.StateRecovering, Connections: 1, ActiveOperations: 1}
	if st != want {
		t.Fatalf("status %+v, want %+v", st, want)
	}
	requireEveryDomainOperationFails(t, tc, protocol.ErrHostNotReady, msgNotReady)

	inc := incompatibleReply(t, k.Endpoint())
	if inc.State != protocol.StateRecovering || inc.Replacement != protocol.ReplacementBlockedByResidency {
		t.Fatalf("incompatible while recovering: %+v", inc)
	}

	release.open()
	h.ready()
	if st := rawStatus(t, tc, "status-ready"); st.State != protocol.StateReady {
		t.Fatalf("state after recovery %s", st.State)
	}
	writeRequest(t, tc, "query-ready", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "s1", TurnID: "t1"})
	if r := requireResponse(t, readHostFrame(t, tc), "query-ready"); !r.OK {
		t.Fatalf("turn.query once ready: %+v", r.Error)
	}
}

func TestKernelBareAnswersEveryDomainOperationUnavailable(t *testing.T) {
	h := launch(t, harnessConfig{opts: host.Options{IdleGrace: 10 * time.Second}})
	k := h.ready()
	if st := registrationState(t, h); st != protocol.StateReady {
		t.Fatalf("registration state %s, want ready", st)
	}
	tc, _ := acceptedRaw(t, k.Endpoint())
	requireEveryDomainOperationFails(t, tc, protocol.ErrOperationUnavailable, msgUnavailable)
	// An operation finishes once its response is flushed, so the counter
	// settles shortly after the client has read the answers.
	i := 0
	eventually(t, 2*time.Second, func() bool {
		i++
		st := rawStatus(t, tc, "status-"+itoa(i))
		if st.State != protocol.StateReady || st.Connections != 1 {
			t.Fatalf("status %+v", st)
		}
		return st.ActiveOperations == 1
	}, "operations of the bare kernel did not finish")
}

// ---- 3. idle exit ----

func TestKernelIdleExit(t *testing.T) {
	const grace = 50 * time.Millisecond
	idleOpts := host.Options{IdleGrace: grace}

	t.Run("idle ready host exits and releases everything", func(t *testing.T) {
		comp := newLifecycleComposition()
		h := launch(t, harnessConfig{opts: idleOpts, comp: comp})
		k := h.ready()
		h.requireShutDown(k)
		if comp.beginDrains.Load() != 1 || comp.closes.Load() != 1 {
			t.Fatalf("beginDrain %d, close %d; want 1 each", comp.beginDrains.Load(), comp.closes.Load())
		}
	})

	t.Run("idle timer is not armed while recovering", func(t *testing.T) {
		release := newGate()
		defer release.open()
		h := launch(t, harnessConfig{opts: idleOpts, comp: newLifecycleComposition(), factoryGate: release})
		k := h.recovering()
		notWithin(t, k.Done(), 3*grace, "host exited while recovering")
		if st := k.State(); st != protocol.StateRecovering {
			t.Fatalf("state %s, want recovering", st)
		}
		release.open()
		h.ready()
		h.requireShutDown(k)
	})

	t.Run("connected client keeps the host", func(t *testing.T) {
		release := newGate()
		defer release.open()
		h := launch(t, harnessConfig{opts: idleOpts, comp: newLifecycleComposition(), factoryGate: release})
		k := h.recovering()
		tc, _ := acceptedRaw(t, k.Endpoint()) // connected before ready: the timer never runs unopposed
		release.open()
		h.ready()
		notWithin(t, k.Done(), 3*grace, "host exited with a client connected")
		if st := rawStatus(t, tc, "status"); st.State != protocol.StateReady {
			t.Fatalf("state %s", st.State)
		}
		_ = tc.Close()
		h.requireShutDown(k)
	})

	t.Run("active operation keeps the host", func(t *testing.T) {
		release := newGate()
		defer release.open()
		comp := newLifecycleComposition(protocol.OpTurnQuery)
		defer comp.releaseAll()
		h := launch(t, harnessConfig{opts: idleOpts, comp: comp, factoryGate: release})
		k := h.recovering()
		tc, _ := acceptedRaw(t, k.Endpoint())
		release.open()
		h.ready()
		writeRequest(t, tc, "held", protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: "s1", TurnID: "t1"})
		within(t, comp.blockers[protocol.OpTurnQuery].entered.wait(), 2*time.Second, "turn.query was not admitted")
		if err := tc.Write([]byte("\n")); err != nil { // tears the connection down; the handler keeps running
			t.Fatal(err)
		}
		expectClosedWithoutReply(t, tc, 2*time.Second, "connection after a blank line")
		eventually(t, 2*time.Second, func() bool { return k.Status().Connections == 0 }, "connection was not released")
		notWithin(t, k.Done(), 3*grace, "host exited with an operation in flight")
		comp.blockers[protocol.OpTurnQuery].release.open()
		h.requireShutDown(k)
	})

	t.Run("residency keeps the host", func(t *testing.T) {
		var r host.Residency
		h := launch(t, harnessConfig{opts: idleOpts, comp: newLifecycleComposition(), onFactory: func(k *host.Kernel) { r = k.AcquireResidency() }})
		k := h.ready()
		defer r.Release()
		notWithin(t, k.Done(), 3*grace, "host exited with a residency held")
		if st := k.Status(); st.State != protocol.StateReady || st.ActiveResidencies != 1 {
			t.Fatalf("status %+v", st)
		}
		r.Release()
		h.requireShutDown(k)
	})

	t.Run("disabled idle exit never exits", func(t *testing.T) {
		h := launch(t, harnessConfig{opts: host.Options{IdleGrace: grace, DisableIdleExit: true}, comp: newLifecycleComposition()})
		k := h.ready()
		notWithin(t, k.Done(), 3*grace, "host exited although idle exit is disabled")
		c := h.connectClient()
		_ = c.Close()
		eventually(t, 2*time.Second, func() bool { return k.Status().Connections == 0 }, "connection was not released")
		notWithin(t, k.Done(), 3*grace, "host exited after its last client left although idle exit is disabled")
		if st := k.State(); st != protocol.StateReady {
			t.Fatalf("state %s, want ready", st)
		}
	})
}

// ---- 4. drain order ----

func TestKernelDrainDoesNotWaitForQueriesOrControls(t *testing.T) {
	comp := newLifecycleComposition(protocol.OpTurnQuery, protocol.OpTurnStop)
	defer comp.releaseAll()
	h := launch(t, harnessConfig{opts: host.Options{IdleGrace: 10 * time.Second}, comp: comp})
	k := h.ready()
	c := h.connectClient()
	query := make(chan error, 1)
	stop := make(chan error, 1)
	go func() {
		_, err := c.QueryTurn(context.Background(), protocol.TurnQueryInput{SessionID: "s1", TurnID: "t1"})
		query <- err
	}()
	go func() {
		_, err := c.StopTurn(context.Background(), protocol.TurnStopInput{SessionID: "s1", TurnID: "t1", RunID: "r1"})
		stop <- err
	}()
	within(t, comp.blockers[protocol.OpTurnQuery].entered.wait(), 2*time.Second, "turn.query was not admitted")
	within(t, comp.blockers[protocol.OpTurnStop].entered.wait(), 2*time.Second, "turn.stop was not admitted")

	k.RequestDrain()
	if st := k.State(); st != protocol.StateDraining {
		t.Fatalf("state %s: a query and a control held the shutdown commit", st)
	}
	eventually(t, 2*time.Second, func() bool { return registrationState(t, h) == protocol.StateDraining }, "registration never said draining")
	if n := comp.closes.Load(); n != 0 {
		t.Fatal("composition closed while operations were in flight")
	}
	comp.releaseAll()
	if err := <-query; err != nil {
		t.Fatalf("in-flight query: %v", err)
	}
	if err := <-stop; err != nil {
		t.Fatalf("in-flight control: %v", err)
	}
	h.requireShutDown(k)
	if n := comp.beginDrains.Load(); n != 1 {
		t.Fatalf("BeginDrain called %d times", n)
	}
	comp.rec.requireBefore(t, "return:"+string(protocol.OpTurnQuery), "close")
	comp.rec.requireBefore(t, "return:"+string(protocol.OpTurnStop), "close")
}

func TestKernelDrainOrder(t *testing.T) {
	comp := newLifecycleComposition(protocol.OpTurnStart, protocol.OpTurnQuery)
	defer comp.releaseAll()
	var residency host.Residency
	h := launch(t, harnessConfig{
		opts:      host.Options{IdleGrace: 10 * time.Second},
		comp:      comp,
		onFactory: func(k *host.Kernel) { residency = k.AcquireResidency() },
	})
	k := h.ready()
	defer residency.Release()
	c := h.connectClient()

	command := make(chan error, 1)
	query := make(chan error, 1)
	go func() {
		_, err := c.StartTurn(context.Background(), protocol.TurnStartInput{SessionID: "s1", TurnID: "t1", Content: protocol.MessageContent{Text: "hi"}})
		command <- err
	}()
	go func() {
		_, err := c.QueryTurn(context.Background(), protocol.TurnQueryInput{SessionID: "s1", TurnID: "t1"})
		query <- err
	}()
	within(t, comp.blockers[protocol.OpTurnStart].entered.wait(), 2*time.Second, "turn.start was not admitted")
	within(t, comp.blockers[protocol.OpTurnQuery].entered.wait(), 2*time.Second, "turn.query was not admitted")

	k.RequestDrain()
	k.RequestDrain()
	if n := comp.beginDrains.Load(); n != 1 {
		t.Fatalf("BeginDrain called %d times, want once at the first request", n)
	}
	// The unsealed command holds the commit: state and registration stay.
	if st := k.State(); st != protocol.StateReady {
		t.Fatalf("state %s while a command is unsealed", st)
	}
	if st := registrationState(t, h); st != protocol.StateReady {
		t.Fatalf("registration %s while a command is unsealed", st)
	}
	// ... but admission already refuses.
	_, err := c.Status(context.Background())
	requireOpError(t, err, protocol.ErrHostDraining, msgDraining)
	_, err = c.QueryTurn(context.Background(), protocol.TurnQueryInput{SessionID: "s1", TurnID: "t2"})
	requireOpError(t, err, protocol.ErrHostDraining, msgDraining)
	_, err = c.StartTurn(context.Background(), protocol.TurnStartInput{SessionID: "s1", TurnID: "t3", Content: protocol.MessageContent{Text: "x"}})
	requireOpError(t, err, protocol.ErrHostDraining, msgDraining)
	tc, f := handshakeRaw(t, k.Endpoint(), 0, 0)
	if _, ok := f.(*protocol.Draining); !ok {
		t.Fatalf("handshake while draining: %#v", f)
	}
	expectClosedWithoutReply(t, tc, 2*time.Second, "socket after draining")

	// A finished query does not commit the shutdown.
	comp.blockers[protocol.OpTurnQuery].release.open()
	if err := <-query; err != nil {
		t.Fatalf("in-flight query: %v", err)
	}
	if st := k.State(); st != protocol.StateReady {
		t.Fatalf("state %s after the query finished; the command is still unsealed", st)
	}
	if n := comp.closes.Load(); n != 0 {
		t.Fatal("composition closed while a command was in flight")
	}

	// Sealing the command commits the shutdown before its response leaves.
	comp.blockers[protocol.OpTurnStart].release.open()
	if err := <-command; err != nil {
		t.Fatalf("in-flight command: %v", err)
	}
	if st := k.State(); st != protocol.StateDraining {
		t.Fatalf("state %s after the command was sealed", st)
	}
	within(t, comp.closeEntered.wait(), 3*time.Second, "composition was not closed")
	comp.rec.requireBefore(t, "beginDrain", "close")
	comp.rec.requireBefore(t, "return:"+string(protocol.OpTurnStart), "close")
	comp.rec.requireBefore(t, "return:"+string(protocol.OpTurnQuery), "close")

	// Residencies are awaited after the composition has closed.
	if st := registrationState(t, h); st != protocol.StateDraining {
		t.Fatalf("registration %s during shutdown", st)
	}
	notWithin(t, k.Done(), 100*time.Millisecond, "shutdown finished with a residency held")
	if st := k.Status(); st.ActiveResidencies != 1 || st.ActiveOperations != 0 {
		t.Fatalf("status during the residency wait %+v", st)
	}
	residency.Release()
	h.requireShutDown(k)
	if n := comp.closes.Load(); n != 1 {
		t.Fatalf("composition closed %d times", n)
	}
	if n := comp.beginDrains.Load(); n != 1 {
		t.Fatalf("BeginDrain called %d times", n)
	}
	within(t, c.Done(), 2*time.Second, "client connection outlived the host")
}

func TestKernelRetainUntilProcessExitEndsWithTerminationRequired(t *testing.T) {
	const shutdownGrace = 200 * time.Millisecond
	comp := newLifecycleComposition()
	h := launch(t, harnessConfig{
		opts: host.Options{IdleGrace: 10 * time.Second, ShutdownGrace: shutdownGrace},
		comp: comp,
		onFactory: func(k *host.Kernel) {
			k.RetainUntilProcessExit()
			k.RetainUntilProcessExit() // a latch: counted once
		},
	})
	k := h.ready()
	c := h.connectClient()
	if st, err := c.Status(context.Background()); err != nil || st.ActiveResidencies != 1 {
		t.Fatalf("status with a retained residency: %+v %v", st, err)
	}
	if inc := incompatibleReply(t, k.Endpoint()); inc.Replacement != protocol.ReplacementBlockedByResidency {
		t.Fatalf("replacement %s with a retained residency", inc.Replacement)
	}
	_ = c.Close()
	eventually(t, 2*time.Second, func() bool { return k.Status().Connections == 0 }, "connection was not released")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	err := k.Close(ctx)
	elapsed := time.Since(start)
	if !errors.Is(err, host.ErrProcessTerminationRequired) {
		t.Fatalf("close: %v, want ErrProcessTerminationRequired", err)
	}
	if elapsed < shutdownGrace {
		t.Fatalf("close gave up after %v, before the %v shutdown grace", elapsed, shutdownGrace)
	}
	if !errors.Is(k.Err(), host.ErrProcessTerminationRequired) {
		t.Fatalf("Err() = %v", k.Err())
	}
	if comp.closes.Load() != 1 || comp.beginDrains.Load() != 1 {
		t.Fatalf("beginDrain %d, close %d; want 1 each", comp.beginDrains.Load(), comp.closes.Load())
	}
	// The lock is left to the operating system (process exit).
	if h.owner.Closed() {
		t.Fatal("owner closed although shutdown did not complete")
	}
	if successor, err := storageroot.TryAcquireOwner(h.capability); successor != nil || err != nil {
		if successor != nil {
			_ = successor.Close()
		}
		t.Fatalf("lock acquirable after an incomplete shutdown (err %v)", err)
	}
}

// ---- 5. owner loss ----

func TestKernelOwnerLoss(t *testing.T) {
	moveRoot := func(t *testing.T, h *kernelHarness) string {
		t.Helper()
		moved := h.root + ".moved"
		if err := os.Rename(h.root, moved); err != nil {
			t.Fatal(err)
		}
		// A successful ownership check is trusted for OwnerCheckInterval.
		<-time.After(host.OwnerCheckInterval)
		return moved
	}
	// ownerCheckSlack bounds how late after OwnerCheckInterval the first
	// admission may still trust the previous check (timer scheduling).
	const ownerCheckSlack = 500 * time.Millisecond
	statusUntilDraining := func(t *testing.T, c *client.Conn) {
		t.Helper()
		deadline := time.Now().Add(ownerCheckSlack)
		for {
			_, err := c.Status(context.Background())
			if err == nil && time.Now().Before(deadline) {
				continue
			}
			requireOpError(t, err, protocol.ErrHostDraining, msgDraining)
			return
		}
	}
	requireSuccessor := func(t *testing.T, h *kernelHarness, moved string) {
		t.Helper()
		capability, err := storageroot.ResolveExisting(moved, storageroot.KindInteractive, h.capability.RootID())
		if err != nil {
			t.Fatal(err)
		}
		requireLockFree(t, capability)
	}

	t.Run("next admission drains and the lock is released", func(t *testing.T) {
		h := launch(t, harnessConfig{opts: host.Options{IdleGrace: 10 * time.Second}, comp: newLifecycleComposition()})
		k := h.ready()
		c := h.connectClient()
		if _, err := c.Status(context.Background()); err != nil {
			t.Fatal(err)
		}
		moved := moveRoot(t, h)
		statusUntilDraining(t, c)
		within(t, k.Done(), 5*time.Second, "host did not shut down after losing its root")
		if err := k.Err(); err != nil {
			t.Fatalf("shutdown error: %v", err)
		}
		if !h.owner.Closed() {
			t.Fatal("owner still open")
		}
		if _, found, err := control.ReadRegistration(h.owner.ControlDirectory()); err != nil || found {
			t.Fatalf("registration after shutdown: found=%v err=%v", found, err)
		}
		within(t, c.Done(), 2*time.Second, "client connection outlived the host")
		requireSuccessor(t, h, moved)
	})

	t.Run("next handshake answers draining", func(t *testing.T) {
		h := launch(t, harnessConfig{opts: host.Options{IdleGrace: 10 * time.Second}, comp: newLifecycleComposition()})
		k := h.ready()
		c := h.connectClient() // the last successful check
		_ = c.Close()
		moved := moveRoot(t, h)
		deadline := time.Now().Add(ownerCheckSlack)
		tc, f := handshakeRaw(t, k.Endpoint(), 0, 0)
		for _, accepted := f.(*protocol.Accepted); accepted && time.Now().Before(deadline); _, accepted = f.(*protocol.Accepted) {
			_ = tc.Close()
			tc, f = handshakeRaw(t, k.Endpoint(), 0, 0)
		}
		if d, ok := f.(*protocol.Draining); !ok || d.HostEpoch != k.HostEpoch() {
			t.Fatalf("handshake after owner loss: %#v", f)
		}
		expectClosedWithoutReply(t, tc, 2*time.Second, "socket after draining")
		within(t, k.Done(), 5*time.Second, "host did not shut down after losing its root")
		if err := k.Err(); err != nil {
			t.Fatalf("shutdown error: %v", err)
		}
		requireSuccessor(t, h, moved)
	})

	t.Run("commits without waiting for commands", func(t *testing.T) {
		comp := newLifecycleComposition(protocol.OpTurnStart)
		defer comp.releaseAll()
		h := launch(t, harnessConfig{opts: host.Options{IdleGrace: 10 * time.Second}, comp: comp})
		k := h.ready()
		c := h.connectClient()
		command := make(chan error, 1)
		go func() {
			_, err := c.StartTurn(context.Background(), protocol.TurnStartInput{SessionID: "s1", TurnID: "t1", Content: protocol.MessageContent{Text: "hi"}})
			command <- err
		}()
		within(t, comp.blockers[protocol.OpTurnStart].entered.wait(), 2*time.Second, "turn.start was not admitted")
		moved := moveRoot(t, h)
		statusUntilDraining(t, c)
		if st := k.State(); st != protocol.StateDraining {
			t.Fatalf("state %s: owner loss waited for the unsealed command", st)
		}
		comp.blockers[protocol.OpTurnStart].release.open()
		if err := <-command; err != nil {
			t.Fatalf("in-flight command: %v", err)
		}
		within(t, k.Done(), 5*time.Second, "host did not shut down after losing its root")
		if err := k.Err(); err != nil {
			t.Fatalf("shutdown error: %v", err)
		}
		comp.rec.requireBefore(t, "return:"+string(protocol.OpTurnStart), "close")
		requireSuccessor(t, h, moved)
	})
}

// ---- 6. bad input ----

func TestKernelBadInputClosesOnlyTheOffendingConnection(t *testing.T) {
	h := launch(t, harnessConfig{opts: host.Options{IdleGrace: 10 * time.Second}, comp: newLifecycleComposition()})
	k := h.ready()
	healthy := h.connectClient()
	bystander, _ := acceptedRaw(t, k.Endpoint())

	request := func(id, op, input string) []byte {
		return []byte(`{"requestId":` + id + `,"operation":"` + op + `","input":` + input + "}\n")
	}
	helloFrame, err := protocol.EncodeFrame(hello("second", 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name        string
		beforeHello bool
		payload     []byte
		closeWrite  bool
	}{
		{name: "invalid UTF-8", payload: []byte("{\"requestId\":\"r\xff\",\"operation\":\"host.status\",\"input\":{}}\n")},
		{name: "invalid JSON", payload: []byte("{\"requestId\":\"r1\",}\n")},
		{name: "CR only", payload: []byte("\r\n")},
		{name: "oversized frame", payload: bytes.Repeat([]byte("a"), protocol.MaxFrameBytes+1)},
		{name: "blank line", payload: []byte("\n")},
		{name: "not an object", payload: []byte("[1,2]\n")},
		{name: "unknown operation", payload: request(`"r1"`, "host.reboot", `{}`)},
		{name: "extra key", payload: []byte(`{"requestId":"r1","operation":"host.status","input":{},"extra":1}` + "\n")},
		{name: "missing input", payload: []byte(`{"requestId":"r1","operation":"host.status"}` + "\n")},
		{name: "empty requestId", payload: request(`""`, "host.status", `{}`)},
		{name: "requestId of 129", payload: request(`"`+strings.Repeat("r", 129)+`"`, "host.status", `{}`)},
		{name: "requestId not a string", payload: request(`7`, "host.status", `{}`)},
		{name: "invalid input", payload: request(`"r1"`, "turn.query", `{"sessionId":"bad id","turnId":"t1"}`)},
		{name: "host.status input not empty", payload: request(`"r1"`, "host.status", `{"x":1}`)},
		{name: "request before hello", beforeHello: true, payload: request(`"r1"`, "host.status", `{}`)},
		{name: "second hello", payload: helloFrame},
		{name: "partial frame then EOF", payload: []byte(`{"requestId":"r1","operation":`), closeWrite: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var conn *transport.Conn
			if tc.beforeHello {
				conn = dialHost(t, k.Endpoint())
			} else {
				conn, _ = acceptedRaw(t, k.Endpoint())
			}
			_ = conn.Write(tc.payload) // the host may close before reading everything
			if tc.closeWrite {
				if err := conn.CloseWrite(); err != nil {
					t.Fatal(err)
				}
			}
			expectClosedWithoutReply(t, conn, 2*time.Second, tc.name)
			st, err := healthy.Status(context.Background())
			if err != nil || st.State != protocol.StateReady {
				t.Fatalf("healthy client after %s: %+v %v", tc.name, st, err)
			}
		})
	}
	st := waitForStatus(t, healthy, func(s protocol.HostStatus) bool { return s.Connections == 2 })
	if st.State != protocol.StateReady || st.ActiveResidencies != 0 {
		t.Fatalf("status after bad input %+v", st)
	}
	if st := rawStatus(t, bystander, "bystander"); st.Connections != 2 {
		t.Fatalf("bystander status %+v", st)
	}
	if healthy.Err() != nil {
		t.Fatalf("healthy client failed: %v", healthy.Err())
	}
	if k.State() != protocol.StateReady {
		t.Fatalf("state %s", k.State())
	}
}

// An operation still running ShutdownOperationGrace after the commit costs
// its connection, but the composition is closed only after it returns.
func TestKernelShutdownWaitsForOperationsPastTheOperationGrace(t *testing.T) {
	comp := newLifecycleComposition(protocol.OpTurnQuery)
	defer comp.releaseAll()
	h := launch(t, harnessConfig{opts: host.Options{IdleGrace: 10 * time.Second}, comp: comp})
	k := h.ready()
	c := h.connectClient()
	query := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.QueryTurn(ctx, protocol.TurnQueryInput{SessionID: "s1", TurnID: "t1"})
		query <- err
	}()
	within(t, comp.blockers[protocol.OpTurnQuery].entered.wait(), 2*time.Second, "turn.query was not admitted")

	start := time.Now()
	k.RequestDrain()
	within(t, c.Done(), 5*time.Second, "connection of a slow operation was not destroyed")
	if elapsed := time.Since(start); elapsed < host.ShutdownOperationGrace {
		t.Fatalf("connection destroyed after %v, before the %v operation grace", elapsed, host.ShutdownOperationGrace)
	}
	if err := <-query; err == nil {
		t.Fatal("the query of a destroyed connection succeeded")
	}
	if n := comp.closes.Load(); n != 0 {
		t.Fatal("composition closed while an operation was still running")
	}
	eventually(t, 2*time.Second, func() bool { return k.Status().Connections == 0 }, "destroyed connection was not released")
	if st := k.Status(); st.ActiveOperations != 1 {
		t.Fatalf("status after the connection was destroyed %+v", st)
	}
	notWithin(t, k.Done(), 50*time.Millisecond, "shutdown finished with an operation running")
	comp.blockers[protocol.OpTurnQuery].release.open()
	h.requireShutDown(k)
	comp.rec.requireBefore(t, "return:"+string(protocol.OpTurnQuery), "close")
}

// hookHandler is a slog.Handler that runs fn (once) when the kernel logs a
// message containing match: it lets a test act at that exact point of the
// kernel's control flow.
type hookHandler struct {
	match string
	fn    func()
	once  sync.Once
}

func (h *hookHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *hookHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *hookHandler) WithGroup(string) slog.Handler            { return h }
func (h *hookHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.once.Do(h.fn)
	}
	return nil
}

// A client accepted after the idle timer fired but before the shutdown was
// requested must not be drained: "on fire, if still true-idle → commit
// shutdown" (§D.7) and acceptance cancels the idle timer (§D.4.5). Either
// the client is answered draining, or the host stays up for it.
func TestKernelIdleExitDoesNotDrainAClientAcceptedAsTheTimerFires(t *testing.T) {
	type reply struct {
		tc    *transport.Conn
		frame any
		err   error
	}
	replies := make(chan reply, 1)
	var endpoint atomic.Value
	hook := &hookHandler{match: "idle", fn: func() {
		// Runs on the idle timer's goroutine, after it decided to exit.
		nc, err := net.Dial("unix", endpoint.Load().(string))
		if err != nil {
			replies <- reply{err: err}
			return
		}
		tc := transport.New(nc)
		if err := tc.WriteValue(hello("late", 0, 0)); err != nil {
			replies <- reply{tc: tc, err: err}
			return
		}
		v, err := tc.ReadFrame(2 * time.Second)
		if err != nil {
			replies <- reply{tc: tc, err: err}
			return
		}
		f, err := protocol.DecodeHostFrame(v)
		replies <- reply{tc: tc, frame: f, err: err}
	}}
	h := launch(t, harnessConfig{
		opts:      host.Options{IdleGrace: 50 * time.Millisecond, Logger: slog.New(hook)},
		comp:      newLifecycleComposition(),
		onFactory: func(k *host.Kernel) { endpoint.Store(k.Endpoint()) },
	})
	k := h.ready()
	var r reply
	select {
	case r = <-replies:
	case <-time.After(5 * time.Second):
		t.Fatal("the idle timer never logged its decision (log message changed?)")
	}
	if r.tc != nil {
		defer r.tc.Close()
	}
	if r.err != nil {
		t.Fatalf("late handshake: %v", r.err)
	}
	switch f := r.frame.(type) {
	case *protocol.Draining:
		// The shutdown was decided before the hello: acceptable.
	case *protocol.Accepted:
		notWithin(t, k.Done(), 200*time.Millisecond, "host drained a client it accepted after the idle decision")
		if st := k.State(); st != protocol.StateReady {
			t.Fatalf("state %s with an accepted client", st)
		}
		writeRequest(t, r.tc, "late-status", protocol.OpHostStatus, protocol.HostStatusInput{})
		if resp := requireResponse(t, readHostFrame(t, r.tc), "late-status"); !resp.OK {
			t.Fatalf("accepted client refused: %+v", resp.Error)
		}
	default:
		t.Fatalf("late handshake reply %#v", f)
	}
}

const isolatedChildEnv = "MAKA_KERNEL_TEST_ISOLATED_ROOT"

// runIsolated re-runs the calling test in a child process, so that a crash
// of the kernel (a panic on a timer goroutine) fails this test instead of
// the whole package. The child works on root, which this process cleans up.
func runIsolated(t *testing.T, root string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), isolatedChildEnv+"="+root)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("isolated run failed: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("isolated run did not pass:\n%s", out)
	}
}

// When the shutdown deadline fires while the last close step (releasing the
// owner lock, which waits for in-flight root leases) is still running, the
// host must still end exactly once, with ErrProcessTerminationRequired
// (§D.8.2), and must not crash.
func TestKernelShutdownDeadlineDuringOwnerReleaseEndsOnce(t *testing.T) {
	root := os.Getenv(isolatedChildEnv)
	if root == "" {
		parentRoot, _ := newRoot(t)
		runIsolated(t, parentRoot)
		return
	}
	const shutdownGrace = 150 * time.Millisecond
	leaseEntered, releaseLease, deadlineLogged := newGate(), newGate(), newGate()
	defer releaseLease.open()
	var kernel atomic.Pointer[host.Kernel]
	hook := &hookHandler{match: "exceeded", fn: func() {
		deadlineLogged.open()
		// The deadline has fired; let the owner release finish and the
		// close sequence end before the deadline path goes on.
		releaseLease.open()
		if k := kernel.Load(); k != nil {
			select {
			case <-k.Done():
			case <-time.After(2 * time.Second):
			}
		}
	}}
	h := launch(t, harnessConfig{
		root: root,
		opts: host.Options{IdleGrace: 10 * time.Second, ShutdownGrace: shutdownGrace, Logger: slog.New(hook)},
		comp: newLifecycleComposition(),
	})
	k := h.ready()
	kernel.Store(k)
	// A root lease in flight (a slow storage write) makes the final owner
	// release outlast the shutdown grace.
	leaseDone := make(chan error, 1)
	go func() {
		leaseDone <- h.owner.RunWithLease(func(string) error {
			leaseEntered.open()
			<-releaseLease.wait()
			return nil
		})
	}()
	within(t, leaseEntered.wait(), 2*time.Second, "lease did not start")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := k.Close(ctx)
	within(t, deadlineLogged.wait(), 2*time.Second, "the shutdown deadline was never logged (log message changed?)")
	if err := <-leaseDone; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, host.ErrProcessTerminationRequired) || !errors.Is(k.Err(), host.ErrProcessTerminationRequired) {
		t.Fatalf("close: %v, Err: %v; want ErrProcessTerminationRequired once the deadline fired", err, k.Err())
	}
}
