// Package interactions is the host's interaction authority: the durable
// approvals and questions a running turn asks a person
// (docs/architecture.md, "The path of a turn": an approved tool call).
//
// A run's owner (BindRun, held by the session owner in internal/turns) admits its requests inside the session's lane:
// each is written durably as pending — and the run and session marked
// waiting_for_user in the same write — before subscribers are shown it,
// and the runtime call then waits, outside the lane, for its outcome. The
// first durable outcome wins: a wire answer (interaction.answer), a
// closure when the turn stops or ends (Run.Close), a permission timeout, or
// host_restarted for whatever a previous host left pending (Recover).
//
// Where things happen:
//   - owner.go: the runtime-facing owner of a run and its waits.
//   - answer.go: interaction.query and interaction.answer.
//   - closure.go: committing outcomes, run closure and restart recovery.
//   - review.go: the wire form of permission and question requests.
//   - reader.go: the cached point read of a canonical permission decision.
//   - record.go, schema.go: the interactions table.
package interactions

import (
	"context"
	"github.com/maka-agent/maka/internal/continuity"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// DefaultPermissionTimeout is how long a permission request waits for an
// answer before it is closed timed_out.
const DefaultPermissionTimeout = 300 * time.Second

// PendingProjectionMaxBytes bounds the encoded pending interactions of a
// session, so that its continuity snapshot (at most 56 KiB with the
// session, root turn and queue) stays publishable; a request that would
// exceed it is refused like the 17th pending one.
const PendingProjectionMaxBytes = 48 * 1024

// Wire messages of the interaction operations.
const (
	MessageNotFound        = "Interaction was not found"
	MessageAlreadyClosed   = "Interaction was already closed"
	MessageDifferentAnswer = "Interaction has a different canonical answer"
	MessageAnswerMismatch  = "Interaction answer does not match the pending request"
	MessageOperationFailed = protocol.MessageOperationFailed
)

// Continuity republishes a session's canonical projection; the caller is
// inside the session's lane. *continuity.Publisher implements it.
type Continuity interface {
	RefreshInLane(ctx context.Context, sessionID string) error
}

// Options configures a Authority. Store and Gate are required.
type Options struct {
	Store *store.Store
	Gate  *lane.Gate
	// Continuity is told after every change of a session's pending
	// interactions (nil: nobody is told).
	Continuity Continuity
	// Now is the clock of createdAt and committedAt (time.Now when nil).
	Now func() time.Time
	// NewID names new interactions (random UUIDs when nil); ids must be
	// entity ids.
	NewID func() string
	// PermissionTimeout is how long a permission request waits before it
	// is closed timed_out (DefaultPermissionTimeout when zero). Questions
	// never time out.
	PermissionTimeout time.Duration
	Log               *slog.Logger
	// OnPoison is called once, with the first broken invariant, when the
	// coordinator stops serving (the composition drains the host).
	OnPoison func(error)
	// ReadProjection reads a session's canonical projection, to check that
	// a new pending interaction still fits the session snapshot (nil: only
	// the pending list's own bound is checked).
	ReadProjection continuity.ProjectionReader
}

// Authority is the interaction authority of one host epoch.
type Authority struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	bound    int                // runs bound and not yet released
	waiters  map[string]*waiter // by interaction id: runtime calls waiting
	poisoned error

	// beforeTimeout, when set, runs when a permission wait timed out,
	// before its timeout is committed (tests order a racing answer).
	beforeTimeout func()
}

// runState is what the coordinator knows of one bound run (Run).
type runState struct {
	sessionID, turnID, runID string
	// closure is the first closure reason claimed for the run ("" while
	// open); later requests of the run are refused.
	closure string
	// remembered holds the allow remembered for the rest of the turn per
	// scope key.
	remembered map[string]protocol.InteractionCanonicalOutcome
	// asked is set before the run's first pending request is written: a
	// run that never asked has nothing to close (requests of earlier
	// epochs were closed by recovery).
	asked bool
}

// waiter is a runtime call waiting for the outcome of one interaction.
type waiter struct {
	id, runID string
	rs        *runState
	done      chan struct{} // closed once outcome or err is set
	outcome   protocol.InteractionCanonicalOutcome
	err       error
}

// New returns a Authority.
func New(opts Options) *Authority {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NewID == nil {
		opts.NewID = uuid.NewString
	}
	if opts.PermissionTimeout <= 0 {
		opts.PermissionTimeout = DefaultPermissionTimeout
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Authority{
		opts: opts, log: opts.Log,
		waiters: make(map[string]*waiter),
	}
}

// Handlers returns the handlers of interaction.query and
// interaction.answer.
func (c *Authority) Handlers() host.Handlers {
	return host.Handlers{
		protocol.OpInteractionQuery:  c.handleQuery,
		protocol.OpInteractionAnswer: c.handleAnswer,
	}
}

func (c *Authority) now() int64 { return max(c.opts.Now().UnixMilli(), 0) }

// Err returns the poison error once the coordinator detected a broken
// invariant, else nil.
func (c *Authority) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.poisoned
}

// poison records the first broken invariant: every waiting runtime call
// fails, every later call fails with the same error, and OnPoison is called
// once. It returns the poison error.
func (c *Authority) poison(cause error) error {
	c.mu.Lock()
	if c.poisoned != nil {
		err := c.poisoned
		c.mu.Unlock()
		return err
	}
	err := &poisonError{cause: cause}
	c.poisoned = err
	waiting := c.waiters
	c.waiters = make(map[string]*waiter)
	c.mu.Unlock()
	c.log.Error("interaction authority poisoned; refusing all later work", "err", cause)
	for _, w := range waiting {
		w.fail(err)
	}
	if c.opts.OnPoison != nil {
		c.opts.OnPoison(cause)
	}
	return err
}

// refresh republishes a session from inside its lane; a failure is logged
// (the durable state is already right and the next refresh repairs it).
func (c *Authority) refresh(ctx context.Context, sessionID string) {
	if c.opts.Continuity == nil {
		return
	}
	if err := c.opts.Continuity.RefreshInLane(context.WithoutCancel(ctx), sessionID); err != nil {
		c.log.Warn("session refresh after an interaction change failed", "session", sessionID, "err", err)
	}
}

func (w *waiter) settle(out protocol.InteractionCanonicalOutcome) {
	w.outcome = out
	close(w.done)
}

func (w *waiter) fail(err error) {
	w.err = err
	close(w.done)
}
