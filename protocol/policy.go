package protocol

import (
	"errors"
	"strings"
)

// This file owns the RuntimePolicy shapes of protocol v0 and the codecs of
// runtime.policy.query and runtime.policy.mutate.

// RuntimePolicySnapshotMaxBytes bounds an encoded RuntimePolicySnapshot.
const RuntimePolicySnapshotMaxBytes = 48 * 1024

// Network proxy protocols.
const (
	ProxyProtocolHTTP   = "http"
	ProxyProtocolHTTPS  = "https"
	ProxyProtocolSOCKS5 = "socks5"
)

// Chat default permission modes.
const (
	PermissionModeAsk     = "ask"
	PermissionModeExecute = "execute"
	PermissionModeBypass  = "bypass"
)

// WebSearchProviderTavily is the only web search provider.
const WebSearchProviderTavily = "tavily"

var (
	proxyProtocols   = []string{ProxyProtocolHTTP, ProxyProtocolHTTPS, ProxyProtocolSOCKS5}
	permissionModes  = []string{PermissionModeAsk, PermissionModeExecute, PermissionModeBypass}
	webSearchVendors = []string{WebSearchProviderTavily}
)

// PolicyOperationKind is the kind of a runtime.policy.mutate operation.
type PolicyOperationKind string

// Runtime policy mutation kinds, one per policy section.
const (
	PolicySetNetworkProxy          PolicyOperationKind = "set_network_proxy"
	PolicySetPersonalization       PolicyOperationKind = "set_personalization"
	PolicySetMemory                PolicyOperationKind = "set_memory"
	PolicySetWorkspaceInstructions PolicyOperationKind = "set_workspace_instructions"
	PolicySetPrivacy               PolicyOperationKind = "set_privacy"
	PolicySetChatDefaults          PolicyOperationKind = "set_chat_defaults"
	PolicySetWebSearch             PolicyOperationKind = "set_web_search"
)

var policyOperationKinds = []string{
	string(PolicySetNetworkProxy), string(PolicySetPersonalization), string(PolicySetMemory),
	string(PolicySetWorkspaceInstructions), string(PolicySetPrivacy), string(PolicySetChatDefaults),
	string(PolicySetWebSearch),
}

// RuntimePolicySection is one section of a RuntimePolicy; each section type
// is also the value of the mutation that replaces it.
type RuntimePolicySection interface {
	// PolicyOperationKind names the mutation that sets this section.
	PolicyOperationKind() PolicyOperationKind
}

// NetworkProxyPolicy is RuntimePolicy.networkProxy.
type NetworkProxyPolicy struct {
	Enabled           bool     `json:"enabled"`
	Protocol          string   `json:"protocol"`
	Host              string   `json:"host"`
	Port              int64    `json:"port"`
	AuthEnabled       bool     `json:"authEnabled"`
	Username          string   `json:"username"`
	BypassList        []string `json:"bypassList"`
	AutoBypassDomains []string `json:"autoBypassDomains"`
}

// MarshalJSON encodes nil lists as empty arrays.
func (p NetworkProxyPolicy) MarshalJSON() ([]byte, error) {
	type fields NetworkProxyPolicy
	f := fields(p)
	if f.BypassList == nil {
		f.BypassList = []string{}
	}
	if f.AutoBypassDomains == nil {
		f.AutoBypassDomains = []string{}
	}
	return Marshal(f)
}

// PersonalizationPolicy is RuntimePolicy.personalization.
type PersonalizationPolicy struct {
	DisplayName   string `json:"displayName"`
	AssistantTone string `json:"assistantTone"`
}

// MemoryPolicy is RuntimePolicy.memory.
type MemoryPolicy struct {
	Enabled          bool `json:"enabled"`
	AgentReadEnabled bool `json:"agentReadEnabled"`
}

// WorkspaceInstructionsPolicy is RuntimePolicy.workspaceInstructions.
type WorkspaceInstructionsPolicy struct {
	Enabled bool `json:"enabled"`
}

// PrivacyPolicy is RuntimePolicy.privacy.
type PrivacyPolicy struct {
	IncognitoActive bool `json:"incognitoActive"`
}

