package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/maka-agent/maka/internal/host"
)

// The ready host calls OnQuiet once it has been without work, and once
// again after each piece of work has ended, connections staying open.
func TestOnQuietAfterWorkEnds(t *testing.T) {
	quiet := make(chan struct{}, 16)
	f := withRuntimeHostOptions(t, testHandlers(nil), func(o *host.Options) {
		o.QuietAfter = time.Millisecond
		o.OnQuiet = func() { quiet <- struct{}{} }
	})
	wait := func(msg string) {
		t.Helper()
		select {
		case <-quiet:
		case <-time.After(10 * time.Second):
			t.Fatal(msg)
		}
	}
	wait("no OnQuiet after the host became ready")

	r := f.kernel.AcquireResidency()
	c := f.connectClient()
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.Release()
	wait("no OnQuiet after the residency was released")

	// The client is still connected: a request is work, its end is quiet.
	for len(quiet) > 0 {
		<-quiet
	}
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	wait("no OnQuiet after a request, with its connection open")
}
