package protocol

// This file owns the permission extension operations of docs/protocol.md:
// session.permissions.query / session.permissions.set (a session's
// permission mode, sandbox and rules) and root.permissions.query /
// root.permissions.set (the storage root's default sandbox and rules, which
// apply to every session besides its own).

// The permission extension operations.
const (
	OpSessionPermissionsQuery Operation = "session.permissions.query"
	OpSessionPermissionsSet   Operation = "session.permissions.set"
	OpRootPermissionsQuery    Operation = "root.permissions.query"
	OpRootPermissionsSet      Operation = "root.permissions.set"
)

// Permission bounds.
const (
	PermissionRuleMaxBytes = 1024
	PermissionRulesMax     = 64
	SandboxReasonMaxBytes  = 512
)

// Sandbox modes of a session's Bash calls.
const (
	SandboxOff            = "off"
	SandboxWorkspaceWrite = "workspace-write"
	SandboxReadOnly       = "read-only"
)

var sandboxModes = []string{SandboxOff, SandboxWorkspaceWrite, SandboxReadOnly}

// Rule effects.
const (
	PermissionRuleAllow = "allow"
	PermissionRuleDeny  = "deny"
)

// PermissionRule is {"effect":"allow"|"deny","rule":Str} where rule is in
// the host's rule syntax ("Read", "Bash(go test ./...)",
// "category:file_write", "Read(src/**)"); the host checks the syntax.
type PermissionRule struct {
	Effect string `json:"effect"`
	Rule   string `json:"rule"`
}

// SessionPermissions is the permission state of one session: its mode,
// the sandbox in force for it (its own choice or the root's default), its
// own rules, the root's rules, and whether this machine can enforce a
// sandbox (with the reason when it cannot).
type SessionPermissions struct {
	SessionID        string           `json:"sessionId"`
	PermissionMode   PermissionMode   `json:"permissionMode"`
	Sandbox          string           `json:"sandbox"`
	Rules            []PermissionRule `json:"rules"`
	RootRules        []PermissionRule `json:"rootRules"`
	SandboxAvailable bool             `json:"sandboxAvailable"`
	SandboxReason    string           `json:"sandboxReason,omitempty"`
	// Thinking is the session's reasoning effort (an extension field:
	// absent when the session never chose one).
	Thinking string `json:"thinking,omitempty"`
}

// SandboxUnavailable is what SandboxInForce says on a machine that cannot
// enforce a sandbox.
const SandboxUnavailable = "unavailable"

// SandboxInForce names the sandbox the session's commands run in: off in
// bypass mode or when the session chose off, SandboxUnavailable where the
// machine cannot enforce one, read-only in explore mode, else the
// session's sandbox.
func (p SessionPermissions) SandboxInForce() string {
	switch {
	case p.PermissionMode == PermissionModeBypass || p.Sandbox == SandboxOff:
		return SandboxOff
	case !p.SandboxAvailable:
		return SandboxUnavailable
	case p.PermissionMode == PermissionModeExplore:
		return SandboxReadOnly
	}
	return p.Sandbox
}

// SessionPermissionsQueryInput is the input of session.permissions.query.
type SessionPermissionsQueryInput struct {
	SessionID string `json:"sessionId"`
}

// SessionPermissionsSetInput is the input of session.permissions.set: each
// present field changes the session; Rules replaces its rules, AddRules
// appends those it does not have yet (after Rules).
type SessionPermissionsSetInput struct {
	SessionID      string           `json:"sessionId"`
	PermissionMode PermissionMode   `json:"permissionMode,omitempty"`
	Sandbox        string           `json:"sandbox,omitempty"`
	Rules          []PermissionRule `json:"-"`
	// ReplaceRules marks Rules as present (an empty list clears them).
	ReplaceRules bool             `json:"-"`
	AddRules     []PermissionRule `json:"addRules,omitempty"`
	// Thinking sets the session's reasoning effort (one of
	// SessionThinkingLevels; "" leaves it).
	Thinking string `json:"thinking,omitempty"`
}

// MarshalJSON writes rules whenever ReplaceRules is set, even when empty.
func (in SessionPermissionsSetInput) MarshalJSON() ([]byte, error) {
	var rules *[]PermissionRule
	if in.ReplaceRules {
		r := nonNilRules(in.Rules)
		rules = &r
	}
	return Marshal(struct {
		SessionID      string            `json:"sessionId"`
		PermissionMode PermissionMode    `json:"permissionMode,omitempty"`
		Sandbox        string            `json:"sandbox,omitempty"`
		Rules          *[]PermissionRule `json:"rules,omitempty"`
		AddRules       []PermissionRule  `json:"addRules,omitempty"`
		Thinking       string            `json:"thinking,omitempty"`
	}{in.SessionID, in.PermissionMode, in.Sandbox, rules, in.AddRules, in.Thinking})
}

// RootPermissions is the storage root's default sandbox and rules.
type RootPermissions struct {
	Sandbox string           `json:"sandbox"`
	Rules   []PermissionRule `json:"rules"`
}

// RootPermissionsSetInput is the input of root.permissions.set; each
// present field replaces the root's.
type RootPermissionsSetInput struct {
	Sandbox      string           `json:"sandbox,omitempty"`
	Rules        []PermissionRule `json:"-"`
	ReplaceRules bool             `json:"-"`
}

// MarshalJSON writes rules only when ReplaceRules is set.
func (in RootPermissionsSetInput) MarshalJSON() ([]byte, error) {
	var rules *[]PermissionRule
	if in.ReplaceRules {
		r := nonNilRules(in.Rules)
		rules = &r
	}
	return Marshal(struct {
		Sandbox string            `json:"sandbox,omitempty"`
		Rules   *[]PermissionRule `json:"rules,omitempty"`
	}{in.Sandbox, rules})
}

