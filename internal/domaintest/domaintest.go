// Package domaintest starts the full host — the domain composition — on a
// storage root in tests and benchmarks.
package domaintest

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/hosttest"
	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/protocol"
)

// closeTimeout bounds the wait for the host to shut down.
const closeTimeout = 30 * time.Second

// Host is a running in-process host.
type Host struct {
	// Root is the storage root the host owns.
	Root string
	// Kernel is the running host.
	Kernel *host.Kernel

	mu    sync.Mutex
	conns []*client.Conn // clients made by Connect, closed by Stop

	stopOnce sync.Once
	stopErr  error
}

// Start starts the full composition with opts on root (tb.TempDir()/root
// when root is ""). When the test ends, the host is closed (an error closing
// it fails the test) unless Stop was called, and then the root's control
// directory is removed.
func Start(tb testing.TB, root string, opts domain.Options) *Host {
	tb.Helper()
	if root == "" {
		root = filepath.Join(tb.TempDir(), "root")
	}
	capability, err := storageroot.Resolve(root, storageroot.KindInteractive)
	if err != nil {
		tb.Fatal(err)
	}
	// Registered before the host's own cleanup, so it runs after it.
	tb.Cleanup(func() { removeControlDirectory(capability.RootID()) })
	owner, err := storageroot.TryAcquireOwner(capability)
	if err != nil || owner == nil {
		tb.Fatalf("owner lock of %s: %v", root, err)
	}
	k, err := host.Start(context.Background(), host.Options{
		Owner: owner, DisableIdleExit: true, RefusePeer: domain.RefuseSandboxedPeer,
		CompositionFactory: domain.Factory(capability.Path(), nil, opts),
	})
	if err != nil {
		tb.Fatal(err)
	}
	h := &Host{Root: root, Kernel: k}
	tb.Cleanup(func() {
		if ran, err := h.stop(); ran && err != nil {
			tb.Errorf("host close: %v", err)
		}
	})
	return h
}

// Stop closes the clients made by Connect and then the host, now. It is
// idempotent: later calls return the first call's result.
func (h *Host) Stop() error {
	_, err := h.stop()
	return err
}

// stop is Stop that also reports whether this call closed the host.
func (h *Host) stop() (ran bool, err error) {
	h.stopOnce.Do(func() {
		ran = true
		h.mu.Lock()
		conns := h.conns
		h.conns = nil
		h.mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		h.stopErr = h.Kernel.Close(ctx)
	})
	return ran, h.stopErr
}

// Connect returns a client connected to the host on surface whose calls
// without a deadline time out after timeout; connecting is bounded by
// timeout as well. The client is closed when the test ends or by Stop,
// whichever comes first.
func (h *Host) Connect(tb testing.TB, surface protocol.Surface, timeout time.Duration) *client.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := client.Connect(ctx, client.Options{RootPath: h.Root, Surface: surface, RequestTimeout: timeout})
	if err != nil || res.Kind != client.Connected {
		tb.Fatalf("connect: %v %+v", err, res)
	}
	h.mu.Lock()
	h.conns = append(h.conns, res.Conn)
	h.mu.Unlock()
	tb.Cleanup(func() { res.Conn.Close() })
	return res.Conn
}

// removeControlDirectory removes the control directory of rootID under the
// current user's home.
func removeControlDirectory(rootID string) {
	if ns, err := storageroot.ControlNamespace(); err == nil {
		os.RemoveAll(filepath.Join(ns, rootID))
	}
}

// Domain is a composition opened without a kernel, for tests that call its
// handlers directly: the one builder of the domain's wiring that package
// fixtures share.
type Domain struct {
	*domain.Composition
	// Dir is the storage directory (the database and the credentials).
	Dir string
}

// Open opens the composition on dir for host h and recovers it, as the
// kernel does before it serves. The caller closes it with Close.
func Open(tb testing.TB, dir string, h domain.Host, opts domain.Options) *Domain {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	c, err := domain.Open(ctx, dir, h, nil, opts)
	if err != nil {
		tb.Fatalf("open the domain: %v", err)
	}
	if err := c.Recover(ctx); err != nil {
		tb.Errorf("recover: %v", err)
	}
	return &Domain{Composition: c, Dir: dir}
}

// Call runs op as the kernel would on a connection of conn: the input goes
// through the operation's input codec, and a success must pass the output
// codec and the declared error codes.
func (d *Domain) Call(ctx context.Context, tb testing.TB, op protocol.Operation, in any, conn *host.ConnInfo) host.Outcome {
	tb.Helper()
	return hosttest.Call(ctx, tb, d.Handlers(), op, in, conn)
}

// Close closes the composition within closeTimeout.
func (d *Domain) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	return d.Composition.Close(ctx)
}
