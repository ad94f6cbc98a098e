package e2e_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/domaintest"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// newRetryHost is newHost with a 5 ms retry base.
func newRetryHost(t *testing.T, reply func(*modeltest.Request) modeltest.Reply) *testHost {
	t.Helper()
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	srv := modeltest.New(t, reply)
	dh := domaintest.Start(t, "", domain.Options{HTTPClient: &http.Client{Transport: transport},
		Step: model.StepOptions{RetryBase: 5 * time.Millisecond}})
	h := &testHost{t: t, host: dh, model: srv}
	h.conn = h.dial()
	if err := modeltest.ConfigureWindow(opCtx(t), h.conn, "openai-compatible", srv.BaseURL(), apiKey, 0); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestRetryNoticesEndToEnd: a subscriber that asked for notices sees one
// model_retry notice per retry, with the attempt, the bound, the delay and
// what failed, before the turn completes; a v0 subscriber sees none.
func TestRetryNoticesEndToEnd(t *testing.T) {
	var calls atomic.Int32
	h := newRetryHost(t, func(*modeltest.Request) modeltest.Reply {
		if calls.Add(1) <= 2 {
			return modeltest.Reply{Status: 502, Body: "gateway says no"}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "fine now"}}}
	})
	c := h.conn
	createSession(t, c, "flaky", protocol.PermissionModeBypass)
	w := watch(t, c, "flaky", client.WithNotices())
	plain := watch(t, c, "flaky")
	startTurn(t, c, "flaky", "t1", "hello")
	frames := w.untilTerminal(t, "t1")
	plain.untilTerminal(t, "t1")
	if got := queryTurn(t, c, "flaky", "t1"); got.Status != protocol.TurnCompleted {
		t.Fatalf("turn %+v", got)
	}
	notices := noticesOf(frames)
	if len(notices) != 2 {
		t.Fatalf("notices %+v, want two model_retry", notices)
	}
	for i, n := range notices {
		if n.Kind != protocol.NoticeModelRetry || n.TurnID != "t1" || n.Attempt != int64(i+2) || n.MaxAttempts != 10 ||
			n.DelayMs > 160 || !strings.HasPrefix(n.Message, "attempt ") ||
			!strings.HasSuffix(n.Message, ": HTTP 502 Bad Gateway: gateway says no") {
			t.Errorf("notice %d = %+v", i, n)
		}
	}
	if n := noticeFrames(plain.snapshot()); n != 0 {
		t.Fatalf("a v0 subscriber got %d notices", n)
	}
}

// TestModelFailedNoticeEndToEnd: a request that fails for good is told as
// model_failed with the status and body, and nothing is retried.
func TestModelFailedNoticeEndToEnd(t *testing.T) {
	h := newRetryHost(t, func(*modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Status: 401, Body: `{"error":{"message":"bad key sk-abcdefghijklmnop","type":"invalid_request_error"}}`}
	})
	c := h.conn
	createSession(t, c, "denied", protocol.PermissionModeBypass)
	w := watch(t, c, "denied", client.WithNotices())
	startTurn(t, c, "denied", "t1", "hello")
	notices := noticesOf(w.untilTerminal(t, "t1"))
	if got := queryTurn(t, c, "denied", "t1"); got.Status != protocol.TurnFailed || got.FailureClass != "auth" {
		t.Fatalf("turn %+v", got)
	}
	want := `HTTP 401 Unauthorized: {"error":{"message":"bad key [redacted]","type":"invalid_request_error"}}`
	if len(notices) != 1 || notices[0].Kind != protocol.NoticeModelFailed || notices[0].Message != want {
		t.Fatalf("notices %+v, want one model_failed %q", notices, want)
	}
}
