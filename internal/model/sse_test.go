package model

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// wireServer is an httptest server that records every request and answers
// with the handler of the attempt (the last handler answers the rest).
type wireServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []wireRequest
	release  chan struct{} // closed at cleanup: unblocks stalled handlers
}

type wireRequest struct {
	Path   string
	Header http.Header
	Body   []byte
}

type wireHandler func(w http.ResponseWriter, r *http.Request, release <-chan struct{})

func newWireServer(t *testing.T, handlers ...wireHandler) *wireServer {
	t.Helper()
	s := &wireServer{release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.requests)
		s.requests = append(s.requests, wireRequest{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		s.mu.Unlock()
		h := handlers[min(n, len(handlers)-1)]
		h(w, r, s.release)
	}))
	t.Cleanup(s.Server.Close)
	t.Cleanup(func() { close(s.release) }) // runs before Close
	return s
}

func (s *wireServer) calls() []wireRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]wireRequest(nil), s.requests...)
}

// sse answers with the given events as a flushed text/event-stream; with
// stall set it then keeps the stream open until the client goes away.
func sse(events []string, stall bool) wireHandler {
	return func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		fl := w.(http.Flusher)
		for _, e := range events {
			if _, err := io.WriteString(w, e); err != nil {
				return
			}
			fl.Flush()
		}
		if stall {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}
}

// httpError answers with a JSON error body.
func httpError(status int, header http.Header, body string) wireHandler {
	return func(w http.ResponseWriter, _ *http.Request, _ <-chan struct{}) {
		for k, v := range header {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// dataLines renders OpenAI-style "data:" events.
func dataLines(payloads ...string) []string {
	out := make([]string, len(payloads))
	for i, p := range payloads {
		out[i] = "data: " + p + "\n\n"
	}
	return out
}

// namedEvents renders Anthropic-style "event:" + "data:" pairs given as
// name, payload, name, payload, ...
func namedEvents(pairs ...string) []string {
	var out []string
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, "event: "+pairs[i]+"\ndata: "+pairs[i+1]+"\n\n")
	}
	return out
}

// collect returns an emit func that appends to events the output ones
// (EventAlive only feeds the watchdog).
func collect(events *[]Event) func(Event) error {
	return func(e Event) error {
		if e.Kind != EventAlive {
			*events = append(*events, e)
		}
		return nil
	}
}

// jsonEqual compares a JSON document with a Go value via re-encoding.
func jsonEqual(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: invalid JSON %s: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad expectation: %v", what, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Fatalf("%s:\n got %s\nwant %s", what, gb, wb)
	}
}

// field extracts a JSON sub-document of body by a dotted path.
func field(t *testing.T, body []byte, path string) json.RawMessage {
	t.Helper()
	cur := json.RawMessage(body)
	for _, part := range strings.Split(path, ".") {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(cur, &m); err != nil {
			var a []json.RawMessage
			if err2 := json.Unmarshal(cur, &a); err2 != nil {
				t.Fatalf("path %s: %s is neither object nor array", path, cur)
			}
			var idx int
			if err := json.Unmarshal([]byte(part), &idx); err != nil || idx >= len(a) {
				t.Fatalf("path %s: bad index %q (len %d)", path, part, len(a))
			}
			cur = a[idx]
			continue
		}
		v, ok := m[part]
		if !ok {
			t.Fatalf("path %s: no %q in %s", path, part, cur)
		}
		cur = v
	}
	return cur
}

// wantStep checks the events and finish of one step, and that it sent
// exactly one request, which it returns.
func wantStep(t *testing.T, srv *wireServer, events, want []Event, fin, wantFin Finish) wireRequest {
	t.Helper()
	if !reflect.DeepEqual(events, want) {
		t.Fatalf("events:\n got %+v\nwant %+v", events, want)
	}
	if !reflect.DeepEqual(fin, wantFin) {
		t.Fatalf("finish = %+v %+v, want %+v %+v", fin, fin.Usage, wantFin, wantFin.Usage)
	}
	calls := srv.calls()
	if len(calls) != 1 {
		t.Fatalf("%d requests, want 1", len(calls))
	}
	return calls[0]
}
