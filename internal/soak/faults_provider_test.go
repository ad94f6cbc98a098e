package soak_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// Watchdog and retry options of the provider fault tests: a stream that
// stays silent for a second is cut, a failed attempt is retried once
// after exactly one second.
var faultStep = model.StepOptions{
	MaxAttempts: 2, FirstEventTimeout: time.Second, IdleTimeout: 500 * time.Millisecond,
	Jitter: func() float64 { return 0 },
}

// TestProviderFaults drives model streams that break: a connection reset
// after some output fails the turn (network), one before any output is
// retried and completes, a stream that never starts or stalls after some
// output is cut by the watchdog (timeout). What a subscriber streamed is
// what the transcript holds, and after a restart every turn reads back as
// it was acknowledged.
func TestProviderFaults(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	var mu sync.Mutex
	attempts := map[string]int{}
	replies := map[string]func(attempt int) modeltest.Reply{
		"reset after output": func(int) modeltest.Reply {
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "partial "}, {Text: "answer"}}, Cut: true}
		},
		"reset before output": func(n int) modeltest.Reply {
			if n == 1 {
				return modeltest.Reply{Cut: true}
			}
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "recovered "}, {Text: "answer"}}}
		},
		"no first event": func(int) modeltest.Reply {
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Wait: hold}}}
		},
		"stall after output": func(int) modeltest.Reply {
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "slow "}, {Wait: hold}}}
		},
	}
	cases := []struct {
		name     string
		status   protocol.TurnStatus
		class    string
		attempts int
		text     string
	}{
		{"reset after output", protocol.TurnFailed, "network", 1, "partial answer"},
		{"reset before output", protocol.TurnCompleted, "", 2, "recovered answer"},
		{"no first event", protocol.TurnFailed, "timeout", 2, ""},
		{"stall after output", protocol.TurnFailed, "timeout", -1, "slow "},
	}

	// Registered before the model server, so that it runs after the
	// server closed: no idle model connection outlives the test.
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	srv := modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
		mu.Lock()
		attempts[req.LastUser()]++
		n := attempts[req.LastUser()]
		mu.Unlock()
		if reply, ok := replies[req.LastUser()]; ok {
			return reply(n)
		}
		return modeltest.Reply{Status: 400, Body: `{"error":{"message":"unknown case"}}`}
	})
	r := newRig(t, newRoot(t), domain.Options{HTTPClient: &http.Client{Transport: tr}, Step: faultStep}, host.Options{})
	r.start()
	c := r.dial()
	if err := modeltest.Configure(opCtx(t), c, srv.BaseURL(), "sk-soak-fake-key"); err != nil {
		t.Fatalf("configure the model: %v", err)
	}

	var recMu sync.Mutex
	var recorded []acked
	t.Run("faults", func(t *testing.T) {
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				sid := fmt.Sprintf("fault-%d", i)
				if err := createSession(opCtx(t), c, sid, workspace(t), protocol.PermissionModeBypass); err != nil {
					t.Fatal(err)
				}
				f := follow(t, c, sid)
				streamed, end := runTurn(t, c, f, sid, "turn-1", tc.name)
				if end.Status != tc.status || end.FailureClass != tc.class {
					t.Fatalf("turn ended %s (class %q), want %s (class %q)", end.Status, end.FailureClass, tc.status, tc.class)
				}
				mu.Lock()
				n := attempts[tc.name]
				mu.Unlock()
				if tc.attempts > 0 && n != tc.attempts {
					t.Errorf("the model was asked %d times, want %d", n, tc.attempts)
				}
				got := record(t, c, sid, "turn-1")
				if got.end != end {
					t.Errorf("turn.query %+v, terminal projection %+v", got.end, end)
				}
				if streamed != tc.text || got.transcript != tc.text {
					t.Errorf("streamed %q, transcript %q, want %q", streamed, got.transcript, tc.text)
				}
				recMu.Lock()
				recorded = append(recorded, got)
				recMu.Unlock()
			})
		}
	})
	if t.Failed() {
		return
	}
	c.Close()
	if err := r.stop(); err != nil {
		t.Fatalf("host close: %v", err)
	}
	r.start()
	checkIntact(t, r.dial(), recorded)
}