// ChatDefaultsPolicy is RuntimePolicy.chatDefaults.
type ChatDefaultsPolicy struct {
	PermissionMode string `json:"permissionMode"`
}

// WebSearchPolicy is RuntimePolicy.webSearch.
type WebSearchPolicy struct {
	Enabled         bool   `json:"enabled"`
	DefaultProvider string `json:"defaultProvider"`
}

// PolicyOperationKind implements RuntimePolicySection.
func (NetworkProxyPolicy) PolicyOperationKind() PolicyOperationKind { return PolicySetNetworkProxy }

// PolicyOperationKind implements RuntimePolicySection.
func (PersonalizationPolicy) PolicyOperationKind() PolicyOperationKind {
	return PolicySetPersonalization
}

// PolicyOperationKind implements RuntimePolicySection.
func (MemoryPolicy) PolicyOperationKind() PolicyOperationKind { return PolicySetMemory }

// PolicyOperationKind implements RuntimePolicySection.
func (WorkspaceInstructionsPolicy) PolicyOperationKind() PolicyOperationKind {
	return PolicySetWorkspaceInstructions
}

// PolicyOperationKind implements RuntimePolicySection.
func (PrivacyPolicy) PolicyOperationKind() PolicyOperationKind { return PolicySetPrivacy }

// PolicyOperationKind implements RuntimePolicySection.
func (ChatDefaultsPolicy) PolicyOperationKind() PolicyOperationKind { return PolicySetChatDefaults }

// PolicyOperationKind implements RuntimePolicySection.
func (WebSearchPolicy) PolicyOperationKind() PolicyOperationKind { return PolicySetWebSearch }

// RuntimePolicy is the host-wide runtime policy.
type RuntimePolicy struct {
	NetworkProxy          NetworkProxyPolicy          `json:"networkProxy"`
	Personalization       PersonalizationPolicy       `json:"personalization"`
	Memory                MemoryPolicy                `json:"memory"`
	WorkspaceInstructions WorkspaceInstructionsPolicy `json:"workspaceInstructions"`
	Privacy               PrivacyPolicy               `json:"privacy"`
	ChatDefaults          ChatDefaultsPolicy          `json:"chatDefaults"`
	WebSearch             WebSearchPolicy             `json:"webSearch"`
}

// DefaultRuntimePolicy returns the core defaults: proxy disabled (http,
// 127.0.0.1:7890, no auth), empty personalization, memory on with agent
// reads off, workspace instructions on, incognito off, permission mode ask,
// web search off with tavily.
func DefaultRuntimePolicy() RuntimePolicy {
	return RuntimePolicy{
		NetworkProxy: NetworkProxyPolicy{
			Enabled:           false,
			Protocol:          ProxyProtocolHTTP,
			Host:              "127.0.0.1",
			Port:              7890,
			AuthEnabled:       false,
			Username:          "",
			BypassList:        []string{"metaso.cn", "baidu.com"},
			AutoBypassDomains: []string{"localhost", "127.0.0.1", "::1", "192.168.*", "10.*", "*.local"},
		},
		Personalization:       PersonalizationPolicy{DisplayName: "", AssistantTone: ""},
		Memory:                MemoryPolicy{Enabled: true, AgentReadEnabled: false},
		WorkspaceInstructions: WorkspaceInstructionsPolicy{Enabled: true},
		Privacy:               PrivacyPolicy{IncognitoActive: false},
		ChatDefaults:          ChatDefaultsPolicy{PermissionMode: PermissionModeAsk},
		WebSearch:             WebSearchPolicy{Enabled: false, DefaultProvider: WebSearchProviderTavily},
	}
}

// With returns a copy of p with section s replaced.
func (p RuntimePolicy) With(s RuntimePolicySection) RuntimePolicy {
	switch x := s.(type) {
	case NetworkProxyPolicy:
		p.NetworkProxy = x
	case PersonalizationPolicy:
		p.Personalization = x
	case MemoryPolicy:
		p.Memory = x
	case WorkspaceInstructionsPolicy:
		p.WorkspaceInstructions = x
	case PrivacyPolicy:
		p.Privacy = x
	case ChatDefaultsPolicy:
		p.ChatDefaults = x
	case WebSearchPolicy:
		p.WebSearch = x
	}
	return p
}

