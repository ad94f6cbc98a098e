package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/protocol"
)

// This file owns the durable permission policy: each session's permission
// mode, sandbox and rules (in its sessions row) and the root's default
// sandbox and rules (the root_permissions document), served by the
// permission extension operations of docs/protocol.md and read by every
// turn (LoadPermissions).

// rootPermissionsDocument names the root's permission defaults in the
// documents table.
const rootPermissionsDocument = "root_permissions"

// DefaultSandbox is the sandbox of a session and root that never chose one.
const DefaultSandbox = protocol.SandboxWorkspaceWrite

// MessageInvalidRule is the start of the answer to a rule that does not
// parse; the parser's reason follows.
const MessageInvalidRule = "Invalid permission rule"

// rootPermissionsDoc is the body of the root_permissions document.
type rootPermissionsDoc struct {
	Sandbox string                    `json:"sandbox,omitempty"`
	Rules   []protocol.PermissionRule `json:"rules,omitempty"`
}

// Permissions is what decides a session's tool calls, as stored.
type Permissions struct {
	Mode protocol.PermissionMode
	// Sandbox is the session's own choice, else the root's, else
	// DefaultSandbox.
	Sandbox   string
	Rules     []protocol.PermissionRule // the session's own
	RootRules []protocol.PermissionRule
	// Thinking is the session's reasoning effort ("": the provider's
	// default); a setting every turn reads with the policy.
	Thinking string
}

// ToolRules parses the root's and the session's rules for the permission
// engine. Rules were checked when they were stored; one that no longer
// parses (an older syntax) is skipped and reported in skipped.
func (p Permissions) ToolRules() (rules []tools.Rule, skipped []string) {
	for _, r := range slices.Concat(p.RootRules, p.Rules) {
		tr, err := tools.ParseRule(r.Effect, r.Rule)
		if err != nil {
			skipped = append(skipped, r.Effect+" "+r.Rule)
			continue
		}
		rules = append(rules, tr)
	}
	return rules, skipped
}

func loadRootPermissions(q store.Querier) (rootPermissionsDoc, error) {
	doc, _, err := loadRootPermissionsRevision(q)
	return doc, err
}

// loadRootPermissionsRevision reads the root_permissions document and its
// revision (0 when it was never written).
func loadRootPermissionsRevision(q store.Querier) (rootPermissionsDoc, int64, error) {
	var doc rootPermissionsDoc
	rev, body, found, err := store.ReadDocument(q, rootPermissionsDocument)
	if err != nil || !found {
		return doc, rev, err
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return doc, rev, fmt.Errorf("%w: root permissions: %w", errCorrupt, err)
	}
	return doc, rev, nil
}

// LoadPermissions reads the permission policy of sessionID inside a store
// read or write; ErrSessionNotFound when the session does not exist.
func LoadPermissions(q store.Querier, sessionID string) (Permissions, error) {
	h, err := loadHeader(q, sessionID)
	if err != nil {
		return Permissions{}, err
	}
	root, err := loadRootPermissions(q)
	if err != nil {
		return Permissions{}, err
	}
	return permissionsOf(h, root), nil
}

func permissionsOf(h header, root rootPermissionsDoc) Permissions {
	p := Permissions{
		Mode:      protocol.PermissionMode(h.Doc.PermissionMode),
		Sandbox:   h.Doc.Sandbox,
		Rules:     slices.Clone(h.Doc.Rules),
		RootRules: slices.Clone(root.Rules),
		Thinking:  h.Doc.Thinking,
	}
	if p.Sandbox == "" {
		p.Sandbox = root.Sandbox
	}
	if p.Sandbox == "" {
		p.Sandbox = DefaultSandbox
	}
	return p
}

// checkRules parses every rule; the error names the first that does not.
func checkRules(rules []protocol.PermissionRule) error {
	for _, r := range rules {
		if _, err := tools.ParseRule(r.Effect, r.Rule); err != nil {
			return fmt.Errorf("%s: %v", MessageInvalidRule, err)
		}
	}
	return nil
}

// errInvalidRule carries the answer to a rule that does not parse.
type errInvalidRule struct{ msg string }

func (e errInvalidRule) Error() string { return e.msg }

func (s *Service) sessionPermissions(p Permissions, sessionID string) protocol.SessionPermissions {
	out := protocol.SessionPermissions{
		SessionID: sessionID, PermissionMode: p.Mode, Sandbox: p.Sandbox,
		Rules: p.Rules, RootRules: p.RootRules, Thinking: p.Thinking,
	}
	if s.opts.SandboxStatus != nil {
		out.SandboxAvailable, out.SandboxReason = s.opts.SandboxStatus()
		if out.SandboxAvailable {
			out.SandboxReason = ""
		}
	}
	return out
}

