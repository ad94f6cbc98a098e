package model

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	openai "github.com/openai/openai-go/v3"
	oaistream "github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/maka-agent/maka/protocol"
)

// FailureKind classifies why a model request failed.
type FailureKind string

// Failure kinds.
const (
	FailureAbort               FailureKind = "abort"
	FailureAuth                FailureKind = "auth"
	FailureContextOverflow     FailureKind = "context_overflow"
	FailureNetwork             FailureKind = "network"
	FailureProviderBilling     FailureKind = "provider_billing"
	FailureProviderUnavailable FailureKind = "provider_unavailable"
	FailureRateLimit           FailureKind = "rate_limit"
	FailureTimeout             FailureKind = "timeout"
	FailureUnknown             FailureKind = "unknown"
)

// Valid reports whether k is one of the known kinds.
func (k FailureKind) Valid() bool {
	switch k {
	case FailureAbort, FailureAuth, FailureContextOverflow, FailureNetwork,
		FailureProviderBilling, FailureProviderUnavailable, FailureRateLimit,
		FailureTimeout, FailureUnknown:
		return true
	}
	return false
}

// maxFailureMessage bounds Failure.Message in bytes.
const maxFailureMessage = 1024

// MaxFailureBody bounds Failure.Body in bytes.
const MaxFailureBody = 200

// ConnFailure says how a request failed to reach its endpoint.
type ConnFailure string

// Connection failures.
const (
	ConnRefused ConnFailure = "connection_refused"
	ConnDNS     ConnFailure = "dns"
	ConnTLS     ConnFailure = "tls"
	ConnTimeout ConnFailure = "connect_timeout"
)

// Failure is a classified failure of a model request.
type Failure struct {
	Kind FailureKind
	// Status is the HTTP status of the failed response, or 0. For an error
	// reported inside a stream that already answered 200, it is the status
	// the provider documents for that error type (529 for Anthropic's
	// overloaded_error, 429 for rate_limit_error, ...), or 0 when none.
	Status int
	// Code is the provider's machine-readable error code or type, if any.
	Code string
	// Message is human-readable, scrubbed of credentials and at most 1024
	// bytes long.
	Message string
	// RetryAfter is the provider's requested delay before a retry; it is
	// meaningful only when RetryAfterSet.
	RetryAfter    time.Duration
	RetryAfterSet bool
	// RetryAfterInvalid records a Retry-After header that could not be
	// parsed; such a failure is not retryable.
	RetryAfterInvalid bool
	// Body is the start of the error response's body (at most
	// MaxFailureBody bytes, scrubbed like Message, on one line), or "".
	Body string
	// Conn is set when the request never reached the endpoint: refused,
	// no such host, a TLS failure, a connect timeout.
	Conn ConnFailure
	// Hint, when set, is added to Describe in parentheses (why a
	// retriable failure was not retried).
	Hint string
}

// Describe says what happened, for people: "HTTP 500 Internal Server
// Error: <body>", "connection refused at <base URL>", "no event from the
// model within 30s", ...
func (f *Failure) Describe() string {
	var s string
	if f.Status != 0 {
		text := http.StatusText(f.Status)
		s = "HTTP " + strconv.Itoa(f.Status)
		if text != "" {
			s += " " + text
		}
		switch {
		case f.Body != "":
			s += ": " + f.Body
		case f.Message != "" && f.Message != text:
			s += ": " + f.Message
		}
	} else {
		s = f.Message
		if s == "" {
			s = string(f.Kind)
		}
	}
	if f.Hint != "" {
		s += " (" + f.Hint + ")"
	}
	return s
}

// Error implements error: "model <kind> (HTTP <status>, <code>): <message>".
func (f *Failure) Error() string {
	var b strings.Builder
	b.WriteString("model ")
	b.WriteString(string(f.Kind))
	var detail []string
	if f.Status != 0 {
		detail = append(detail, "HTTP "+strconv.Itoa(f.Status))
	}
	if f.Code != "" {
		detail = append(detail, f.Code)
	}
	if len(detail) > 0 {
		b.WriteString(" (" + strings.Join(detail, ", ") + ")")
	}
	if f.Message != "" {
		b.WriteString(": ")
		b.WriteString(f.Message)
	}
	return b.String()
}

