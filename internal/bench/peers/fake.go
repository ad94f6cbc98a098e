package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/maka-agent/maka/internal/modeltest"
)

// The prompts the benchmark sends. The fake model recognises the shell
// scenario by its marker; every other request gets the short answer.
const (
	trivialPrompt = "Reply with the single word ok."
	shellMarker   = "[bench:shell]"
	shellPrompt   = shellMarker + " Run the shell command `echo bench-shell-ok` and tell me what it printed."
	shellCommand  = "echo bench-shell-ok"
	shellOutput   = "bench-shell-ok"
)

// shellTools are the names of the shell tools the fake model knows, the
// first offered one wins: Codex's exec_command / shell_command / shell,
// Claude Code's and maka's Bash, opencode's bash.
var shellTools = []string{"exec_command", "shell_command", "shell", "Bash", "bash"}

// fake is the benchmark's model: it answers, and it keeps the log of what
// each peer sent.
type fake struct {
	srv *modeltest.Server

	mu    sync.Mutex
	log   []modeltest.Logged
	calls map[string]int // tool name → calls asked for
	ran   int            // tool results that carried the command's output
	dump  string         // directory the request bodies are written to ("": none)
	n     int
}

func newFake(cleanup *cleanups, dump string) *fake {
	f := &fake{calls: map[string]int{}, dump: dump}
	f.srv = modeltest.New(cleanup, f.answer)
	f.srv.SetModels("m1")
	f.srv.SetLog(func(l modeltest.Logged) {
		f.mu.Lock()
		f.log = append(f.log, l)
		f.mu.Unlock()
	})
	return f
}

// mark returns the position in the request log, for since.
func (f *fake) mark() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.log)
}

// since returns the requests logged from mark on.
func (f *fake) since(mark int) []modeltest.Logged {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]modeltest.Logged(nil), f.log[mark:]...)
}

// shellStats returns the tool calls asked for and the results that
// carried the command's output.
func (f *fake) shellStats() (calls map[string]int, ran int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.calls {
		out[k] = v
	}
	return out, f.ran
}

func (f *fake) answer(req *modeltest.Request) modeltest.Reply {
	f.mu.Lock()
	f.n++
	n, dump := f.n, f.dump
	f.mu.Unlock()
	if dump != "" {
		_ = os.WriteFile(filepath.Join(dump, fmt.Sprintf("%03d-%s.json", n, req.API)), req.Body, 0o600)
	}
	usage := &modeltest.Usage{Prompt: len(req.Body) / 4, Completion: 2}
	if !strings.Contains(req.LastUser(), shellMarker) {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "ok"}}, Usage: usage}
	}
	if results := req.ToolResultsSinceUser(); len(results) > 0 {
		for _, r := range results {
			if strings.Contains(toolText(r.Content), shellOutput) {
				f.mu.Lock()
				f.ran++
				f.mu.Unlock()
				break
			}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "It printed " + shellOutput + "."}}, Usage: usage}
	}
	name, args, ok := shellCall(req.Tools)
	if !ok {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "no shell tool offered"}}, Usage: usage}
	}
	f.mu.Lock()
	f.calls[name]++
	f.mu.Unlock()
	return modeltest.Reply{Chunks: []modeltest.Chunk{{Call: &modeltest.Call{ID: "call_bench_1", Name: name, Arguments: args}}}, Usage: usage}
}

// shellCall picks the shell tool among tools and builds its arguments
// from the tool's own schema: a "cmd" or "command" property, an array
// ("bash", "-lc", command) where the schema wants one, and a description
// where one is required.
func shellCall(tools []modeltest.RequestTool) (name, args string, ok bool) {
	byName := map[string]modeltest.RequestTool{}
	for _, t := range tools {
		byName[t.Function.Name] = t
	}
	for _, n := range shellTools {
		t, found := byName[n]
		if !found {
			continue
		}
		var schema struct {
			Properties map[string]struct {
				Type any `json:"type"`
			} `json:"properties"`
			Required []string `json:"required"`
		}
		_ = json.Unmarshal(t.Function.Parameters, &schema)
		a := map[string]any{}
		key := "command"
		if _, has := schema.Properties["cmd"]; has {
			key = "cmd"
		}
		if schema.Properties[key].Type == "array" {
			a[key] = []string{"bash", "-lc", shellCommand}
		} else {
			a[key] = shellCommand
		}
		for _, r := range schema.Required {
			if r == "description" {
				a["description"] = "Print a marker"
			}
		}
		b, _ := json.Marshal(a)
		return n, string(b), true
	}
	return "", "", false
}

// toolText flattens a tool result's content (a string, or parts with
// text) into text.
func toolText(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case nil:
		return ""
	}
	b, _ := json.Marshal(c)
	return string(b)
}
