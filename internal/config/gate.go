package config

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// gate is the activation gate that orders mutations of the three
// documents against backend activations. Entries are admitted in
// arrival order: a mutation waits for every entry that arrived before it
// (the previous mutation and every earlier activation), an activation waits
// only for the mutations that arrived before it. Each entry captures the
// completion channels of its predecessors when it arrives, so an entry that
// gives up waiting never lets a later one overtake an earlier one.
type gate struct {
	mu       sync.Mutex
	pending  []*gateSlot // arrived and not yet left, in arrival order
	poisoned error
	// onEnqueue, if set, is called after an entry has arrived and before it
	// waits, with the number of entries it waits for.
	onEnqueue func(mutation bool, waits int)
}

type gateSlot struct {
	mutation bool
	done     chan struct{}
}

// enter admits a mutation or an activation once its predecessors are done.
func (g *gate) enter(ctx context.Context, mutation bool) (*gateSlot, error) {
	g.mu.Lock()
	if err := g.poisonedErr(); err != nil {
		g.mu.Unlock()
		return nil, err
	}
	var waits []chan struct{}
	for _, p := range g.pending {
		if mutation || p.mutation {
			waits = append(waits, p.done)
		}
	}
	s := &gateSlot{mutation: mutation, done: make(chan struct{})}
	g.pending = append(g.pending, s)
	hook := g.onEnqueue
	g.mu.Unlock()

	if hook != nil {
		hook(mutation, len(waits))
	}
	for _, w := range waits {
		select {
		case <-w:
		case <-ctx.Done():
			g.leave(s)
			return nil, ctx.Err()
		}
	}
	g.mu.Lock()
	err := g.poisonedErr()
	g.mu.Unlock()
	if err != nil {
		g.leave(s)
		return nil, err
	}
	return s, nil
}

// leave ends an admitted (or abandoned) entry.
func (g *gate) leave(s *gateSlot) {
	g.mu.Lock()
	if i := slices.Index(g.pending, s); i >= 0 {
		g.pending = slices.Delete(g.pending, i, i+1)
		close(s.done)
	}
	g.mu.Unlock()
}

// poison makes queued and later entries fail; it reports whether this call
// poisoned the gate.
func (g *gate) poison(cause error) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.poisoned != nil {
		return false
	}
	g.poisoned = cause
	return true
}

// poisonedErr returns the refusal error once the gate is poisoned; g.mu is
// held.
func (g *gate) poisonedErr() error {
	if g.poisoned == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrActivationPoisoned, g.poisoned)
}