// Retryable reports whether another attempt may succeed: a network or
// watchdog timeout failure, or HTTP 408, 409, 429 or 5xx; never when the
// provider sent a Retry-After that could not be parsed.
func (f *Failure) Retryable() bool {
	if f.RetryAfterInvalid {
		return false
	}
	switch f.Kind {
	case FailureNetwork, FailureTimeout:
		return true
	}
	switch {
	case f.Status == http.StatusRequestTimeout, f.Status == http.StatusConflict,
		f.Status == http.StatusTooManyRequests, f.Status >= 500 && f.Status <= 599:
		return true
	}
	return false
}

// errorDetail is what Classify extracts from an error before deciding.
type errorDetail struct {
	status  int
	code    string
	message string
	header  http.Header
	body    string
}

// Classify turns any error of a model request into a *Failure. A *Failure
// (anywhere in err's chain) is returned as is; nil yields nil.
//
// Precedence: cancellation → abort; HTTP 402 or a quota/billing code →
// provider_billing; 429 → rate_limit; 401/403 → auth; 413 or an overflow
// code or text → context_overflow; 5xx → provider_unavailable; a deadline
// → timeout; network errors → network; then words in the message; else
// unknown. It understands the error types of the OpenAI and Anthropic SDKs
// (status, code, message and the Retry-After headers of the response).
func Classify(err error) *Failure {
	return classifyAt(err, time.Now())
}

func classifyAt(err error, now time.Time) *Failure {
	if err == nil {
		return nil
	}
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	d := extractDetail(err)
	out := &Failure{
		Status:  d.status,
		Code:    d.code,
		Message: scrubMessage(d.message),
		Body:    bodyExcerpt(d.body),
		Conn:    connFailure(err),
	}
	if d.header != nil {
		out.RetryAfter, out.RetryAfterSet, out.RetryAfterInvalid = parseRetryAfter(d.header, now)
	}
	out.Kind = decideKind(err, d)
	if out.Message == "" {
		out.Message = defaultMessage(out.Kind, out.Status)
	}
	return out
}

func decideKind(err error, d errorDetail) FailureKind {
	low := strings.ToLower(d.message)
	code := strings.ToLower(d.code)
	switch {
	case errors.Is(err, context.Canceled):
		return FailureAbort
	case d.status == http.StatusPaymentRequired || isBillingCode(code):
		return FailureProviderBilling
	case d.status == http.StatusTooManyRequests:
		return FailureRateLimit
	case d.status == http.StatusUnauthorized || d.status == http.StatusForbidden:
		return FailureAuth
	case d.status == http.StatusRequestEntityTooLarge || isOverflowCode(code) || isOverflowText(low):
		return FailureContextOverflow
	case d.status >= 500 && d.status <= 599:
		return FailureProviderUnavailable
	case isDeadline(err):
		return FailureTimeout
	case isNetwork(err):
		return FailureNetwork
	}
	if k := kindFromWords(low); k != "" {
		return k
	}
	return FailureUnknown
}

func extractDetail(err error) errorDetail {
	var d errorDetail
	var oe *openai.Error
	var ae *anthropic.Error
	var se *oaistream.StreamError
	switch {
	case errors.As(err, &oe):
		d.status = oe.StatusCode
		d.code, d.message = firstNonEmpty(oe.Code, oe.Type), oe.Message
		if raw := oe.RawJSON(); raw != "" {
			// The raw object also carries numeric codes the SDK coerces.
			if c, m, s, ok := parseErrorObject([]byte(raw)); ok {
				d.code, d.message = c, firstNonEmpty(m, d.message)
				if d.status == 0 {
					d.status = s
				}
			}
		}
		if oe.Response != nil {
			d.header = oe.Response.Header
			d.body = readBody(oe.Response)
		}
	case errors.As(err, &ae):
		d.status = ae.StatusCode
		d.code = string(ae.Type())
		d.message = ae.Message
		if ae.Response != nil {
			d.header = ae.Response.Header
			d.body = readBody(ae.Response)
		}
		if d.status < 300 {
			// An error event inside a stream that already answered 200.
			d.status = anthropicTypeStatus[d.code]
			d.header, d.body = nil, ""
		}
	case errors.As(err, &se):
		// {"error": {...}} inside an OpenAI-style stream.
		code, msg, status, _ := parseErrorEnvelope(se.Event.Data)
		d.code, d.message, d.status = code, msg, status
		if d.status == 0 {
			d.status = openAITypeStatus[strings.ToLower(code)]
		}
		if d.message == "" {
			d.message = se.Message
		}
	default:
		d.message = err.Error()
	}
	if d.message == "" && d.status != 0 {
		d.message = http.StatusText(d.status)
	}
	return d
}