func (s *Service) handlePermissionsQuery(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.SessionPermissionsQueryInput)
	if !ok {
		return failure(errors.New("sessions: unexpected session.permissions.query input"))
	}
	var p Permissions
	err := s.st.Read(ctx, func(q store.Querier) error {
		var err error
		p, err = LoadPermissions(q, in.SessionID)
		return err
	})
	if err != nil {
		return failure(err)
	}
	return host.OK(s.sessionPermissions(p, in.SessionID))
}

func (s *Service) handlePermissionsSet(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.SessionPermissionsSetInput)
	if !ok {
		return failure(errors.New("sessions: unexpected session.permissions.set input"))
	}
	if err := checkRules(slices.Concat(in.Rules, in.AddRules)); err != nil {
		return host.Fail(protocol.ErrInvalidRequest, protocol.TruncateUTF8(err.Error(), 1024))
	}
	var p Permissions
	changed := false
	err := s.gate.Run(ctx, in.SessionID, func(ctx context.Context, _ *lane.Lease) error {
		return s.st.Write(ctx, func(tx *store.Tx) error {
			changed = false
			h, err := loadHeader(tx, in.SessionID)
			if err != nil {
				return err
			}
			doc := h.Doc
			if in.PermissionMode != "" {
				doc.PermissionMode, doc.DefaultPermission = string(in.PermissionMode), false
			}
			if in.Sandbox != "" {
				doc.Sandbox = in.Sandbox
			}
			if in.Thinking != "" {
				doc.Thinking = in.Thinking
			}
			if in.ReplaceRules {
				doc.Rules = slices.Clone(in.Rules)
			}
			for _, r := range in.AddRules {
				if !slices.Contains(doc.Rules, r) {
					doc.Rules = append(doc.Rules, r)
				}
			}
			if len(doc.Rules) > protocol.PermissionRulesMax {
				return errInvalidRule{fmt.Sprintf("%s: a session holds at most %d rules", MessageInvalidRule, protocol.PermissionRulesMax)}
			}
			root, err := loadRootPermissions(tx)
			if err != nil {
				return err
			}
			if doc.PermissionMode != h.Doc.PermissionMode || doc.Sandbox != h.Doc.Sandbox || doc.Thinking != h.Doc.Thinking || !slices.Equal(doc.Rules, h.Doc.Rules) {
				body, err := marshalJSON(doc)
				if err != nil {
					return err
				}
				if _, err := tx.Exec(`UPDATE sessions SET document = ? WHERE session_id = ?`, body, h.ID); err != nil {
					return err
				}
				if err := bumpCatalog(tx); err != nil {
					return err
				}
				h.Doc, changed = doc, true
			}
			p = permissionsOf(h, root)
			return nil
		})
	})
	if changed {
		s.changed(ctx, in.SessionID, err)
	}
	var bad errInvalidRule
	if errors.As(err, &bad) {
		return host.Fail(protocol.ErrInvalidRequest, bad.msg)
	}
	if err != nil {
		return failure(err)
	}
	return host.OK(s.sessionPermissions(p, in.SessionID))
}

func rootPermissionsOf(doc rootPermissionsDoc) protocol.RootPermissions {
	out := protocol.RootPermissions{Sandbox: doc.Sandbox, Rules: slices.Clone(doc.Rules)}
	if out.Sandbox == "" {
		out.Sandbox = DefaultSandbox
	}
	return out
}

func (s *Service) handleRootPermissionsQuery(ctx context.Context, call *host.Call) host.Outcome {
	var doc rootPermissionsDoc
	err := s.st.Read(ctx, func(q store.Querier) error {
		var err error
		doc, err = loadRootPermissions(q)
		return err
	})
	if err != nil {
		return failure(err)
	}
	return host.OK(rootPermissionsOf(doc))
}

// rootLane serialises changes of the root's permission defaults.
const rootLane = "\x00root-permissions"

func (s *Service) handleRootPermissionsSet(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.RootPermissionsSetInput)
	if !ok {
		return failure(errors.New("sessions: unexpected root.permissions.set input"))
	}
	if err := checkRules(in.Rules); err != nil {
		return host.Fail(protocol.ErrInvalidRequest, protocol.TruncateUTF8(err.Error(), 1024))
	}
	var doc rootPermissionsDoc
	err := s.gate.Run(ctx, rootLane, func(ctx context.Context, _ *lane.Lease) error {
		return s.st.Write(ctx, func(tx *store.Tx) error {
			var (
				rev int64
				err error
			)
			if doc, rev, err = loadRootPermissionsRevision(tx); err != nil {
				return err
			}
			if in.Sandbox != "" {
				doc.Sandbox = in.Sandbox
			}
			if in.ReplaceRules {
				doc.Rules = slices.Clone(in.Rules)
			}
			body, err := marshalJSON(doc)
			if err != nil {
				return err
			}
			_, err = store.WriteDocument(tx, rootPermissionsDocument, []byte(body), rev)
			return err
		})
	})
	if err != nil {
		return failure(err)
	}
	return host.OK(rootPermissionsOf(doc))
}
