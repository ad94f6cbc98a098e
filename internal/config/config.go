// Package config coordinates the runtime policy, the connection catalog and
// the credential vault of the host.
//
// A Settings serves the ten operations of the three stores. Each store is
// one revisioned JSON document persisted through [Documents] with
// compare-and-set on its revision; the document revision is the revision the
// wire reports (policy revision, catalog revision, vault revision). Secrets
// never enter a document: they live in a [SecretFile], and no result, error
// or log line carries them.
//
// Every mutation goes through the activation gate: it starts only after the
// previous mutation and every backend activation that began before it have
// finished, and backend activations ([Settings.Activate]) wait for the
// mutations queued before them while running concurrently with each other.
// After a committed mutation, or one whose commit outcome is unknown, the
// coordinator runs the Invalidate option before replying; if that fails, the
// durable outcome is still returned, the gate is poisoned (queued and later
// mutations and activations fail) and OnPoison is called so that the host
// drains.
package config

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/protocol"
)

// Documents persists revisioned JSON documents atomically (compare-and-set
// on the stored revision). Implementations must be safe for concurrent use.
type Documents interface {
	// Load returns the stored revision and body of a document; found is
	// false (and revision 0) when the document does not exist.
	Load(ctx context.Context, name string) (revision int64, body []byte, found bool, err error)
	// Store writes body as revision next iff the stored revision is still
	// prev (0 = absent); it returns ErrRevisionMismatch otherwise. Errors
	// wrapping ErrCommitOutcomeUnknown mean the write may or may not have
	// happened.
	Store(ctx context.Context, name string, prev, next int64, body []byte) error
}

// Names of the documents the coordinator persists.
const (
	DocRuntimePolicy     = "runtime-policy"
	DocConnectionCatalog = "connection-catalog"
	DocCredentialVault   = "credential-vault"
)

// Sentinel errors of Documents implementations and of the activation gate.
var (
	// ErrRevisionMismatch is returned by Documents.Store when the stored
	// revision is not the expected one; nothing was written.
	ErrRevisionMismatch = errors.New("config: document revision mismatch")
	// ErrCommitOutcomeUnknown is wrapped by Documents.Store errors after
	// which the write may or may not be durable.
	ErrCommitOutcomeUnknown = errors.New("config: document commit outcome unknown")
	// ErrActivationPoisoned is wrapped by the errors of activations and
	// mutations refused because a post-commit invalidation failed.
	ErrActivationPoisoned = errors.New(MessageActivationPoisoned)
)

// Error messages of the operations, as the wire carries them (failure maps
// each error to its code and message).
const (
	MessagePersistenceFailed      = "Runtime policy persistence failed"
	MessageCommitOutcomeUnknown   = "Runtime policy commit outcome is unknown"
	MessageMutationInvalid        = "Runtime policy mutation is invalid for the current state"
	MessageCredentialQueryInvalid = "Credential query is invalid for the current connection"
	MessageInvalidCatalogCursor   = "Invalid connection catalog cursor"
	MessageActivationPoisoned     = "Runtime policy activation is poisoned"
)

// Options configures a Settings. Every field is optional.
type Options struct {
	// Invalidate drops cached idle backends after a committed (or possibly
	// committed) mutation. It runs inside the mutation's gate slot, before
	// the reply.
	Invalidate func(ctx context.Context) error
	// OnPoison is called once, after the gate has been poisoned by a failed
	// invalidation (or a secret file that could not be restored). It must
	// only request the drain, not wait for in-flight operations.
	OnPoison func(error)
	// Now returns the current time (credential updatedAt); time.Now by
	// default.
	Now func() time.Time
}

// Settings serves runtime.policy.*, connection.catalog.* and
// credential.vault.* and owns the activation gate.
type Settings struct {
	docs    Documents
	secrets *SecretFile
	opts    Options
	gate    gate
}