// anthropicTypeStatus maps Anthropic error types to the HTTP status the
// Messages API documents for them.
var anthropicTypeStatus = map[string]int{
	"invalid_request_error": 400,
	"authentication_error":  401,
	"billing_error":         402,
	"permission_error":      403,
	"not_found_error":       404,
	"request_too_large":     413,
	"rate_limit_error":      429,
	"api_error":             500,
	"timeout_error":         504,
	"overloaded_error":      529,
}

// openAITypeStatus maps error types/codes seen inside OpenAI-style streams to
// an HTTP status.
var openAITypeStatus = map[string]int{
	"server_error":          500,
	"rate_limit_exceeded":   429,
	"rate_limit_error":      429,
	"overloaded_error":      529,
	"api_error":             500,
	"authentication_error":  401,
	"invalid_api_key":       401,
	"permission_error":      403,
	"invalid_request_error": 400,
}

// parseErrorEnvelope reads {"error": {...}} (or a bare error object).
func parseErrorEnvelope(b []byte) (code, message string, status int, ok bool) {
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &env) == nil && len(env.Error) > 0 {
		var s string
		if json.Unmarshal(env.Error, &s) == nil {
			return "", s, 0, true
		}
		return parseErrorObject(env.Error)
	}
	return parseErrorObject(b)
}

// parseErrorObject reads {"message","type","code","status"}; code may be a
// string or a number (a number that looks like an HTTP status is returned
// as the status). The code falls back to the type.
func parseErrorObject(b []byte) (code, message string, status int, ok bool) {
	var obj struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		Status  json.RawMessage `json:"status"`
	}
	if len(b) == 0 || json.Unmarshal(b, &obj) != nil {
		return "", "", 0, false
	}
	message = obj.Message
	var s string
	var n int
	switch {
	case json.Unmarshal(obj.Code, &s) == nil && s != "":
		code = s
	case json.Unmarshal(obj.Code, &n) == nil:
		if n >= 400 && n <= 599 {
			status = n
		}
	}
	if status == 0 && json.Unmarshal(obj.Status, &n) == nil && n >= 400 && n <= 599 {
		status = n
	}
	code = firstNonEmpty(code, obj.Type)
	return code, message, status, true
}

// parseRetryAfter reads retry-after-ms (milliseconds) or Retry-After
// (seconds or an HTTP-date).
func parseRetryAfter(h http.Header, now time.Time) (d time.Duration, set, invalid bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		ms, err := strconv.ParseFloat(v, 64)
		if err != nil || ms < 0 || ms > float64(365*24*time.Hour/time.Millisecond) {
			return 0, false, true
		}
		return time.Duration(ms * float64(time.Millisecond)), true, false
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false, false
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs < 0 || secs > float64(365*24*time.Hour/time.Second) {
			return 0, false, true
		}
		return time.Duration(secs * float64(time.Second)), true, false
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false, true
	}
	d = t.Sub(now)
	if d < 0 {
		d = 0
	}
	return d, true, false
}

// maxBodyRead bounds what is read of an error body for its excerpt: the
// excerpt is scrubbed before it is cut, so that a credential across the
// cut is still found.
const maxBodyRead = 4096

// readBody returns the start of an error response's body (the SDKs keep
// it in memory) and puts it back.
func readBody(res *http.Response) string {
	if res == nil || res.Body == nil || res.StatusCode < 300 {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(res.Body, maxBodyRead))
	rest := res.Body
	res.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), rest), rest}
	return string(b)
}

// bodyExcerpt is the scrubbed first MaxFailureBody bytes of body.
func bodyExcerpt(body string) string {
	s := scrubMessage(body)
	if len(s) > MaxFailureBody {
		s = protocol.TruncateUTF8(s, MaxFailureBody-len("…")) + "…"
	}
	return s
}

