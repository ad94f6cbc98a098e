package interactions

import (
	"container/list"
	"context"
	"sync"

	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// DefaultPermissionCacheSize is how many canonical permission decisions
// the reader keeps (domain.md §4.9).
const DefaultPermissionCacheSize = 256

// PermissionDecision is the canonical decision of one answered permission
// request: who asked, what, and the committed answer.
type PermissionDecision struct {
	SessionID string
	RunID     string
	TurnID    string
	RequestID string
	Request   protocol.InteractionRequest
	Outcome   protocol.InteractionCanonicalOutcome
}

// PermissionDecision reads the canonical decision of a permission request
// by its id. It reports false when the request is unknown, is a question,
// or has no permission answer (still pending or closed). A committed answer
// never changes, so decisions are cached (least recently used first out);
// absent results and failures are not, and the next call reads again.
// Concurrent calls for one id share one store read.
func (c *Coordinator) PermissionDecision(ctx context.Context, requestID string) (PermissionDecision, bool, error) {
	return c.decisions.get(ctx, requestID)
}

// readPermissionDecision is the store read behind the decision cache.
func readPermissionDecision(s *store.Store) func(context.Context, string) (PermissionDecision, bool, error) {
	return func(ctx context.Context, id string) (PermissionDecision, bool, error) {
		var (
			r     record
			found bool
		)
		if err := s.Read(ctx, func(q store.Querier) error {
			var err error
			r, found, err = loadRecord(q, id)
			return err
		}); err != nil || !found {
			return PermissionDecision{}, false, err
		}
		if r.Request.Kind != protocol.InteractionKindPermission || r.Outcome == nil ||
			r.Outcome.Kind != protocol.InteractionOutcomePermissionAnswer {
			return PermissionDecision{}, false, nil
		}
		return PermissionDecision{
			SessionID: r.SessionID, RunID: r.RunID, TurnID: r.TurnID, RequestID: r.ID,
			Request: r.Request, Outcome: *r.Outcome,
		}, true, nil
	}
}

// decisionCache is a bounded LRU of permission decisions with one store
// read in flight per id.
type decisionCache struct {
	read     func(context.Context, string) (PermissionDecision, bool, error)
	capacity int

	mu      sync.Mutex
	order   *list.List               // of cachedDecision, most recently used first
	entries map[string]*list.Element // by request id
	flights map[string]*decisionRead // by request id

	// joined, when set, runs when a call joins a read already in flight
	// (tests count the callers sharing a read).
	joined func()
}

// cachedDecision is one entry of the cache's recency list.
type cachedDecision struct {
	id  string
	val PermissionDecision
}

// decisionRead is one store read that callers for the same id share.
type decisionRead struct {
	done chan struct{} // closed when val, ok and err are set
	val  PermissionDecision
	ok   bool
	err  error
}

func newDecisionCache(capacity int, read func(context.Context, string) (PermissionDecision, bool, error)) *decisionCache {
	if capacity <= 0 {
		capacity = DefaultPermissionCacheSize
	}
	return &decisionCache{
		read: read, capacity: capacity, order: list.New(),
		entries: make(map[string]*list.Element), flights: make(map[string]*decisionRead),
	}
}

// get returns the cached decision of id, or joins (or starts) the store
// read of it and waits for that read or ctx's end. The read itself runs to
// completion in its own goroutine even when every caller has gone, so one
// caller's cancellation never fails another's read; it is one point read,
// and closing the store ends it.
func (d *decisionCache) get(ctx context.Context, id string) (PermissionDecision, bool, error) {
	if err := ctx.Err(); err != nil {
		return PermissionDecision{}, false, err
	}
	d.mu.Lock()
	if e, ok := d.entries[id]; ok {
		d.order.MoveToFront(e)
		v := e.Value.(cachedDecision).val
		d.mu.Unlock()
		return v, true, nil
	}
	f, inFlight := d.flights[id]
	if !inFlight {
		f = &decisionRead{done: make(chan struct{})}
		d.flights[id] = f
		go d.fill(context.WithoutCancel(ctx), id, f)
	}
	joined := d.joined
	d.mu.Unlock()
	if inFlight && joined != nil {
		joined()
	}
	select {
	case <-f.done:
		return f.val, f.ok, f.err
	case <-ctx.Done():
		return PermissionDecision{}, false, ctx.Err()
	}
}

// fill performs the store read of one flight, caches a found decision and
// releases the flight's callers.
func (d *decisionCache) fill(ctx context.Context, id string, f *decisionRead) {
	val, ok, err := d.read(ctx, id)
	d.mu.Lock()
	f.val, f.ok, f.err = val, ok && err == nil, err
	delete(d.flights, id)
	if f.ok {
		d.entries[id] = d.order.PushFront(cachedDecision{id: id, val: val})
		for d.order.Len() > d.capacity {
			last := d.order.Back()
			d.order.Remove(last)
			delete(d.entries, last.Value.(cachedDecision).id)
		}
	}
	d.mu.Unlock()
	close(f.done)
}