// RuntimePolicySnapshot is the result of runtime.policy.query.
type RuntimePolicySnapshot struct {
	Revision int64         `json:"revision"`
	Policy   RuntimePolicy `json:"policy"`
}

// RuntimePolicyQueryInput is the input of runtime.policy.query: {}.
type RuntimePolicyQueryInput struct{}

// RuntimePolicyOperation is {kind, value}; the kind follows from the
// section type of Value.
type RuntimePolicyOperation struct {
	Value RuntimePolicySection
}

// Kind returns the operation kind ("" when Value is nil).
func (op RuntimePolicyOperation) Kind() PolicyOperationKind {
	if op.Value == nil {
		return ""
	}
	return op.Value.PolicyOperationKind()
}

// Apply returns policy with the operation's section replaced.
func (op RuntimePolicyOperation) Apply(policy RuntimePolicy) RuntimePolicy {
	return policy.With(op.Value)
}

// MarshalJSON encodes {"kind":..., "value":...}.
func (op RuntimePolicyOperation) MarshalJSON() ([]byte, error) {
	if op.Value == nil {
		return nil, errors.New("runtime policy operation without a value")
	}
	return Marshal(struct {
		Kind  PolicyOperationKind  `json:"kind"`
		Value RuntimePolicySection `json:"value"`
	}{op.Value.PolicyOperationKind(), op.Value})
}

// RuntimePolicyMutateInput is the input of runtime.policy.mutate.
type RuntimePolicyMutateInput struct {
	ExpectedRevision int64                  `json:"expectedRevision"`
	Operation        RuntimePolicyOperation `json:"operation"`
}

// RuntimePolicyMutateResult is PolicyCommitted or RevisionConflict.
type RuntimePolicyMutateResult interface{ isRuntimePolicyMutateResult() }

// PolicyCommitted is {"kind":"committed","revision":N} of runtime.policy.mutate.
type PolicyCommitted struct {
	Revision int64 `json:"revision"`
}

// MarshalJSON adds the kind.
func (r PolicyCommitted) MarshalJSON() ([]byte, error) {
	type fields PolicyCommitted
	return Marshal(struct {
		Kind string `json:"kind"`
		fields
	}{"committed", fields(r)})
}

// RevisionConflict is {"kind":"revision_conflict","expectedRevision","actualRevision"}.
type RevisionConflict struct {
	ExpectedRevision int64 `json:"expectedRevision"`
	ActualRevision   int64 `json:"actualRevision"`
}

// MarshalJSON adds the kind.
func (r RevisionConflict) MarshalJSON() ([]byte, error) {
	type fields RevisionConflict
	return Marshal(struct {
		Kind string `json:"kind"`
		fields
	}{"revision_conflict", fields(r)})
}

func (PolicyCommitted) isRuntimePolicyMutateResult()  {}
func (RevisionConflict) isRuntimePolicyMutateResult() {}

// DecodeRuntimePolicy decodes a RuntimePolicy that must already be in
// canonical form (equal to its normalization).
func DecodeRuntimePolicy(v Value) (RuntimePolicy, error) {
	d := &D{}
	p := decodeRuntimePolicy(d, v, "policy", true)
	return p, d.Err()
}

// NormalizeRuntimePolicy decodes a RuntimePolicy and returns its normalized
// form (proxy host trimmed).
func NormalizeRuntimePolicy(v Value) (RuntimePolicy, error) {
	d := &D{}
	p := decodeRuntimePolicy(d, v, "policy", false)
	return p, d.Err()
}

// DecodeRuntimePolicySnapshot decodes a snapshot as runtime.policy.query
// returns it: canonical policy, encoded size within the limit.
func DecodeRuntimePolicySnapshot(v Value) (RuntimePolicySnapshot, error) {
	d := &D{}
	s := decodeRuntimePolicySnapshot(d, v, "snapshot")
	return s, d.Err()
}

