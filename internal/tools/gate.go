package tools

import (
	"bytes"
	"encoding/json"
	"sync"
)

// LoopGateThreshold is the position of the identical failing call that is
// blocked: after two consecutive identical failures the third is refused.
const LoopGateThreshold = 3

// LoopGate refuses a call that repeats, with the same tool and arguments,
// a call that failed the last LoopGateThreshold-1 consecutive times. Any
// success or any different call resets it. One gate serves one turn; it is
// safe for concurrent use.
type LoopGate struct {
	mu       sync.Mutex
	last     string
	failures int
}

// Blocked reports whether a call of name with args must be refused.
func (g *LoopGate) Blocked(name string, args json.RawMessage) bool {
	key := callKey(name, args)
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last == key && g.failures >= LoopGateThreshold-1
}

// Record notes the outcome of a call that ran.
func (g *LoopGate) Record(name string, args json.RawMessage, failed bool) {
	key := callKey(name, args)
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case !failed:
		g.last, g.failures = "", 0
	case key == g.last:
		g.failures++
	default:
		g.last, g.failures = key, 1
	}
}

// callKey identifies a call: the tool name and the canonical arguments
// (absent arguments count as {}).
func callKey(name string, args json.RawMessage) string {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	return name + "\x00" + string(CanonicalJSON(args))
}

// CanonicalJSON re-encodes a JSON value with object keys sorted and
// insignificant whitespace removed (numbers keep their text). Invalid JSON
// is returned compacted where possible, else as is.
func CanonicalJSON(raw json.RawMessage) []byte {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		var buf bytes.Buffer
		if json.Compact(&buf, raw) == nil {
			return buf.Bytes()
		}
		return raw
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return raw
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
