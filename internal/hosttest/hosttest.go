// Package hosttest runs operation handlers in tests the way the kernel
// does: the input goes through the operation's input codec (so content is
// normalized as on the wire), an error must be one the operation declares,
// and a result must pass the operation's output codec.
package hosttest

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/protocol"
)

// Spec returns the spec of op.
func Spec(tb testing.TB, op protocol.Operation) *protocol.OperationSpec {
	tb.Helper()
	s, ok := protocol.Lookup(string(op))
	if !ok {
		tb.Fatalf("no spec for %s", op)
	}
	return s
}

// Merge returns one handler table of several.
func Merge(tables ...host.Handlers) host.Handlers {
	out := host.Handlers{}
	for _, t := range tables {
		for op, h := range t {
			out[op] = h
		}
	}
	return out
}

// Call runs the handler of op in handlers with in on conn and checks its
// outcome against the operation's codecs.
func Call(ctx context.Context, tb testing.TB, handlers host.Handlers, op protocol.Operation, in any, conn *host.ConnInfo) host.Outcome {
	tb.Helper()
	h, ok := handlers[op]
	if !ok {
		tb.Fatalf("no handler for %s", op)
	}
	s := Spec(tb, op)
	v := parse(tb, in)
	decoded, err := s.DecodeInput(v)
	if err != nil {
		tb.Fatalf("%s input rejected by its codec: %v", op, err)
	}
	out := h(ctx, &host.Call{RequestID: uuid.NewString(), Operation: s, Input: decoded, Conn: conn})
	if out.Err != nil {
		if !s.Declares(out.Err.Code) {
			tb.Fatalf("%s answered undeclared %s (%s)", op, out.Err.Code, out.Err.Message)
		}
		return out
	}
	if _, err := s.DecodeOutput(parse(tb, out.Result)); err != nil {
		tb.Fatalf("%s result rejected by its codec: %v", op, err)
	}
	return out
}

func parse(tb testing.TB, x any) protocol.Value {
	tb.Helper()
	b, err := protocol.Marshal(x)
	if err != nil {
		tb.Fatal(err)
	}
	v, err := protocol.Parse(b)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}
