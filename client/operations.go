package client

import (
	"context"

	"github.com/maka-agent/maka/protocol"
)

// One typed call per protocol v0 operation. A ctx without a deadline is
// bounded by Options.RequestTimeout. Declared error responses come back as
// *OperationError (test with IsCode); the connection stays usable.

// StartTurn calls turn.start.
func (c *Conn) StartTurn(ctx context.Context, in protocol.TurnStartInput) (protocol.TurnSnapshot, error) {
	return typed[protocol.TurnSnapshot](c, ctx, protocol.OpTurnStart, in)
}

// QueryTurn calls turn.query.
func (c *Conn) QueryTurn(ctx context.Context, in protocol.TurnQueryInput) (protocol.TurnSnapshot, error) {
	return typed[protocol.TurnSnapshot](c, ctx, protocol.OpTurnQuery, in)
}

// StopTurn calls turn.stop; it returns the terminal snapshot.
func (c *Conn) StopTurn(ctx context.Context, in protocol.TurnStopInput) (protocol.TurnSnapshot, error) {
	return typed[protocol.TurnSnapshot](c, ctx, protocol.OpTurnStop, in)
}

// SubmitMessage calls turn.message.submit.
func (c *Conn) SubmitMessage(ctx context.Context, in protocol.TurnMessageSubmitInput) (protocol.TurnMessageSubmitResult, error) {
	return typed[protocol.TurnMessageSubmitResult](c, ctx, protocol.OpTurnMessageSubmit, in)
}

// RetractQueue calls queue.retract.
func (c *Conn) RetractQueue(ctx context.Context, in protocol.QueueRetractInput) (protocol.QueueRetractResult, error) {
	return typed[protocol.QueueRetractResult](c, ctx, protocol.OpQueueRetract, in)
}

// InterruptTurn calls turn.interrupt.
func (c *Conn) InterruptTurn(ctx context.Context, in protocol.TurnInterruptInput) (protocol.TurnInterruptResult, error) {
	return typed[protocol.TurnInterruptResult](c, ctx, protocol.OpTurnInterrupt, in)
}

// QueryInteraction calls interaction.query.
func (c *Conn) QueryInteraction(ctx context.Context, in protocol.InteractionQueryInput) (protocol.InteractionSnapshot, error) {
	return typed[protocol.InteractionSnapshot](c, ctx, protocol.OpInteractionQuery, in)
}

// AnswerInteraction calls interaction.answer.
func (c *Conn) AnswerInteraction(ctx context.Context, in protocol.InteractionAnswerInput) (protocol.InteractionAnsweredSnapshot, error) {
	return typed[protocol.InteractionAnsweredSnapshot](c, ctx, protocol.OpInteractionAnswer, in)
}

// QueryTaskLedger calls task.ledger.query.
func (c *Conn) QueryTaskLedger(ctx context.Context, in protocol.TaskLedgerQueryInput) (protocol.TaskLedgerQueryResult, error) {
	return typed[protocol.TaskLedgerQueryResult](c, ctx, protocol.OpTaskLedgerQuery, in)
}

// QueryRuntimePolicy calls runtime.policy.query.
func (c *Conn) QueryRuntimePolicy(ctx context.Context) (protocol.RuntimePolicySnapshot, error) {
	return typed[protocol.RuntimePolicySnapshot](c, ctx, protocol.OpRuntimePolicyQuery, protocol.RuntimePolicyQueryInput{})
}

// MutateRuntimePolicy calls runtime.policy.mutate.
func (c *Conn) MutateRuntimePolicy(ctx context.Context, in protocol.RuntimePolicyMutateInput) (protocol.RuntimePolicyMutateResult, error) {
	return typed[protocol.RuntimePolicyMutateResult](c, ctx, protocol.OpRuntimePolicyMutate, in)
}

// QueryConnectionCatalog calls connection.catalog.query.
func (c *Conn) QueryConnectionCatalog(ctx context.Context, in protocol.CatalogQueryInput) (protocol.CatalogQueryResult, error) {
	return typed[protocol.CatalogQueryResult](c, ctx, protocol.OpConnectionCatalogQuery, in)
}

// CreateConnection calls connection.catalog.create.
func (c *Conn) CreateConnection(ctx context.Context, in protocol.CatalogCreateInput) (protocol.CatalogCreateResult, error) {
	return typed[protocol.CatalogCreateResult](c, ctx, protocol.OpConnectionCatalogCreate, in)
}

// UpdateConnection calls connection.catalog.update.
func (c *Conn) UpdateConnection(ctx context.Context, in protocol.CatalogUpdateInput) (protocol.CatalogUpdateResult, error) {
	return typed[protocol.CatalogUpdateResult](c, ctx, protocol.OpConnectionCatalogUpdate, in)
}

// RemoveConnection calls connection.catalog.remove.
func (c *Conn) RemoveConnection(ctx context.Context, in protocol.CatalogRemoveInput) (protocol.CatalogRemoveResult, error) {
	return typed[protocol.CatalogRemoveResult](c, ctx, protocol.OpConnectionCatalogRemove, in)
}

// SetDefaultConnectionTarget calls connection.catalog.set-default-target.
func (c *Conn) SetDefaultConnectionTarget(ctx context.Context, in protocol.CatalogSetDefaultTargetInput) (protocol.CatalogSetDefaultTargetResult, error) {
	return typed[protocol.CatalogSetDefaultTargetResult](c, ctx, protocol.OpConnectionCatalogSetDefaultTarget, in)
}

// QueryCredential calls credential.vault.query.
func (c *Conn) QueryCredential(ctx context.Context, in protocol.CredentialVaultQueryInput) (protocol.CredentialVaultQueryResult, error) {
	return typed[protocol.CredentialVaultQueryResult](c, ctx, protocol.OpCredentialVaultQuery, in)
}

// SetCredential calls credential.vault.set.
func (c *Conn) SetCredential(ctx context.Context, in protocol.CredentialVaultSetInput) (protocol.CredentialVaultMutateResult, error) {
	return typed[protocol.CredentialVaultMutateResult](c, ctx, protocol.OpCredentialVaultSet, in)
}

// DeleteCredential calls credential.vault.delete.
func (c *Conn) DeleteCredential(ctx context.Context, in protocol.CredentialVaultDeleteInput) (protocol.CredentialVaultMutateResult, error) {
	return typed[protocol.CredentialVaultMutateResult](c, ctx, protocol.OpCredentialVaultDelete, in)
}

// CompactSession calls the session.compact extension.
func (c *Conn) CompactSession(ctx context.Context, in protocol.SessionCompactInput) (protocol.SessionCompactResult, error) {
	return typed[protocol.SessionCompactResult](c, ctx, protocol.OpSessionCompact, in)
}

// SetConnectionContextWindow calls the connection.context-window.set
// extension.
func (c *Conn) SetConnectionContextWindow(ctx context.Context, in protocol.ConnectionContextWindowSetInput) (protocol.CatalogUpdateResult, error) {
	return typed[protocol.CatalogUpdateResult](c, ctx, protocol.OpConnectionContextWindowSet, in)
}