// connFailure says whether err is a failure to reach the endpoint.
func connFailure(err error) ConnFailure {
	var (
		dns   *net.DNSError
		op    *net.OpError
		cert  *tls.CertificateVerificationError
		rec   tls.RecordHeaderError
		alert tls.AlertError
		unk   x509.UnknownAuthorityError
		host  x509.HostnameError
		inv   x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &dns):
		return ConnDNS
	case errors.Is(err, syscall.ECONNREFUSED):
		return ConnRefused
	case errors.As(err, &cert), errors.As(err, &rec), errors.As(err, &alert), errors.As(err, &unk),
		errors.As(err, &host), errors.As(err, &inv):
		return ConnTLS
	case errors.As(err, &op) && op.Op == "dial" && op.Timeout():
		return ConnTimeout
	}
	return ""
}

// AtEndpoint rewrites the message of a failure to reach base (Conn set)
// to name the endpoint: "connection refused at http://127.0.0.1:9/v1",
// "no such host at https://api.example.invalid/v1 (DNS lookup of
// api.example.invalid)", "TLS failure at https://…: x509: …", "connect
// timeout at …". Any other error is returned unchanged.
func AtEndpoint(err error, base string) error {
	var f *Failure
	if !errors.As(err, &f) || f.Conn == "" {
		return err
	}
	g := *f
	base = scrubMessage(base)
	switch f.Conn {
	case ConnRefused:
		g.Message = "connection refused at " + base
	case ConnDNS:
		what := "DNS lookup failed"
		if strings.Contains(f.Message, "no such host") {
			what = "no such host"
		}
		g.Message = what + " at " + base
		if u, perr := url.Parse(base); perr == nil && u.Hostname() != "" {
			g.Message += " (DNS lookup of " + u.Hostname() + ")"
		}
	case ConnTLS:
		msg := f.Message
		if i := strings.Index(msg, "tls: "); i >= 0 {
			msg = msg[i:]
		} else if i := strings.Index(msg, "x509: "); i >= 0 {
			msg = msg[i:]
		}
		g.Message = scrubMessage("TLS failure at " + base + ": " + msg)
	case ConnTimeout:
		g.Message = "connect timeout at " + base
	}
	return &g
}

func isBillingCode(code string) bool {
	switch code {
	case "insufficient_quota", "billing_error", "billing_hard_limit_reached", "payment_required":
		return true
	}
	return false
}

func isOverflowCode(code string) bool {
	switch code {
	case "context_length_exceeded", "request_too_large", "string_above_max_length",
		"model_context_window_exceeded", "context_window_exceeded":
		return true
	}
	return false
}

var overflowTexts = []string{
	"context_length_exceeded",
	"prompt is too long",
	"maximum context length",
	"context length exceeded",
	"context window",
	"exceeds the context",
	"too many tokens",
	"input is too long",
	"request too large",
}

func isOverflowText(low string) bool {
	for _, s := range overflowTexts {
		if strings.Contains(low, s) {
			return true
		}
	}
	return false
}

func isDeadline(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isNetwork(err error) bool {
	var (
		op  *net.OpError
		dns *net.DNSError
	)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed),
		errors.As(err, &op), errors.As(err, &dns):
		return true
	}
	low := strings.ToLower(err.Error())
	return strings.Contains(low, "connection reset") || strings.Contains(low, "broken pipe") ||
		strings.Contains(low, "connection refused") || strings.Contains(low, "unexpected eof")
}

var wordKinds = []struct {
	kind  FailureKind
	words []string
}{
	{FailureProviderBilling, []string{"insufficient credit", "insufficient balance", "insufficient_quota", "billing", "payment required", "quota exceeded", "exceeded your current quota"}},
	{FailureRateLimit, []string{"rate limit", "rate_limit", "too many requests", "ratelimit"}},
	{FailureAuth, []string{"unauthorized", "invalid api key", "invalid_api_key", "incorrect api key", "authentication", "forbidden", "permission denied"}},
	{FailureProviderUnavailable, []string{"overloaded", "service unavailable", "bad gateway", "internal server error", "server error", "temporarily unavailable"}},
	{FailureTimeout, []string{"timed out", "timeout", "deadline exceeded"}},
	{FailureNetwork, []string{"connection reset", "connection refused", "connection closed", "broken pipe", "network", "unexpected eof", "econnreset"}},
}

func kindFromWords(low string) FailureKind {
	for _, wk := range wordKinds {
		for _, w := range wk.words {
			if strings.Contains(low, w) {
				return wk.kind
			}
		}
	}
	return ""
}

func defaultMessage(k FailureKind, status int) string {
	if status != 0 {
		if t := http.StatusText(status); t != "" {
			return t
		}
		return fmt.Sprintf("HTTP %d", status)
	}
	return string(k)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
