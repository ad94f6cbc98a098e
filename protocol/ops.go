package protocol

import (
	"fmt"
)

// Operation is one of the operation keys of protocol v0 (plus extensions).
type Operation string

// The 22 operations of protocol v0.
const (
	OpHostStatus                        Operation = "host.status"
	OpTurnStart                         Operation = "turn.start"
	OpTurnQuery                         Operation = "turn.query"
	OpTurnStop                          Operation = "turn.stop"
	OpTurnMessageSubmit                 Operation = "turn.message.submit"
	OpQueueRetract                      Operation = "queue.retract"
	OpTurnInterrupt                     Operation = "turn.interrupt"
	OpInteractionQuery                  Operation = "interaction.query"
	OpInteractionAnswer                 Operation = "interaction.answer"
	OpTaskLedgerQuery                   Operation = "task.ledger.query"
	OpSubscriptionOpen                  Operation = "subscription.open"
	OpSubscriptionClose                 Operation = "subscription.close"
	OpRuntimePolicyQuery                Operation = "runtime.policy.query"
	OpRuntimePolicyMutate               Operation = "runtime.policy.mutate"
	OpConnectionCatalogQuery            Operation = "connection.catalog.query"
	OpConnectionCatalogCreate           Operation = "connection.catalog.create"
	OpConnectionCatalogUpdate           Operation = "connection.catalog.update"
	OpConnectionCatalogRemove           Operation = "connection.catalog.remove"
	OpConnectionCatalogSetDefaultTarget Operation = "connection.catalog.set-default-target"
	OpCredentialVaultQuery              Operation = "credential.vault.query"
	OpCredentialVaultSet                Operation = "credential.vault.set"
	OpCredentialVaultDelete             Operation = "credential.vault.delete"
)

// Mode says how an operation interacts with shutdown and with its
// connection (docs/architecture.md, The path of a request): shutdown waits
// for every admitted command until it is sealed; a query is cancelled when
// its connection goes; a control runs for the host's lifetime but shutdown
// does not wait for it.
type Mode string

// Operation modes.
const (
	ModeCommand Mode = "command" // a mutation: shutdown waits until it is sealed
	ModeQuery   Mode = "query"
	ModeControl Mode = "control"
)

// Availability says in which host states an operation is served.
type Availability string

// Operation availabilities.
const (
	AvailabilityBootstrap Availability = "bootstrap" // any non-draining state
	AvailabilityReady     Availability = "ready"     // only when ready
)

// Codec decodes one side (input or output) of an operation into its Go type.
type Codec func(d *D, v Value) any

// OperationSpec is one row of the operation table.
type OperationSpec struct {
	Key          Operation
	Mode         Mode
	Availability Availability
	Errors       []ErrorCode

	input, output         Codec
	inputPath, outputPath string
	// emptyInput marks operations whose input is exactly {}; zeroInput is
	// its decoded value.
	emptyInput bool
	zeroInput  any
	quotedKey  []byte // the key as a JSON string
}

// QuotedKey returns the operation key encoded as a JSON string.
func (s *OperationSpec) QuotedKey() []byte { return s.quotedKey }

// Declares reports whether code is one of the operation's declared errors.
func (s *OperationSpec) Declares(code ErrorCode) bool {
	for _, c := range s.Errors {
		if c == code {
			return true
		}
	}
	return false
}

// DecodeInput strictly decodes a request input.
func (s *OperationSpec) DecodeInput(v Value) (any, error) {
	return runCodec(s.input, v, s.inputPath)
}

// DecodeOutput strictly decodes a successful result.
func (s *OperationSpec) DecodeOutput(v Value) (any, error) {
	return runCodec(s.output, v, s.outputPath)
}

// HasCodecs reports whether both codecs are registered.
func (s *OperationSpec) HasCodecs() bool { return s.input != nil && s.output != nil }

func runCodec(c Codec, v Value, path string) (out any, err error) {
	if c == nil {
		return nil, &ProtocolError{Code: CodeInvalidFrame, Message: path + ": no codec"}
	}
	defer func() {
		// A decoder bug must never take the host down; it rejects the frame.
		if r := recover(); r != nil {
			out, err = nil, &ProtocolError{Code: CodeInvalidFrame, Message: fmt.Sprintf("%s: decoder panic: %v", path, r)}
		}
	}()
	d := new(D)
	out = c(d, v)
	if d.err != nil {
		return nil, d.err
	}
	return out, nil
}

var (
	base   = []ErrorCode{ErrHostNotReady, ErrHostDraining, ErrOperationUnavailable}
	turnMs = []ErrorCode{ErrHostNotReady, ErrHostDraining, ErrOperationUnavailable, ErrNotFound, ErrSessionArchived, ErrSessionBusy, ErrOperationConflict, ErrOutcomeUnknown, ErrInternalFailure}
	cfgQ   = []ErrorCode{ErrHostNotReady, ErrHostDraining, ErrOperationUnavailable, ErrInternalFailure, ErrPersistenceFailed, ErrInvalidRequest}
	cfgM   = []ErrorCode{ErrHostNotReady, ErrHostDraining, ErrOperationUnavailable, ErrInvalidRequest, ErrInternalFailure, ErrPersistenceFailed, ErrCommitOutcomeUnknown}
)

