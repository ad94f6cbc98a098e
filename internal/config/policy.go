package config

import (
	"context"
	"fmt"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/protocol"
)

// documentSchemaVersion is the schemaVersion of every stored document.
const documentSchemaVersion = 1

// policyDocument is the stored form of the runtime policy.
type policyDocument struct {
	SchemaVersion int                    `json:"schemaVersion"`
	Policy        protocol.RuntimePolicy `json:"policy"`
}

func encodePolicy(p protocol.RuntimePolicy) ([]byte, error) {
	return protocol.Marshal(policyDocument{SchemaVersion: documentSchemaVersion, Policy: p})
}

// decodePolicy decodes a stored policy, which must be canonical.
func decodePolicy(body []byte) (protocol.RuntimePolicy, error) {
	return parseDocument(DocRuntimePolicy, body, func(d *protocol.D, v protocol.Value) protocol.RuntimePolicy {
		o := d.Exact(v, "document", "schemaVersion", "policy")
		o.SafeInt("schemaVersion", documentSchemaVersion, documentSchemaVersion)
		pv, pp := o.Get("policy")
		if d.Failed() {
			return protocol.RuntimePolicy{}
		}
		p, err := protocol.DecodeRuntimePolicy(pv)
		if err != nil {
			d.Fail(pp, "%v", err)
		}
		return p
	})
}

// loadPolicy returns the stored snapshot, or the defaults at revision 0.
func (c *Settings) loadPolicy(ctx context.Context) (protocol.RuntimePolicySnapshot, error) {
	rev, body, found, err := c.load(ctx, DocRuntimePolicy)
	if err != nil {
		return protocol.RuntimePolicySnapshot{}, err
	}
	if !found {
		return protocol.RuntimePolicySnapshot{Revision: 0, Policy: protocol.DefaultRuntimePolicy()}, nil
	}
	p, err := decodePolicy(body)
	if err != nil {
		return protocol.RuntimePolicySnapshot{}, err
	}
	snap := protocol.RuntimePolicySnapshot{Revision: rev, Policy: p}
	if n, err := protocol.EncodedSize(snap); err != nil || n > protocol.RuntimePolicySnapshotMaxBytes {
		return protocol.RuntimePolicySnapshot{}, &documentError{name: DocRuntimePolicy,
			err: fmt.Errorf("snapshot exceeds %d bytes", protocol.RuntimePolicySnapshotMaxBytes)}
	}
	return snap, nil
}

func (c *Settings) policyQuery(ctx context.Context, call *host.Call) host.Outcome {
	if _, ok := call.Input.(protocol.RuntimePolicyQueryInput); !ok {
		return internalFailure
	}
	snap, err := c.loadPolicy(ctx)
	if err != nil {
		return failure(err, classQuery)
	}
	return host.OK(snap)
}

func (c *Settings) policyMutate(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.RuntimePolicyMutateInput)
	if !ok || in.Operation.Value == nil {
		return internalFailure
	}
	return c.mutate(ctx, func(ctx context.Context) (any, bool, error) {
		snap, err := c.loadPolicy(ctx)
		if err != nil {
			return nil, false, err
		}
		if snap.Revision != in.ExpectedRevision {
			return protocol.RevisionConflict{ExpectedRevision: in.ExpectedRevision, ActualRevision: snap.Revision}, false, nil
		}
		next := in.Operation.Apply(snap.Policy)
		body, err := encodePolicy(next)
		if err != nil {
			return nil, false, err
		}
		// Never write what a later read would reject: the value must be
		// canonical and the next snapshot must fit its bound.
		if _, err := decodePolicy(body); err != nil {
			return nil, false, invalidInput("policy is not canonical: %v", err)
		}
		nextSnap := protocol.RuntimePolicySnapshot{Revision: snap.Revision + 1, Policy: next}
		if n, err := protocol.EncodedSize(nextSnap); err != nil || n > protocol.RuntimePolicySnapshotMaxBytes {
			return nil, false, invalidInput("policy snapshot exceeds %d bytes", protocol.RuntimePolicySnapshotMaxBytes)
		}
		rev, err := c.store(ctx, DocRuntimePolicy, snap.Revision, body)
		if err != nil {
			return nil, false, err
		}
		return protocol.PolicyCommitted{Revision: rev}, true, nil
	})
}