// New returns a Settings persisting through docs and secrets.
func New(docs Documents, secrets *SecretFile, opts Options) (*Settings, error) {
	if docs == nil {
		return nil, errors.New("config: no document store")
	}
	if secrets == nil {
		return nil, errors.New("config: no secret file")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Settings{docs: docs, secrets: secrets, opts: opts}, nil
}

// Handlers returns the handlers of the ten operations.
func (c *Settings) Handlers() host.Handlers {
	return host.Handlers{
		protocol.OpRuntimePolicyQuery:                c.policyQuery,
		protocol.OpRuntimePolicyMutate:               c.policyMutate,
		protocol.OpConnectionCatalogQuery:            c.catalogQuery,
		protocol.OpConnectionCatalogCreate:           c.catalogCreate,
		protocol.OpConnectionCatalogUpdate:           c.catalogUpdate,
		protocol.OpConnectionCatalogRemove:           c.catalogRemove,
		protocol.OpConnectionCatalogSetDefaultTarget: c.catalogSetDefaultTarget,
		protocol.OpCredentialVaultQuery:              c.vaultQuery,
		protocol.OpCredentialVaultSet:                c.vaultSet,
		protocol.OpCredentialVaultDelete:             c.vaultDelete,
		// An extension of docs/protocol.md.
		protocol.OpConnectionContextWindowSet: c.contextWindowSet,
	}
}

// Activate runs fn as a backend activation: it waits for the mutations
// queued before it (activations run concurrently with each other), and
// mutations queued while fn runs wait for it. It returns an error wrapping
// ErrActivationPoisoned without running fn once the gate is poisoned, the
// context's error if ctx ends while waiting, and fn's error otherwise.
func (c *Settings) Activate(ctx context.Context, fn func() error) error {
	slot, err := c.gate.enter(ctx, false)
	if err != nil {
		return err
	}
	defer c.gate.leave(slot)
	return fn()
}

// Policy returns the current runtime policy snapshot.
func (c *Settings) Policy(ctx context.Context) (protocol.RuntimePolicySnapshot, error) {
	return c.loadPolicy(ctx)
}

// Catalog returns the current connection catalog.
func (c *Settings) Catalog(ctx context.Context) (Catalog, error) {
	return c.loadCatalog(ctx)
}

// maxAttempts bounds how often a mutation is re-evaluated after the store
// reported a revision mismatch (a writer outside this coordinator).
const maxAttempts = 3

// mutationFunc evaluates and persists one mutation. committed reports a
// durable commit; an error wrapping ErrCommitOutcomeUnknown reports a
// possible one.
type mutationFunc func(ctx context.Context) (result any, committed bool, err error)

// mutate runs fn in the gate and invalidates backends after a committed or
// possibly committed outcome.
func (c *Settings) mutate(ctx context.Context, fn mutationFunc) host.Outcome {
	slot, err := c.gate.enter(ctx, true)
	if err != nil {
		return failure(err, classMutation)
	}
	// Once admitted, a mutation runs to completion: a half-applied commit
	// must still be invalidated.
	ctx = context.WithoutCancel(ctx)
	var (
		result    any
		committed bool
	)
	for attempt := 1; ; attempt++ {
		result, committed, err = fn(ctx)
		if !errors.Is(err, ErrRevisionMismatch) || attempt >= maxAttempts {
			break
		}
	}
	var poison error
	var rb *rollbackError
	if errors.As(err, &rb) {
		poison = rb
	}
	if committed || errors.Is(err, ErrCommitOutcomeUnknown) {
		if c.opts.Invalidate != nil {
			if ierr := c.opts.Invalidate(ctx); ierr != nil {
				poison = fmt.Errorf("config: backend invalidation failed: %w", ierr)
			}
		}
	}
	first := poison != nil && c.gate.poison(poison)
	c.gate.leave(slot)
	if first && c.opts.OnPoison != nil {
		c.opts.OnPoison(poison)
	}
	if err != nil {
		return failure(err, classMutation)
	}
	return host.OK(result)
}

// ---- errors ----

// storeError is a failure of Documents or of the secret file.
type storeError struct {
	op, name string
	err      error
}

func (e *storeError) Error() string { return "config: " + e.op + " " + e.name + ": " + e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// documentError reports a stored document that does not decode.
type documentError struct {
	name string
	err  error
}

func (e *documentError) Error() string {
	return "config: invalid " + e.name + " document: " + e.err.Error()
}
func (e *documentError) Unwrap() error { return e.err }

// inputError reports a mutation (or credential locator) the current state
// rejects.
type inputError struct {
	credential bool
	reason     string
}

func (e *inputError) Error() string { return "config: invalid input: " + e.reason }

func invalidInput(format string, args ...any) error {
	return &inputError{reason: fmt.Sprintf(format, args...)}
}

func invalidCredential(format string, args ...any) error {
	return &inputError{credential: true, reason: fmt.Sprintf(format, args...)}
}

// rollbackError reports a failed write whose secret file could not be put
// back in step with the vault document.
type rollbackError struct {
	cause, rollback error
}

func (e *rollbackError) Error() string {
	return "config: secret file not restored after a failed vault write: " + e.rollback.Error() +
		" (write: " + e.cause.Error() + ")"
}
func (e *rollbackError) Unwrap() error { return e.cause }

type opClass int

const (
	classQuery opClass = iota
	classCredentialQuery
	classMutation
)

var internalFailure = host.Fail(protocol.ErrInternalFailure, protocol.MessageOperationFailed)

// failure maps an error to the outcome of an operation of class: a poisoned
// gate is internal_failure; an unknown commit outcome is
// commit_outcome_unknown for a mutation and internal_failure otherwise; a
// revision mismatch or a cancelled context is internal_failure; a storage or
// stored-document fault is persistence_failed; invalid input is
// invalid_request for a mutation, and for a credential query whose
// credential input is invalid; anything else is internal_failure.
func failure(err error, class opClass) host.Outcome {
	var (
		se  *storeError
		de  *documentError
		ie  *inputError
		ctx = errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	)
	switch {
	case errors.Is(err, ErrActivationPoisoned):
		return host.Fail(protocol.ErrInternalFailure, MessageActivationPoisoned)
	case errors.Is(err, ErrCommitOutcomeUnknown):
		if class == classMutation {
			return host.Fail(protocol.ErrCommitOutcomeUnknown, MessageCommitOutcomeUnknown)
		}
		return internalFailure
	case errors.Is(err, ErrRevisionMismatch), ctx:
		return internalFailure
	case errors.As(err, &se), errors.As(err, &de):
		return host.Fail(protocol.ErrPersistenceFailed, MessagePersistenceFailed)
	case errors.As(err, &ie):
		switch {
		case class == classMutation:
			return host.Fail(protocol.ErrInvalidRequest, MessageMutationInvalid)
		case class == classCredentialQuery && ie.credential:
			return host.Fail(protocol.ErrInvalidRequest, MessageCredentialQueryInvalid)
		}
	}
	return internalFailure
}

// ---- documents ----

// load reads a document; a missing document has revision 0.
func (c *Settings) load(ctx context.Context, name string) (int64, []byte, bool, error) {
	rev, body, found, err := c.docs.Load(ctx, name)
	switch {
	case err != nil:
		return 0, nil, false, &storeError{op: "load", name: name, err: err}
	case !found:
		return 0, nil, false, nil
	case rev < 1 || rev > protocol.MaxSafeInteger:
		return 0, nil, false, &documentError{name: name, err: fmt.Errorf("revision %d out of range", rev)}
	}
	return rev, body, true, nil
}

// store writes revision prev+1 of a document.
func (c *Settings) store(ctx context.Context, name string, prev int64, body []byte) (int64, error) {
	if prev >= protocol.MaxSafeInteger {
		return 0, fmt.Errorf("config: %s revision exhausted", name)
	}
	if err := c.docs.Store(ctx, name, prev, prev+1, body); err != nil {
		return 0, &storeError{op: "store", name: name, err: err}
	}
	return prev + 1, nil
}

// newID returns a fresh UUID v4 not accepted by taken.
func newID(taken func(string) bool) string {
	for {
		id := uuid.NewString()
		if !taken(id) {
			return id
		}
	}
}

// parseDocument parses a stored body and decodes it with fn.
func parseDocument[T any](name string, body []byte, fn func(d *protocol.D, v protocol.Value) T) (T, error) {
	var zero T
	v, err := protocol.Parse(body)
	if err != nil {
		return zero, &documentError{name: name, err: err}
	}
	d := &protocol.D{}
	out := fn(d, v)
	if err := d.Err(); err != nil {
		return zero, &documentError{name: name, err: err}
	}
	return out, nil
}