func with(codes ...ErrorCode) []ErrorCode {
	return append(append([]ErrorCode(nil), base...), codes...)
}

// The operation table is written only during package initialisation (the
// v0 table, then codecs and extensions from init functions) and read-only
// afterwards, so lookups take no lock.
var (
	table = map[Operation]*OperationSpec{}
	order []Operation
	// defined is initialised before any init function runs, so shape files
	// can register codecs from their init regardless of file order.
	defined = defineV0()
)

func define(key Operation, mode Mode, avail Availability, errs []ErrorCode) {
	if _, dup := table[key]; dup {
		panic("protocol: duplicate operation " + string(key))
	}
	table[key] = &OperationSpec{Key: key, Mode: mode, Availability: avail, Errors: errs,
		inputPath: string(key) + ".input", outputPath: string(key) + ".result",
		quotedKey: appendString(nil, string(key))}
	order = append(order, key)
}

func defineV0() bool {
	define(OpHostStatus, ModeQuery, AvailabilityBootstrap, []ErrorCode{ErrHostDraining, ErrInternalFailure})
	define(OpTurnStart, ModeCommand, AvailabilityReady, with(ErrNotFound, ErrSessionArchived, ErrSessionBusy, ErrOperationConflict, ErrInternalFailure))
	define(OpTurnQuery, ModeQuery, AvailabilityReady, with(ErrNotFound, ErrInternalFailure))
	define(OpTurnStop, ModeControl, AvailabilityReady, with(ErrNotFound, ErrOperationConflict, ErrInternalFailure))
	define(OpTurnMessageSubmit, ModeCommand, AvailabilityReady, turnMs)
	define(OpQueueRetract, ModeCommand, AvailabilityReady, turnMs)
	define(OpTurnInterrupt, ModeControl, AvailabilityReady, turnMs)
	define(OpInteractionQuery, ModeQuery, AvailabilityReady, with(ErrNotFound, ErrInternalFailure))
	define(OpInteractionAnswer, ModeCommand, AvailabilityReady, with(ErrNotFound, ErrOperationConflict, ErrAlreadyResolved, ErrInternalFailure))
	define(OpTaskLedgerQuery, ModeQuery, AvailabilityReady, with(ErrInvalidRequest, ErrInternalFailure))
	define(OpSubscriptionOpen, ModeControl, AvailabilityReady, with(ErrNotFound, ErrOperationConflict, ErrInternalFailure))
	define(OpSubscriptionClose, ModeControl, AvailabilityReady, with(ErrNotFound, ErrInternalFailure))
	define(OpRuntimePolicyQuery, ModeQuery, AvailabilityReady, with(ErrInternalFailure, ErrPersistenceFailed))
	define(OpRuntimePolicyMutate, ModeCommand, AvailabilityReady, cfgM)
	define(OpConnectionCatalogQuery, ModeQuery, AvailabilityReady, cfgQ)
	define(OpConnectionCatalogCreate, ModeCommand, AvailabilityReady, cfgM)
	define(OpConnectionCatalogUpdate, ModeCommand, AvailabilityReady, cfgM)
	define(OpConnectionCatalogRemove, ModeCommand, AvailabilityReady, cfgM)
	define(OpConnectionCatalogSetDefaultTarget, ModeCommand, AvailabilityReady, cfgM)
	define(OpCredentialVaultQuery, ModeQuery, AvailabilityReady, cfgQ)
	define(OpCredentialVaultSet, ModeCommand, AvailabilityReady, cfgM)
	define(OpCredentialVaultDelete, ModeCommand, AvailabilityReady, cfgM)
	return true
}

// registerCodec attaches the input and output codecs of an operation. Shape
// files call it from init.
func registerCodec(key Operation, input, output Codec) {
	s, ok := table[key]
	if !ok {
		panic("protocol: codec for unknown operation " + string(key))
	}
	if s.input != nil || s.output != nil {
		panic("protocol: duplicate codec for " + string(key))
	}
	s.input, s.output = input, output
}

// registerEmptyInput records that key's input is exactly {} decoding to zero.
func registerEmptyInput(key Operation, zero any) {
	table[key].emptyInput, table[key].zeroInput = true, zero
}

// DefineExtension adds an operation beyond v0 (documented in docs/protocol.md).
// It must be called from an init function; it panics on a duplicate key,
// like http.ServeMux.
func DefineExtension(key Operation, mode Mode, avail Availability, errs []ErrorCode, input, output Codec) {
	define(key, mode, avail, errs)
	table[key].input, table[key].output = input, output
}

// Lookup returns the spec of an operation key.
func Lookup(key string) (*OperationSpec, bool) {
	s, ok := table[Operation(key)]
	return s, ok
}

// Operations returns every operation spec in definition order.
func Operations() []*OperationSpec {
	out := make([]*OperationSpec, 0, len(order))
	for _, k := range order {
		out = append(out, table[k])
	}
	return out
}

// V0Operations is the number of operations in protocol v0.
const V0Operations = 22
