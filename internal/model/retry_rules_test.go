package model

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// attemptLog is a provider that fails every attempt with fail() and
// records when each attempt started (in the synctest bubble's time).
type attemptLog struct {
	fail   func() error
	starts []time.Time
}

func (a *attemptLog) Stream(context.Context, Request, func(Event) error) (Finish, error) {
	a.starts = append(a.starts, time.Now())
	return Finish{}, a.fail()
}

func (a *attemptLog) gaps() []time.Duration {
	var out []time.Duration
	for i := 1; i < len(a.starts); i++ {
		out = append(out, a.starts[i].Sub(a.starts[i-1]))
	}
	return out
}

// The 32 s cap holds with the jitter included: ten attempts against a
// failing provider with the largest jitter never wait more than 32 s
// between two attempts, and what OnRetry announces is what is waited.
func TestBackoffCapHoldsWithJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &attemptLog{fail: func() error {
			return &Failure{Kind: FailureProviderUnavailable, Status: 500, Message: "Internal Server Error"}
		}}
		var infos []RetryInfo
		opts := StepOptions{Jitter: func() float64 { return 0.999 }, OnRetry: func(i RetryInfo) {
			if i.Phase == RetryScheduled {
				infos = append(infos, i)
			}
		}}
		_, err := StreamStep(t.Context(), a, Request{}, opts, discard)
		var f *Failure
		if !errors.As(err, &f) || f.Status != 500 {
			t.Fatalf("err = %v, want the 500", err)
		}
		gaps := a.gaps()
		if len(a.starts) != DefaultMaxAttempts || len(infos) != DefaultMaxAttempts-1 {
			t.Fatalf("%d attempts, %d retry notices; want %d and %d", len(a.starts), len(infos), DefaultMaxAttempts, DefaultMaxAttempts-1)
		}
		for i, g := range gaps {
			if g > 32*time.Second || g != infos[i].Delay {
				t.Errorf("wait before attempt %d = %v (announced %v); want at most 32s and as announced", i+2, g, infos[i].Delay)
			}
			if infos[i].MaxAttempts != DefaultMaxAttempts || infos[i].Message != "HTTP 500 Internal Server Error" {
				t.Errorf("retry %d = %+v", i, infos[i])
			}
		}
		if gaps[0] <= time.Second || gaps[0] >= 1250*time.Millisecond {
			t.Errorf("first wait %v, want 1 s plus jitter", gaps[0])
		}
	})
}

// A Retry-After at the cap is waited for; one above it fails at once and
// says why.
func TestRetryAfterAboveTheCapFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		after := 32 * time.Second
		a := &attemptLog{fail: func() error {
			return &Failure{Kind: FailureRateLimit, Status: 429, Message: "slow down", RetryAfter: after, RetryAfterSet: true}
		}}
		_, _ = StreamStep(t.Context(), a, Request{}, StepOptions{MaxAttempts: 2}, discard)
		if g := a.gaps(); len(g) != 1 || g[0] != 32*time.Second {
			t.Fatalf("waits %v, want one of 32s", g)
		}
		after = 33 * time.Second
		a.starts = nil
		_, err := StreamStep(t.Context(), a, Request{}, StepOptions{}, discard)
		var f *Failure
		if !errors.As(err, &f) || len(a.starts) != 1 {
			t.Fatalf("err %v after %d attempts; want a failure after 1", err, len(a.starts))
		}
		if want := "HTTP 429 Too Many Requests: slow down (the provider asked to retry after 33 s, more than the 32 s limit)"; f.Describe() != want {
			t.Fatalf("Describe = %q, want %q", f.Describe(), want)
		}
	})
}

// refused is the error net/http returns when nothing listens at addr.
func refused(addr string) error {
	return &url.Error{Op: "Post", URL: "http://" + addr + "/v1/chat/completions", Err: &net.OpError{
		Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
}

// A refused connection is retried twice, within 5 s, and the step fails
// naming the base URL; so is a failed DNS lookup.
func TestConnectFailuresRetriedTwiceWithinFiveSeconds(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"refused", refused("127.0.0.1:9"), "connection refused at http://127.0.0.1:9/v1"},
		{"dns", &url.Error{Op: "Post", URL: "http://127.0.0.1:9/v1/chat/completions", Err: &net.OpError{Op: "dial", Net: "tcp",
			Err: &net.DNSError{Err: "no such host", Name: "127.0.0.1", IsNotFound: true}}},
			"no such host at http://127.0.0.1:9/v1 (DNS lookup of 127.0.0.1)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := &attemptLog{fail: func() error { return Classify(tt.err) }}
				p := endpoint{a, "http://127.0.0.1:9/v1"}
				var infos []RetryInfo
				start := time.Now()
				_, err := StreamStep(t.Context(), p, Request{}, StepOptions{Jitter: func() float64 { return 0.999 }, OnRetry: func(i RetryInfo) {
					if i.Phase == RetryScheduled {
						infos = append(infos, i)
					}
				}}, discard)
				var f *Failure
				if !errors.As(err, &f) || f.Describe() != tt.want {
					t.Fatalf("err = %v, want %q", err, tt.want)
				}
				if len(a.starts) != 1+ConnectRetries {
					t.Fatalf("%d attempts, want %d", len(a.starts), 1+ConnectRetries)
				}
				if d := time.Since(start); d > ConnectRetryWindow {
					t.Fatalf("gave up after %v, want within %v", d, ConnectRetryWindow)
				}
				for i, in := range infos {
					if in.Attempt != i+2 || in.MaxAttempts != 3 || in.Message != tt.want {
						t.Errorf("retry notice %d = %+v", i, in)
					}
				}
			})
		})
	}
}

