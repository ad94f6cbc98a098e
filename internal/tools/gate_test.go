package tools

import (
	"encoding/json"
	"sync"
	"testing"
)

func TestLoopGate(t *testing.T) {
	a := json.RawMessage(`{"path":"x","limit":5}`)
	aReordered := json.RawMessage(` { "limit" : 5, "path" : "x" } `)
	b := json.RawMessage(`{"path":"y"}`)
	type step struct {
		name    string
		args    json.RawMessage
		failed  bool
		blocked bool // expected Blocked before the call
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"third identical failure is blocked", []step{
			{"Read", a, true, false}, {"Read", aReordered, true, false}, {"Read", a, true, true},
		}},
		{"success resets", []step{
			{"Read", a, true, false}, {"Read", a, false, false}, {"Read", a, true, false}, {"Read", a, true, false}, {"Read", a, true, true},
		}},
		{"different call resets", []step{
			{"Read", a, true, false}, {"Read", b, true, false}, {"Read", a, true, false}, {"Read", a, true, false}, {"Read", b, true, false},
		}},
		{"different tool same args", []step{
			{"Read", a, true, false}, {"Grep", a, true, false}, {"Read", a, true, false},
		}},
		{"empty args equal {}", []step{
			{"Bash", nil, true, false}, {"Bash", json.RawMessage(`{}`), true, false}, {"Bash", json.RawMessage(` `), true, true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g LoopGate
			for i, s := range tt.steps {
				if got := g.Blocked(s.name, s.args); got != s.blocked {
					t.Fatalf("step %d: Blocked = %v, want %v", i, got, s.blocked)
				}
				if !s.blocked {
					g.Record(s.name, s.args, s.failed)
				}
			}
		})
	}
}

func TestLoopGateConcurrent(t *testing.T) {
	var g LoopGate
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 100; k++ {
				g.Record("Bash", json.RawMessage(`{"command":"false"}`), true)
				g.Blocked("Bash", json.RawMessage(`{"command":"false"}`))
			}
		}()
	}
	wg.Wait()
	if !g.Blocked("Bash", json.RawMessage(`{"command":"false"}`)) {
		t.Error("not blocked after many identical failures")
	}
}

func TestCanonicalJSON(t *testing.T) {
	tests := map[string]string{
		`{"b":1,"a":{"d":[1,2],"c":"<x>"}}`: `{"a":{"c":"<x>","d":[1,2]},"b":1}`,
		` [ 1.50 , 2 ] `:                    `[1.50,2]`,
		`{"a":1} {"b":2}`:                   `{"a":1} {"b":2}`,
		`not json`:                          `not json`,
	}
	for in, want := range tests {
		if got := string(CanonicalJSON(json.RawMessage(in))); got != want {
			t.Errorf("CanonicalJSON(%s) = %s, want %s", in, got, want)
		}
	}
}
