package tools

import (
	"encoding/json"
	"strings"
)

// Spec is the model-facing declaration of a tool.
type Spec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Registry is an immutable set of tools in registration order.
type Registry struct {
	tools  []Tool
	byName map[string]int
}

// NewRegistry returns a registry of tools. A tool whose name repeats an
// earlier one replaces it in place, so the order of first registration is
// kept.
func NewRegistry(tools ...Tool) *Registry {
	r := &Registry{byName: make(map[string]int, len(tools))}
	for _, t := range tools {
		if i, ok := r.byName[t.Name()]; ok {
			r.tools[i] = t
			continue
		}
		r.byName[t.Name()] = len(r.tools)
		r.tools = append(r.tools, t)
	}
	return r
}

// Lookup finds a tool by exact name, else by case-insensitive name (the
// first registered wins when several fold to the same name).
func (r *Registry) Lookup(name string) (Tool, bool) {
	if i, ok := r.byName[name]; ok {
		return r.tools[i], true
	}
	for _, t := range r.tools {
		if strings.EqualFold(t.Name(), name) {
			return t, true
		}
	}
	return nil, false
}

// Tools returns the registered tools in registration order.
func (r *Registry) Tools() []Tool {
	return append([]Tool(nil), r.tools...)
}

// Specs returns the declarations of the registered tools in registration
// order.
func (r *Registry) Specs() []Spec {
	out := make([]Spec, len(r.tools))
	for i, t := range r.tools {
		out[i] = Spec{Name: t.Name(), Description: t.Description(), Parameters: t.Parameters()}
	}
	return out
}

// With returns a registry of r's tools followed by more (a turn's dynamic
// tools); a tool of more whose name repeats one of r's is left out, so a
// dynamic tool never replaces a built-in one. r is unchanged.
func (r *Registry) With(more ...Tool) *Registry {
	if len(more) == 0 {
		return r
	}
	if r == nil {
		return NewRegistry(more...)
	}
	all := r.Tools()
	for _, t := range more {
		if _, dup := r.Lookup(t.Name()); !dup {
			all = append(all, t)
		}
	}
	return NewRegistry(all...)
}