// The 5 s window bounds the retries of a refused connection even when the
// backoff would allow a second one later; another failure after a
// refusal keeps its own attempts.
func TestConnectRetryWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &attemptLog{fail: func() error { return Classify(refused("127.0.0.1:9")) }}
		_, err := StreamStep(t.Context(), a, Request{}, StepOptions{RetryBase: 2 * time.Second, Jitter: func() float64 { return 0 }}, discard)
		if err == nil || len(a.starts) != 2 {
			t.Fatalf("err %v after %d attempts; want a failure after 2 (2 s + 4 s is beyond the window)", err, len(a.starts))
		}

		n := 0
		b := &attemptLog{fail: func() error {
			n++
			if n == 1 {
				return Classify(refused("127.0.0.1:9"))
			}
			return &Failure{Kind: FailureProviderUnavailable, Status: 503}
		}}
		_, _ = StreamStep(t.Context(), b, Request{}, StepOptions{MaxAttempts: 6}, discard)
		if len(b.starts) != 6 {
			t.Fatalf("%d attempts after a refusal then 503s, want 6", len(b.starts))
		}
	})
}

// An HTTP failure names its status and the start of the body, scrubbed
// of credentials and cut at 200 bytes.
func TestHTTPFailureDescribesStatusAndBody(t *testing.T) {
	body := "upstream exploded; key=sk-abcdefghijklmnop " + strings.Repeat("x", 400)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	p, err := New(Config{ProviderType: "openai-compatible", BaseURL: srv.URL + "/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Stream(context.Background(), Request{Model: "m", Messages: []Message{{Role: RoleUser, Text: "hi"}}}, discard)
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("err = %v", err)
	}
	d := f.Describe()
	if !strings.HasPrefix(d, "HTTP 500 Internal Server Error: upstream exploded; key=[redacted] xxx") || strings.Contains(d, "sk-abc") {
		t.Fatalf("Describe = %q", d)
	}
	if len(f.Body) > MaxFailureBody || !strings.HasSuffix(f.Body, "…") {
		t.Fatalf("body excerpt of %d bytes: %q", len(f.Body), f.Body)
	}
}

// A base URL nothing listens on is described as such by a real provider.
func TestRefusedEndpointNamesTheBaseURL(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	base := "http://" + addr + "/v1"
	p, err := New(Config{ProviderType: "openai-compatible", BaseURL: base, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Stream(context.Background(), Request{Model: "m", Messages: []Message{{Role: RoleUser, Text: "hi"}}}, discard)
	var f *Failure
	if !errors.As(err, &f) || f.Conn != ConnRefused || f.Describe() != "connection refused at "+base || !f.Retryable() {
		t.Fatalf("err = %v (%+v)", err, f)
	}
}

func TestFormatDelay(t *testing.T) {
	for d, want := range map[time.Duration]string{
		20 * time.Millisecond: "20 ms", time.Second: "1 s", 1250 * time.Millisecond: "1.3 s",
		4 * time.Second: "4 s", 4100 * time.Millisecond: "4.1 s", 32 * time.Second: "32 s", 19999 * time.Millisecond: "20 s",
	} {
		if got := FormatDelay(d); got != want {
			t.Errorf("FormatDelay(%v) = %q, want %q", d, got, want)
		}
	}
}

// A TLS failure names the base URL and the certificate problem, and is
// not retried (another attempt meets the same certificate).
func TestTLSFailureNamesTheBaseURL(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	base := srv.URL + "/v1"
	p, err := New(Config{ProviderType: "openai-compatible", BaseURL: base, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Stream(context.Background(), Request{Model: "m", Messages: []Message{{Role: RoleUser, Text: "hi"}}}, discard)
	var f *Failure
	if !errors.As(err, &f) || f.Conn != ConnTLS || f.Retryable() ||
		!strings.HasPrefix(f.Describe(), "TLS failure at "+base+": tls: failed to verify certificate: x509: ") {
		t.Fatalf("err = %v (%+v)", err, f)
	}
}