func decodeRuntimePolicySnapshot(d *D, v Value, path string) RuntimePolicySnapshot {
	o := d.Exact(v, path, "revision", "policy")
	s := RuntimePolicySnapshot{Revision: o.Count("revision")}
	pv, pp := o.Get("policy")
	s.Policy = decodeRuntimePolicy(d, pv, pp, true)
	d.EncodedWithin(s, path, RuntimePolicySnapshotMaxBytes)
	return s
}

func decodeRuntimePolicy(d *D, v Value, path string, canonical bool) RuntimePolicy {
	o := d.Exact(v, path, "networkProxy", "personalization", "memory", "workspaceInstructions",
		"privacy", "chatDefaults", "webSearch")
	var p RuntimePolicy
	sv, sp := o.Get("networkProxy")
	p.NetworkProxy = decodeNetworkProxy(d, sv, sp, canonical)
	sv, sp = o.Get("personalization")
	p.Personalization = decodePersonalization(d, sv, sp)
	sv, sp = o.Get("memory")
	p.Memory = decodeMemoryPolicy(d, sv, sp)
	sv, sp = o.Get("workspaceInstructions")
	p.WorkspaceInstructions = decodeWorkspaceInstructions(d, sv, sp)
	sv, sp = o.Get("privacy")
	p.Privacy = decodePrivacy(d, sv, sp)
	sv, sp = o.Get("chatDefaults")
	p.ChatDefaults = decodeChatDefaults(d, sv, sp)
	sv, sp = o.Get("webSearch")
	p.WebSearch = decodeWebSearch(d, sv, sp)
	return p
}

// decodeNetworkProxy decodes and normalizes a proxy section; with canonical
// set, a host that normalization would change is rejected.
func decodeNetworkProxy(d *D, v Value, path string, canonical bool) NetworkProxyPolicy {
	o := d.Exact(v, path, "enabled", "protocol", "host", "port", "authEnabled", "username",
		"bypassList", "autoBypassDomains")
	var p NetworkProxyPolicy
	p.Enabled = o.Bool("enabled")
	raw := o.String("host", 0, 255)
	if !d.Failed() && strings.ContainsFunc(raw, func(r rune) bool { return r <= 0x1f || r >= 0x7f && r <= 0x9f }) {
		d.Fail(path+".host", "contains control characters")
	}
	p.Host = jsTrim(raw)
	if !d.Failed() {
		switch {
		case canonical && p.Host != raw:
			d.Fail(path+".host", "not canonical (surrounding white space)")
		case p.Enabled && p.Host == "":
			d.Fail(path+".host", "empty while the proxy is enabled")
		}
	}
	p.Protocol = o.Enum("protocol", proxyProtocols...)
	p.Port = o.SafeInt("port", 1, 65535)
	p.AuthEnabled = o.Bool("authEnabled")
	p.Username = o.String("username", 0, 256)
	p.BypassList = decodePolicyStringList(d, o, "bypassList")
	p.AutoBypassDomains = decodePolicyStringList(d, o, "autoBypassDomains")
	return p
}

// decodePolicyStringList decodes up to 256 unique non-empty strings of at
// most 512 UTF-16 units.
func decodePolicyStringList(d *D, o Obj, key string) []string {
	items, p := o.Array(key, 0, 256)
	out := make([]string, 0, len(items))
	seen := make(map[string]struct{}, len(items))
	for i, item := range items {
		s := d.String(item, Index(p, i), 1, 512)
		if d.Failed() {
			return out
		}
		if _, dup := seen[s]; dup {
			d.Fail(Index(p, i), "duplicate entry %q", s)
			return out
		}
		seen[s] = struct{}{}
		out = append(out, s)
	}
	return out
}

func decodePersonalization(d *D, v Value, path string) PersonalizationPolicy {
	o := d.Exact(v, path, "displayName", "assistantTone")
	return PersonalizationPolicy{
		DisplayName:   o.String("displayName", 0, 256),
		AssistantTone: o.String("assistantTone", 0, 4096),
	}
}

func decodeMemoryPolicy(d *D, v Value, path string) MemoryPolicy {
	o := d.Exact(v, path, "enabled", "agentReadEnabled")
	return MemoryPolicy{Enabled: o.Bool("enabled"), AgentReadEnabled: o.Bool("agentReadEnabled")}
}

