package mcp

import (
	"context"
	"errors"
	"fmt"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// resultMaxBytes bounds the encoded listing so that its response fits a
// frame with room to spare.
const resultMaxBytes = 48 << 10

// Handlers serves the MCP extension operations.
func (m *Manager) Handlers() host.Handlers {
	return host.Handlers{
		protocol.OpMCPServersQuery:  m.serveQuery,
		protocol.OpMCPServersSet:    m.serveSet,
		protocol.OpMCPServersRemove: m.serveRemove,
	}
}

func (m *Manager) serveQuery(context.Context, *host.Call) host.Outcome {
	return host.OK(fitListing(protocol.MCPServersQueryResult{Servers: m.Status()}, resultMaxBytes))
}

// fitListing drops tool descriptions, then tools from the end of each
// server's list (counted in ToolsOmitted), until r encodes within max.
func fitListing(r protocol.MCPServersQueryResult, max int) protocol.MCPServersQueryResult {
	fits := func() bool { n, err := protocol.EncodedSize(r); return err == nil && n <= max }
	if fits() {
		return r
	}
	for i := range r.Servers {
		for j := range r.Servers[i].Tools {
			r.Servers[i].Tools[j].Description = ""
		}
	}
	for !fits() {
		cut := false
		for i := range r.Servers {
			if n := len(r.Servers[i].Tools); n > 0 {
				r.Servers[i].Tools = r.Servers[i].Tools[:n-1]
				r.Servers[i].ToolsOmitted++
				cut = true
			}
		}
		if !cut {
			break
		}
	}
	return r
}

func (m *Manager) serveSet(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.MCPServersSetInput)
	if !ok {
		m.log.Error("mcp.servers.set with an unexpected input", "type", fmt.Sprintf("%T", call.Input))
		return host.Fail(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
	}
	s, err := m.Set(ctx, in)
	if err != nil {
		return m.failure("set", in.Name, err)
	}
	return host.OK(s)
}

func (m *Manager) serveRemove(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.MCPServersRemoveInput)
	if !ok {
		m.log.Error("mcp.servers.remove with an unexpected input", "type", fmt.Sprintf("%T", call.Input))
		return host.Fail(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
	}
	removed, err := m.Remove(ctx, in.Name)
	if err != nil {
		return m.failure("remove", in.Name, err)
	}
	return host.OK(protocol.MCPServersRemoveResult{Name: in.Name, Removed: removed})
}

func (m *Manager) failure(op, name string, err error) host.Outcome {
	var ie *InputError
	switch {
	case errors.As(err, &ie):
		return host.Fail(protocol.ErrInvalidRequest, ie.msg)
	case errors.Is(err, ErrClosed):
		return host.Fail(protocol.ErrHostDraining, protocol.MessageHostDraining)
	case errors.Is(err, store.ErrCommitOutcomeUnknown):
		m.log.Error("mcp server configuration commit outcome unknown", "op", op, "server", name, "err", err)
		return host.Fail(protocol.ErrCommitOutcomeUnknown, "the MCP server configuration may or may not have been saved")
	}
	m.log.Error("mcp server configuration not saved", "op", op, "server", name, "err", err)
	return host.Fail(protocol.ErrPersistenceFailed, "the MCP server configuration could not be saved")
}
