package domaintest_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/domaintest"
	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const failAfter = 10 * time.Second

// controlDirectory returns the control directory of the root at path.
func controlDirectory(t *testing.T, path string) string {
	t.Helper()
	c, err := storageroot.Discover(path)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := storageroot.ControlNamespace()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(ns, c.RootID())
}

func TestAHostOnAFreshRootServesAndIsGoneWhenTheTestEnds(t *testing.T) {
	var h *domaintest.Host
	var controlDir string
	t.Run("serve", func(t *testing.T) {
		h = domaintest.Start(t, "", domain.Options{})
		if h.Root == "" || !filepath.IsAbs(h.Root) {
			t.Fatalf("root %q", h.Root)
		}
		controlDir = controlDirectory(t, h.Root)
		if _, err := os.Stat(controlDir); err != nil {
			t.Fatalf("control directory while running: %v", err)
		}
		c := h.Connect(t, protocol.SurfaceTUI, failAfter)
		ctx, cancel := context.WithTimeout(context.Background(), failAfter)
		defer cancel()
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != protocol.StateReady || st.HostEpoch != c.HostEpoch() {
			t.Fatalf("status %+v", st)
		}
	})
	select {
	case <-h.Kernel.Done():
	default:
		t.Fatal("the host still runs after its test ended")
	}
	if _, err := os.Stat(controlDir); !os.IsNotExist(err) {
		t.Fatalf("control directory after the test: %v", err)
	}
}

func TestStopClosesClientsThenTheHostAndFreesTheRoot(t *testing.T) {
	h := domaintest.Start(t, "", domain.Options{})
	c := h.Connect(t, protocol.SurfaceRun, failAfter)
	if err := h.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("the client is still open after Stop")
	}
	select {
	case <-h.Kernel.Done():
	default:
		t.Fatal("the host still runs after Stop")
	}
	if err := h.Stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}

	again := domaintest.Start(t, h.Root, domain.Options{})
	c2 := again.Connect(t, protocol.SurfaceTUI, failAfter)
	if c2.HostEpoch() == c.HostEpoch() {
		t.Fatalf("the restarted host kept epoch %s", c.HostEpoch())
	}
}
