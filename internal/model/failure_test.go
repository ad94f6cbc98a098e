package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	openai "github.com/openai/openai-go/v3"
	oaistream "github.com/openai/openai-go/v3/packages/ssestream"
)

func openAIErr(t *testing.T, status int, header http.Header, errorObject string) error {
	t.Helper()
	e := &openai.Error{StatusCode: status, Response: &http.Response{StatusCode: status, Header: header}}
	if errorObject != "" {
		if err := e.UnmarshalJSON([]byte(errorObject)); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func anthropicErr(t *testing.T, status int, header http.Header, body string) error {
	t.Helper()
	e := &anthropic.Error{StatusCode: status, Response: &http.Response{StatusCode: status, Header: header}}
	if err := e.UnmarshalJSON([]byte(body)); err != nil {
		t.Fatal(err)
	}
	return e
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestClassify(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	type want struct {
		kind       FailureKind
		status     int
		code       string
		retryAfter time.Duration
		raSet      bool
		raInvalid  bool
		retryable  bool
	}
	tests := []struct {
		name string
		err  error
		want want
	}{
		{"canceled", context.Canceled, want{kind: FailureAbort}},
		{"canceled inside url.Error", &url.Error{Op: "Post", URL: "http://x", Err: context.Canceled}, want{kind: FailureAbort}},
		{"deadline", fmt.Errorf("stream: %w", context.DeadlineExceeded), want{kind: FailureTimeout, retryable: true}},
		{"dial refused", &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, want{kind: FailureNetwork, retryable: true}},
		{"unexpected EOF", fmt.Errorf("read body: %w", io.ErrUnexpectedEOF), want{kind: FailureNetwork, retryable: true}},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), want{kind: FailureNetwork, retryable: true}},
		{"words: overloaded", errors.New("upstream overloaded, try later"), want{kind: FailureProviderUnavailable}},
		{"words: rate limit", errors.New("Rate limit reached for requests"), want{kind: FailureRateLimit}},
		{"unknown", errors.New("weird"), want{kind: FailureUnknown}},
		{"openai 402", openAIErr(t, 402, nil, `{"message":"pay up","type":"billing"}`), want{kind: FailureProviderBilling, status: 402, code: "billing"}},
		{"openai insufficient_quota", openAIErr(t, 429, nil, `{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}`), want{kind: FailureProviderBilling, status: 429, code: "insufficient_quota", retryable: true}},
		{"openai 429 retry-after seconds", openAIErr(t, 429, hdr("Retry-After", "2"), `{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}`), want{kind: FailureRateLimit, status: 429, code: "rate_limit_exceeded", retryAfter: 2 * time.Second, raSet: true, retryable: true}},
		{"openai 429 retry-after date", openAIErr(t, 429, hdr("Retry-After", now.Add(10*time.Second).Format(http.TimeFormat)), `{"message":"slow down"}`), want{kind: FailureRateLimit, status: 429, retryAfter: 10 * time.Second, raSet: true, retryable: true}},
		{"openai 429 retry-after garbage", openAIErr(t, 429, hdr("Retry-After", "soon"), `{"message":"slow down"}`), want{kind: FailureRateLimit, status: 429, raInvalid: true}},
		{"openai 503 retry-after-ms", openAIErr(t, 503, hdr("Retry-After-Ms", "1500"), ``), want{kind: FailureProviderUnavailable, status: 503, retryAfter: 1500 * time.Millisecond, raSet: true, retryable: true}},
		{"openai 401", openAIErr(t, 401, nil, `{"message":"Incorrect API key provided","code":"invalid_api_key"}`), want{kind: FailureAuth, status: 401, code: "invalid_api_key"}},
		{"openai 403", openAIErr(t, 403, nil, `{"message":"no access"}`), want{kind: FailureAuth, status: 403}},
		{"openai 413", openAIErr(t, 413, nil, ``), want{kind: FailureContextOverflow, status: 413}},
		{"openai context_length_exceeded", openAIErr(t, 400, nil, `{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}`), want{kind: FailureContextOverflow, status: 400, code: "context_length_exceeded"}},
		{"openai 400 other", openAIErr(t, 400, nil, `{"message":"bad temperature","type":"invalid_request_error"}`), want{kind: FailureUnknown, status: 400, code: "invalid_request_error"}},
		{"openai 409", openAIErr(t, 409, nil, `{"message":"conflict"}`), want{kind: FailureUnknown, status: 409, retryable: true}},
		{"openai numeric code", openAIErr(t, 0, nil, `{"message":"upstream","code":502}`), want{kind: FailureProviderUnavailable, status: 502, retryable: true}},
		{"anthropic 529", anthropicErr(t, 529, nil, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), want{kind: FailureProviderUnavailable, status: 529, code: "overloaded_error", retryable: true}},
		{"anthropic in-stream overloaded", anthropicErr(t, 200, nil, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), want{kind: FailureProviderUnavailable, status: 529, code: "overloaded_error", retryable: true}},
		{"anthropic in-stream rate limit", anthropicErr(t, 200, nil, `{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}`), want{kind: FailureRateLimit, status: 429, code: "rate_limit_error", retryable: true}},
		{"anthropic prompt too long", anthropicErr(t, 400, nil, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`), want{kind: FailureContextOverflow, status: 400, code: "invalid_request_error"}},
		{"anthropic 402 before 429 words", anthropicErr(t, 402, hdr("Retry-After", "3"), `{"type":"error","error":{"type":"billing_error","message":"rate limit of credit"}}`), want{kind: FailureProviderBilling, status: 402, code: "billing_error", retryAfter: 3 * time.Second, raSet: true}},
		{"openai stream error", &oaistream.StreamError{Message: "received error while streaming", Event: oaistream.Event{Data: []byte(`{"error":{"message":"The server had an error","type":"server_error"}}`)}}, want{kind: FailureProviderUnavailable, status: 500, code: "server_error", retryable: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := classifyAt(tt.err, now)
			got := want{f.Kind, f.Status, f.Code, f.RetryAfter, f.RetryAfterSet, f.RetryAfterInvalid, f.Retryable()}
			if got != tt.want {
				t.Fatalf("classify(%v)\n got %+v\nwant %+v", tt.err, got, tt.want)
			}
			if f.Message == "" {
				t.Fatal("empty message")
			}
		})
	}
}

func TestClassifyPassesFailuresThrough(t *testing.T) {
	if Classify(nil) != nil {
		t.Fatal("Classify(nil) != nil")
	}
	f := &Failure{Kind: FailureRateLimit, Status: 429}
	if got := Classify(fmt.Errorf("step: %w", f)); got != f {
		t.Fatalf("got %v, want the wrapped *Failure itself", got)
	}
}

func TestRetryable(t *testing.T) {
	tests := []struct {
		f    Failure
		want bool
	}{
		{Failure{Kind: FailureNetwork}, true},
		{Failure{Kind: FailureTimeout}, true},
		{Failure{Kind: FailureUnknown, Status: 408}, true},
		{Failure{Kind: FailureUnknown, Status: 409}, true},
		{Failure{Kind: FailureRateLimit, Status: 429}, true},
		{Failure{Kind: FailureProviderUnavailable, Status: 500}, true},
		{Failure{Kind: FailureProviderUnavailable, Status: 599}, true},
		{Failure{Kind: FailureRateLimit, Status: 429, RetryAfterInvalid: true}, false},
		{Failure{Kind: FailureNetwork, RetryAfterInvalid: true}, false},
		{Failure{Kind: FailureAuth, Status: 401}, false},
		{Failure{Kind: FailureContextOverflow, Status: 400}, false},
		{Failure{Kind: FailureAbort}, false},
		{Failure{Kind: FailureUnknown}, false},
	}
	for _, tt := range tests {
		if got := tt.f.Retryable(); got != tt.want {
			t.Errorf("%+v.Retryable() = %v, want %v", tt.f, got, tt.want)
		}
	}
}

func TestFailureError(t *testing.T) {
	f := &Failure{Kind: FailureRateLimit, Status: 429, Code: "rate_limit_error", Message: "slow down"}
	if got, want := f.Error(), "model rate_limit (HTTP 429, rate_limit_error): slow down"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got, want := (&Failure{Kind: FailureNetwork}).Error(), "model network"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestScrubMessage(t *testing.T) {
	secrets := []string{
		"Incorrect API key provided: sk-proj-abcdefghijklmnop1234. You can find your key",
		"header Authorization: Bearer abcdefghijklmnopqrstuvwxyz was rejected",
		`bad request {"api_key": "hunter2hunter2"}`,
		"GET https://example.com/v1/models?key=AIzaSyA-1234567890abcdefghijk failed",
		"x-api-key=sk-ant-api03-zzzzzzzzzzzz invalid",
	}
	for _, s := range secrets {
		got := scrubMessage(s)
		for _, leak := range []string{"abcdefghijklmnop1234", "abcdefghijklmnopqrstuvwxyz", "hunter2hunter2", "1234567890abcdefghijk", "zzzzzzzzzzzz"} {
			if strings.Contains(got, leak) {
				t.Errorf("scrubMessage(%q) = %q leaks %q", s, got, leak)
			}
		}
		if !strings.Contains(got, "[redacted]") {
			t.Errorf("scrubMessage(%q) = %q, want a redaction marker", s, got)
		}
	}
	if got := scrubMessage("plain\nmessage\x00 here"); got != "plain message here" {
		t.Errorf("control characters: %q", got)
	}
	long := strings.Repeat("é", 2000)
	got := scrubMessage(long)
	if len(got) > maxFailureMessage || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Errorf("long message: %d bytes, valid=%v", len(got), utf8.ValidString(got))
	}
}