func decodeWorkspaceInstructions(d *D, v Value, path string) WorkspaceInstructionsPolicy {
	o := d.Exact(v, path, "enabled")
	return WorkspaceInstructionsPolicy{Enabled: o.Bool("enabled")}
}

func decodePrivacy(d *D, v Value, path string) PrivacyPolicy {
	o := d.Exact(v, path, "incognitoActive")
	return PrivacyPolicy{IncognitoActive: o.Bool("incognitoActive")}
}

func decodeChatDefaults(d *D, v Value, path string) ChatDefaultsPolicy {
	o := d.Exact(v, path, "permissionMode")
	return ChatDefaultsPolicy{PermissionMode: o.Enum("permissionMode", permissionModes...)}
}

func decodeWebSearch(d *D, v Value, path string) WebSearchPolicy {
	o := d.Exact(v, path, "enabled", "defaultProvider")
	return WebSearchPolicy{Enabled: o.Bool("enabled"), DefaultProvider: o.Enum("defaultProvider", webSearchVendors...)}
}

func decodeRuntimePolicyMutateInput(d *D, v Value) RuntimePolicyMutateInput {
	o := d.Exact(v, "input", "expectedRevision", "operation")
	in := RuntimePolicyMutateInput{ExpectedRevision: o.Count("expectedRevision")}
	op := o.Object("operation", []string{"kind", "value"}, nil)
	kind := PolicyOperationKind(op.Enum("kind", policyOperationKinds...))
	if d.Failed() {
		return in
	}
	sv, sp := op.Get("value")
	switch kind {
	case PolicySetNetworkProxy:
		in.Operation.Value = decodeNetworkProxy(d, sv, sp, false)
	case PolicySetPersonalization:
		in.Operation.Value = decodePersonalization(d, sv, sp)
	case PolicySetMemory:
		in.Operation.Value = decodeMemoryPolicy(d, sv, sp)
	case PolicySetWorkspaceInstructions:
		in.Operation.Value = decodeWorkspaceInstructions(d, sv, sp)
	case PolicySetPrivacy:
		in.Operation.Value = decodePrivacy(d, sv, sp)
	case PolicySetChatDefaults:
		in.Operation.Value = decodeChatDefaults(d, sv, sp)
	case PolicySetWebSearch:
		in.Operation.Value = decodeWebSearch(d, sv, sp)
	}
	return in
}

// unionKind returns the string discriminator key of an object, failing when
// v is not an object or the key is missing or not a string.
func unionKind(d *D, v Value, path, key string) string {
	d.Open(v, path)
	if d.Failed() {
		return ""
	}
	k, ok := v.Get(key)
	if !ok {
		d.Fail(path, "missing key %q", key)
		return ""
	}
	return d.String(k, path+"."+key, 0, 1<<20)
}

func decodeRevisionConflict(d *D, v Value, path string) RevisionConflict {
	o := d.Exact(v, path, "kind", "expectedRevision", "actualRevision")
	o.Literal("kind", "revision_conflict")
	return RevisionConflict{ExpectedRevision: o.Count("expectedRevision"), ActualRevision: o.Count("actualRevision")}
}

func decodeRuntimePolicyMutateResult(d *D, v Value) any {
	switch k := unionKind(d, v, "result", "kind"); k {
	case "committed":
		o := d.Exact(v, "result", "kind", "revision")
		return PolicyCommitted{Revision: o.Count("revision")}
	case "revision_conflict":
		return decodeRevisionConflict(d, v, "result")
	default:
		d.Fail("result.kind", "unknown kind %q", k)
		return nil
	}
}

func init() {
	registerEmptyInput(OpRuntimePolicyQuery, RuntimePolicyQueryInput{})
	registerCodec(OpRuntimePolicyQuery,
		func(d *D, v Value) any {
			d.Exact(v, "input")
			return RuntimePolicyQueryInput{}
		},
		func(d *D, v Value) any { return decodeRuntimePolicySnapshot(d, v, "result") })
	registerCodec(OpRuntimePolicyMutate,
		func(d *D, v Value) any { return decodeRuntimePolicyMutateInput(d, v) },
		decodeRuntimePolicyMutateResult)
}