// MarshalJSON writes nil rule lists as [].
func (p SessionPermissions) MarshalJSON() ([]byte, error) {
	type plain SessionPermissions
	p.Rules, p.RootRules = nonNilRules(p.Rules), nonNilRules(p.RootRules)
	return Marshal(plain(p))
}

// MarshalJSON writes a nil rule list as [].
func (p RootPermissions) MarshalJSON() ([]byte, error) {
	type plain RootPermissions
	p.Rules = nonNilRules(p.Rules)
	return Marshal(plain(p))
}

func nonNilRules(r []PermissionRule) []PermissionRule {
	if r == nil {
		return []PermissionRule{}
	}
	return r
}

func init() {
	DefineExtension(OpSessionPermissionsQuery, ModeQuery, AvailabilityReady,
		sessionErrors(ErrNotFound, ErrPersistenceFailed),
		decodeSessionPermissionsQueryInput, decodeSessionPermissionsResult)
	DefineExtension(OpSessionPermissionsSet, ModeCommand, AvailabilityReady,
		sessionErrors(ErrNotFound, ErrInvalidRequest, ErrPersistenceFailed, ErrCommitOutcomeUnknown),
		decodeSessionPermissionsSetInput, decodeSessionPermissionsResult)
	DefineExtension(OpRootPermissionsQuery, ModeQuery, AvailabilityReady,
		sessionErrors(ErrPersistenceFailed),
		decodeEmptyInput, decodeRootPermissionsResult)
	DefineExtension(OpRootPermissionsSet, ModeCommand, AvailabilityReady,
		sessionErrors(ErrInvalidRequest, ErrPersistenceFailed, ErrCommitOutcomeUnknown),
		decodeRootPermissionsSetInput, decodeRootPermissionsResult)
}

func decodeEmptyInput(d *D, v Value) any {
	d.Exact(v, "input")
	return struct{}{}
}

func decodePermissionRules(d *D, v Value, path string) []PermissionRule {
	items := d.Array(v, path, 0, PermissionRulesMax)
	rules := make([]PermissionRule, 0, len(items))
	for i, item := range items {
		o := d.Exact(item, Index(path, i), "effect", "rule")
		r := PermissionRule{Effect: o.Enum("effect", PermissionRuleAllow, PermissionRuleDeny), Rule: o.StringBytes("rule", 1, PermissionRuleMaxBytes)}
		if d.Failed() {
			return nil
		}
		rules = append(rules, r)
	}
	return rules
}

func decodeSessionPermissionsQueryInput(d *D, v Value) any {
	o := d.Exact(v, "input", "sessionId")
	return SessionPermissionsQueryInput{SessionID: o.EntityID("sessionId")}
}

func decodeSessionPermissionsSetInput(d *D, v Value) any {
	o := d.Closed(v, "input", []string{"sessionId"}, []string{"permissionMode", "sandbox", "rules", "addRules", "thinking"})
	in := SessionPermissionsSetInput{SessionID: o.EntityID("sessionId")}
	if o.Has("permissionMode") {
		in.PermissionMode = PermissionMode(o.Enum("permissionMode", sessionPermissionModes...))
	}
	if o.Has("sandbox") {
		in.Sandbox = o.Enum("sandbox", sandboxModes...)
	}
	if o.Has("rules") {
		rv, rp := o.Get("rules")
		in.Rules, in.ReplaceRules = decodePermissionRules(d, rv, rp), true
	}
	if o.Has("addRules") {
		rv, rp := o.Get("addRules")
		if add := decodePermissionRules(d, rv, rp); len(add) > 0 {
			in.AddRules = add
		}
	}
	if o.Has("thinking") {
		in.Thinking = o.Enum("thinking", SessionThinkingLevels...)
	}
	return in
}

func decodeSessionPermissionsResult(d *D, v Value) any {
	o := d.Closed(v, "result", []string{"sessionId", "permissionMode", "sandbox", "rules", "rootRules", "sandboxAvailable"}, []string{"sandboxReason", "thinking"})
	p := SessionPermissions{SessionID: o.EntityID("sessionId")}
	p.PermissionMode = PermissionMode(o.Enum("permissionMode", sessionPermissionModes...))
	p.Sandbox = o.Enum("sandbox", sandboxModes...)
	rv, rp := o.Get("rules")
	p.Rules = decodePermissionRules(d, rv, rp)
	rv, rp = o.Get("rootRules")
	p.RootRules = decodePermissionRules(d, rv, rp)
	p.SandboxAvailable = o.Bool("sandboxAvailable")
	if o.Has("sandboxReason") {
		p.SandboxReason = o.StringBytes("sandboxReason", 1, SandboxReasonMaxBytes)
	}
	if o.Has("thinking") {
		p.Thinking = o.Enum("thinking", SessionThinkingLevels...)
	}
	return p
}

func decodeRootPermissionsSetInput(d *D, v Value) any {
	o := d.Closed(v, "input", nil, []string{"sandbox", "rules"})
	var in RootPermissionsSetInput
	if o.Has("sandbox") {
		in.Sandbox = o.Enum("sandbox", sandboxModes...)
	}
	if o.Has("rules") {
		rv, rp := o.Get("rules")
		in.Rules, in.ReplaceRules = decodePermissionRules(d, rv, rp), true
	}
	return in
}

func decodeRootPermissionsResult(d *D, v Value) any {
	o := d.Exact(v, "result", "sandbox", "rules")
	p := RootPermissions{Sandbox: o.Enum("sandbox", sandboxModes...)}
	rv, rp := o.Get("rules")
	p.Rules = decodePermissionRules(d, rv, rp)
	return p
}
