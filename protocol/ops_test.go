package protocol

import (
	"slices"
	"strings"
	"testing"
)

// The operation table of protocol v0 and of the extension operations of
// docs/protocol.md (mode, availability, declared errors), written out
// independently of ops.go.
func TestOperationTableMatchesTheSpec(t *testing.T) {
	type row struct {
		mode  Mode
		avail Availability
		errs  []ErrorCode
	}
	nr, dr, un, nf, ar, bu, cf, ir, pf, cu, rs, ou, in := ErrHostNotReady, ErrHostDraining, ErrOperationUnavailable, ErrNotFound,
		ErrSessionArchived, ErrSessionBusy, ErrOperationConflict, ErrInvalidRequest, ErrPersistenceFailed,
		ErrCommitOutcomeUnknown, ErrAlreadyResolved, ErrOutcomeUnknown, ErrInternalFailure
	msg := []ErrorCode{nr, dr, un, nf, ar, bu, cf, ou, in}
	cfgQ := []ErrorCode{nr, dr, un, in, pf, ir}
	cfgM := []ErrorCode{nr, dr, un, ir, in, pf, cu}
	want := map[Operation]row{
		"host.status":                           {ModeQuery, AvailabilityBootstrap, []ErrorCode{dr, in}},
		"turn.start":                            {ModeCommand, AvailabilityReady, []ErrorCode{nr, dr, un, nf, ar, bu, cf, in}},
		"turn.query":                            {ModeQuery, AvailabilityReady, []ErrorCode{nr, dr, un, nf, in}},
		"turn.stop":                             {ModeControl, AvailabilityReady, []ErrorCode{nr, dr, un, nf, cf, in}},
		"turn.message.submit":                   {ModeCommand, AvailabilityReady, msg},
		"queue.retract":                         {ModeCommand, AvailabilityReady, msg},
		"turn.interrupt":                        {ModeControl, AvailabilityReady, msg},
		"interaction.query":                     {ModeQuery, AvailabilityReady, []ErrorCode{nr, dr, un, nf, in}},
		"interaction.answer":                    {ModeCommand, AvailabilityReady, []ErrorCode{nr, dr, un, nf, cf, rs, in}},
		"task.ledger.query":                     {ModeQuery, AvailabilityReady, []ErrorCode{nr, dr, un, ir, in}},
		"subscription.open":                     {ModeControl, AvailabilityReady, []ErrorCode{nr, dr, un, nf, cf, in}},
		"subscription.close":                    {ModeControl, AvailabilityReady, []ErrorCode{nr, dr, un, nf, in}},
		"runtime.policy.query":                  {ModeQuery, AvailabilityReady, []ErrorCode{nr, dr, un, in, pf}},
		"runtime.policy.mutate":                 {ModeCommand, AvailabilityReady, cfgM},
		"connection.catalog.query":              {ModeQuery, AvailabilityReady, cfgQ},
		"connection.catalog.create":             {ModeCommand, AvailabilityReady, cfgM},
		"connection.catalog.update":             {ModeCommand, AvailabilityReady, cfgM},
		"connection.catalog.remove":             {ModeCommand, AvailabilityReady, cfgM},
		"connection.catalog.set-default-target": {ModeCommand, AvailabilityReady, cfgM},
		"credential.vault.query":                {ModeQuery, AvailabilityReady, cfgQ},
		"credential.vault.set":                  {ModeCommand, AvailabilityReady, cfgM},
		"credential.vault.delete":               {ModeCommand, AvailabilityReady, cfgM},
	}
	v0 := 0
	for _, spec := range Operations() {
		w, ok := want[spec.Key]
		if !ok {
			continue // an extension
		}
		v0++
		if spec.Mode != w.mode || spec.Availability != w.avail || !slices.Equal(spec.Errors, w.errs) {
			t.Errorf("%s: got %s/%s %v, want %s/%s %v", spec.Key, spec.Mode, spec.Availability, spec.Errors, w.mode, w.avail, w.errs)
		}
		if !spec.HasCodecs() {
			t.Errorf("%s has no codecs", spec.Key)
		}
		if !spec.Declares(ErrInternalFailure) {
			t.Errorf("%s does not declare internal_failure", spec.Key)
		}
		if spec.Key != OpHostStatus && !spec.Declares(ErrOperationUnavailable) {
			t.Errorf("%s does not declare operation_unavailable", spec.Key)
		}
	}
	if v0 != V0Operations || len(want) != V0Operations {
		t.Fatalf("%d v0 operations, want %d", v0, V0Operations)
	}
}

func TestDecodersNeverPanic(t *testing.T) {
	inputs := []string{`null`, `[]`, `{}`, `"x"`, `1`, `{"kind":null}`, `{"kind":"page"}`, `[{}]`, `{"pending":[1]}`}
	for _, spec := range Operations() {
		for _, in := range inputs {
			v := mustParse(t, in)
			// runCodec recovers, but a decoder must not need it: a panic
			// shows up as a "decoder panic" message.
			for _, dec := range []func(Value) (any, error){spec.DecodeInput, spec.DecodeOutput} {
				if _, err := dec(v); err != nil {
					if pe, ok := err.(*ProtocolError); ok && strings.Contains(pe.Message, "decoder panic") {
						t.Errorf("%s panicked on %s", spec.Key, in)
					}
				}
			}
		}
	}
}
