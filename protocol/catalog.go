package protocol

// This file owns the connection catalog shapes of protocol v0 (connections,
// their models, the default target, the paged catalog items) and the codecs
// of connection.catalog.query / create / update / remove /
// set-default-target.

import "github.com/maka-agent/maka/internal/baseurl"

// Connection catalog bounds.
const (
	ConnectionCatalogMaxConnections = 1024      // connections in a catalog
	ConnectionMaxModels             = 2048      // models of one connection
	ConnectionMaxEnabledModelIDs    = 512       // enabled model ids of a stored connection
	ConnectionMutationMaxEnabledIDs = 64        // enabled model ids in create / update input
	ConnectionCatalogPageMaxItems   = 128       // items of one catalog page
	ConnectionCatalogPageMaxBytes   = 48 * 1024 // encoded catalog page
	ConnectionNameMaxLength         = 256       // UTF-16 units
	ConnectionModelIDMaxLength      = 512       // UTF-16 units
	ConnectionSlugMaxLength         = 64
	ConnectionBaseURLMaxLength      = 2048 // UTF-16 units
)

const (
	connectionModelDisplayNameMaxLen  = 512
	connectionTestCheckedAtMaxLength  = 128
	connectionBasisIDMaxLength        = 64
	catalogCursorMaxConnectionIndex   = ConnectionCatalogMaxConnections - 1
	catalogCursorMaxEnabledModelIndex = ConnectionMaxEnabledModelIDs - 1
	catalogCursorMaxModelIndex        = ConnectionMaxModels - 1
)

// Provider authentication kinds.
const (
	AuthAPIKey         = "api_key"
	AuthOptionalAPIKey = "optional_api_key"
	AuthOAuthToken     = "oauth_token"
	AuthNone           = "none"
)

// ProviderTypes lists the 55 registered provider types in registry order.
var ProviderTypes = []string{
	"anthropic", "kimi-coding-plan", "minimax-coding-plan", "tencent-coding-plan",
	"volcengine-coding-plan", "tencent-token-plan", "openai", "google", "deepseek", "moonshot",
	"zai-coding-plan", "siliconflow", "vercel", "xai", "zai", "xiaomi", "xiaomi-token-plan-cn",
	"xiaomi-token-plan-sgp", "xiaomi-token-plan-ams", "cerebras", "mistral", "cohere",
	"huggingface", "zenmux", "opencode", "opencode-go", "togetherai", "fireworks-ai", "nvidia",
	"tencent-tokenhub", "stepfun", "stepfun-step-plan", "stepfun-ai-step-plan", "stepfun-ai",
	"volcengine-ark", "deepinfra", "groq", "openrouter", "alibaba", "alibaba-coding-plan-cn",
	"alibaba-coding-plan", "alibaba-token-plan-cn", "alibaba-token-plan", "cloudflare-workers-ai",
	"ollama-cloud", "ollama", "lm-studio", "localai", "openai-compatible",
	"openai-responses-compatible", "anthropic-compatible", "github-copilot", "claude-subscription",
	"openai-codex", "gemini-cli",
}

var providerAuth = func() map[string]string {
	m := make(map[string]string, len(ProviderTypes))
	for _, p := range ProviderTypes {
		m[p] = AuthAPIKey
	}
	for _, p := range []string{"github-copilot", "claude-subscription", "openai-codex", "gemini-cli"} {
		m[p] = AuthOAuthToken
	}
	m["ollama"] = AuthNone
	m["lm-studio"] = AuthNone
	m["localai"] = AuthOptionalAPIKey
	return m
}()

// ProviderAuth returns the authentication kind of a provider type
// (AuthAPIKey, AuthOptionalAPIKey, AuthOAuthToken or AuthNone), or "" for an
// unknown provider type.
func ProviderAuth(providerType string) string { return providerAuth[providerType] }

// ProviderDefaultBaseURL holds the built-in endpoint of the provider types
// that have a well-known one. A base URL equal to the provider default is
// not an override and is dropped by NormalizeConnectionBaseURL.
var ProviderDefaultBaseURL = map[string]string{
	"openai":    "https://api.openai.com/v1",
	"anthropic": "https://api.anthropic.com",
	"ollama":    "http://localhost:11434/v1",
	"lm-studio": "http://localhost:1234/v1",
}

// NormalizeConnectionBaseURL canonicalizes a connection base URL for a
// provider type: the result is "" when raw is blank or equals the provider's
// default endpoint, and an override of an oauth_token provider's endpoint is
// rejected. With an empty providerType only the canonical form is computed.
//
// The catalog decoders accept a baseUrl only in this form, so a client
// normalizes a base URL with it before connection.catalog.create or update.
// Canonical forms follow the WHATWG URL standard (new URL(s).toString())
// for absolute http and https URLs with an ASCII host and no credentials,
// query or fragment.
func NormalizeConnectionBaseURL(raw, providerType string) (string, error) {
	canonical, err := baseurl.Canonical(raw)
	if err != nil || canonical == "" || providerType == "" {
		return canonical, err
	}
	if def, ok := ProviderDefaultBaseURL[providerType]; ok {
		if c, err := baseurl.Canonical(def); err == nil && c == canonical {
			return "", nil
		}
	}
	if ProviderAuth(providerType) == AuthOAuthToken {
		return "", baseurl.Invalid("cannot override the endpoint of an OAuth provider")
	}
	return canonical, nil
}

// IsUUID reports whether s is a UUID as the runtime-policy domain accepts it
// (versions 1–8, RFC variant, either case).
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
			continue
		case 14:
			if c < '1' || c > '8' {
				return false
			}
			continue
		case 19:
			if c|0x20 != 'a' && c|0x20 != 'b' && c != '8' && c != '9' {
				return false
			}
			continue
		}
		if !(c >= '0' && c <= '9' || c|0x20 >= 'a' && c|0x20 <= 'f') {
			return false
		}
	}
	return true
}

// IsConnectionSlug reports whether s matches ^[a-z0-9][a-z0-9-]*[a-z0-9]$
// and is at most 64 characters long.
func IsConnectionSlug(s string) bool {
	if len(s) < 2 || len(s) > ConnectionSlugMaxLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}

// ConnectionVersionBasis names one revision of a connection.
type ConnectionVersionBasis struct {
	ConnectionID string `json:"connectionId"`
	Revision     int64  `json:"revision"`
}

// ConnectionTarget is a connection and one of its models.
type ConnectionTarget struct {
	ConnectionID string `json:"connectionId"`
	ModelID      string `json:"modelId"`
}

// Connection model API protocols.
const (
	APIProtocolOpenAIChat        = "openai-chat"
	APIProtocolOpenAIResponses   = "openai-responses"
	APIProtocolAnthropicMessages = "anthropic-messages"
)

// ModelCapabilities holds the optional capability flags of a model; nil
// fields are absent.
type ModelCapabilities struct {
	Chat            *bool `json:"chat,omitempty"`
	Vision          *bool `json:"vision,omitempty"`
	Reasoning       *bool `json:"reasoning,omitempty"`
	FunctionCalling *bool `json:"functionCalling,omitempty"`
	ImageGeneration *bool `json:"imageGeneration,omitempty"`
}

// ConnectionModel is a model offered by a connection.
type ConnectionModel struct {
	ID              string             `json:"id"`
	DisplayName     *string            `json:"displayName,omitempty"`
	APIProtocol     string             `json:"apiProtocol,omitempty"`
	ContextWindow   int64              `json:"contextWindow,omitempty"`
	MaxOutputTokens int64              `json:"maxOutputTokens,omitempty"`
	Capabilities    *ModelCapabilities `json:"capabilities,omitempty"`
}

// Connection test statuses and error classes.
const (
	ConnectionTestVerified    = "verified"
	ConnectionTestNeedsReauth = "needs_reauth"
	ConnectionTestError       = "error"
)

// ConnectionTestSummary is the outcome of the last connection test.
type ConnectionTestSummary struct {
	Status     string `json:"status"`
	CheckedAt  string `json:"checkedAt"`
	ErrorClass string `json:"errorClass,omitempty"`
}

var (
	apiProtocols      = []string{APIProtocolOpenAIChat, APIProtocolOpenAIResponses, APIProtocolAnthropicMessages}
	connTestStatuses  = []string{ConnectionTestVerified, ConnectionTestNeedsReauth, ConnectionTestError}
	connTestErrors    = []string{"auth", "timeout", "provider_unavailable", "network", "unknown"}
	modelSources      = []string{ModelSourceFetched, ModelSourceFallback}
	modelCapabilities = []string{"chat", "vision", "reasoning", "functionCalling", "imageGeneration"}
)

// Model sources of a connection header.
const (
	ModelSourceFetched  = "fetched"
	ModelSourceFallback = "fallback"
)

// ConnectionDraft is the connection of connection.catalog.create, normalized:
// BaseURL is "" (absent) or a canonical override of the provider default.
type ConnectionDraft struct {
	Slug            string   `json:"slug"`
	Name            string   `json:"name"`
	ProviderType    string   `json:"providerType"`
	BaseURL         string   `json:"baseUrl,omitempty"`
	Enabled         bool     `json:"enabled"`
	EnabledModelIDs []string `json:"enabledModelIds"`
}

// MarshalJSON encodes a nil id list as an empty array.
func (c ConnectionDraft) MarshalJSON() ([]byte, error) {
	type fields ConnectionDraft
	f := fields(c)
	if f.EnabledModelIDs == nil {
		f.EnabledModelIDs = []string{}
	}
	return Marshal(f)
}

// ConnectionChanges is the changes object of connection.catalog.update.
// BaseURL is canonical but not yet compared with the provider default; the
// host applies NormalizeConnectionBaseURL once the provider type is known.
type ConnectionChanges struct {
	Name            string   `json:"name"`
	BaseURL         string   `json:"baseUrl,omitempty"`
	Enabled         bool     `json:"enabled"`
	EnabledModelIDs []string `json:"enabledModelIds"`
}

// MarshalJSON encodes a nil id list as an empty array.
func (c ConnectionChanges) MarshalJSON() ([]byte, error) {
	type fields ConnectionChanges
	f := fields(c)
	if f.EnabledModelIDs == nil {
		f.EnabledModelIDs = []string{}
	}
	return Marshal(f)
}

// Catalog cursor parts, in page order.
const (
	CatalogPartConnection     = "connection"
	CatalogPartEnabledModelID = "enabled_model_id"
	CatalogPartModel          = "model"
)

// CatalogCursor is a position in the flattened catalog. ItemIndex is unused
// (and not encoded) for the connection part.
type CatalogCursor struct {
	ConnectionIndex int64
	Part            string
	ItemIndex       int64
}

// MarshalJSON encodes the cursor with itemIndex only for item parts.
func (c CatalogCursor) MarshalJSON() ([]byte, error) {
	if c.Part == CatalogPartConnection {
		return Marshal(struct {
			ConnectionIndex int64  `json:"connectionIndex"`
			Part            string `json:"part"`
		}{c.ConnectionIndex, c.Part})
	}
	return Marshal(struct {
		ConnectionIndex int64  `json:"connectionIndex"`
		Part            string `json:"part"`
		ItemIndex       int64  `json:"itemIndex"`
	}{c.ConnectionIndex, c.Part, c.ItemIndex})
}

func catalogPartOrder(part string) int {
	switch part {
	case CatalogPartConnection:
		return 0
	case CatalogPartEnabledModelID:
		return 1
	default:
		return 2
	}
}

// CompareCatalogPositions orders positions by connection index, then part
// (connection < enabled_model_id < model), then item index.
func CompareCatalogPositions(a, b CatalogCursor) int {
	if a.ConnectionIndex != b.ConnectionIndex {
		return cmpInt64(a.ConnectionIndex, b.ConnectionIndex)
	}
	if pa, pb := catalogPartOrder(a.Part), catalogPartOrder(b.Part); pa != pb {
		return pa - pb
	}
	ia, ib := a.ItemIndex, b.ItemIndex
	if a.Part == CatalogPartConnection {
		ia, ib = -1, -1
	}
	return cmpInt64(ia, ib)
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// CatalogItem is one item of a catalog page: a CatalogConnectionHeader, a
// CatalogEnabledModelIDItem or a CatalogModelItem.
type CatalogItem interface {
	// Position returns the cursor naming this item.
	Position() CatalogCursor
	isCatalogItem()
}

// CatalogConnectionHeader is a connection without its model arrays.
type CatalogConnectionHeader struct {
	ConnectionIndex     int64                  `json:"connectionIndex"`
	ConnectionID        string                 `json:"connectionId"`
	Revision            int64                  `json:"revision"`
	Slug                string                 `json:"slug"`
	Name                string                 `json:"name"`
	ProviderType        string                 `json:"providerType"`
	BaseURL             string                 `json:"baseUrl,omitempty"`
	Enabled             bool                   `json:"enabled"`
	ModelSource         string                 `json:"modelSource,omitempty"`
	ModelsFetchedAt     *int64                 `json:"modelsFetchedAt,omitempty"`
	LastTest            *ConnectionTestSummary `json:"lastTest,omitempty"`
	EnabledModelIDCount int64                  `json:"enabledModelIdCount"`
	ModelCount          int64                  `json:"modelCount"`
}

// CatalogEnabledModelIDItem is one enabled model id of a connection.
type CatalogEnabledModelIDItem struct {
	ConnectionIndex int64  `json:"connectionIndex"`
	ItemIndex       int64  `json:"itemIndex"`
	ModelID         string `json:"modelId"`
}

// CatalogModelItem is one model of a connection.
type CatalogModelItem struct {
	ConnectionIndex int64           `json:"connectionIndex"`
	ItemIndex       int64           `json:"itemIndex"`
	Model           ConnectionModel `json:"model"`
}

// Position implements CatalogItem.
func (h CatalogConnectionHeader) Position() CatalogCursor {
	return CatalogCursor{ConnectionIndex: h.ConnectionIndex, Part: CatalogPartConnection}
}

// Position implements CatalogItem.
func (e CatalogEnabledModelIDItem) Position() CatalogCursor {
	return CatalogCursor{ConnectionIndex: e.ConnectionIndex, Part: CatalogPartEnabledModelID, ItemIndex: e.ItemIndex}
}

// Position implements CatalogItem.
func (m CatalogModelItem) Position() CatalogCursor {
	return CatalogCursor{ConnectionIndex: m.ConnectionIndex, Part: CatalogPartModel, ItemIndex: m.ItemIndex}
}

func (CatalogConnectionHeader) isCatalogItem()   {}
func (CatalogEnabledModelIDItem) isCatalogItem() {}
func (CatalogModelItem) isCatalogItem()          {}

// MarshalJSON adds the kind.
func (h CatalogConnectionHeader) MarshalJSON() ([]byte, error) {
	type fields CatalogConnectionHeader
	return Marshal(struct {
		Kind string `json:"kind"`
		fields
	}{CatalogPartConnection, fields(h)})
}

// MarshalJSON adds the kind.
func (e CatalogEnabledModelIDItem) MarshalJSON() ([]byte, error) {
	type fields CatalogEnabledModelIDItem
	return Marshal(struct {
		Kind string `json:"kind"`
		fields
	}{CatalogPartEnabledModelID, fields(e)})
}

// MarshalJSON adds the kind.
func (m CatalogModelItem) MarshalJSON() ([]byte, error) {
	type fields CatalogModelItem
	return Marshal(struct {
		Kind string `json:"kind"`
		fields
	}{CatalogPartModel, fields(m)})
}

// CatalogQueryInput is {"kind":"start"} or {"kind":"continue", revision,
// cursor}; Cursor is nil for start.
type CatalogQueryInput struct {
	Revision int64
	Cursor   *CatalogCursor
}

// MarshalJSON encodes the start or continue form.
func (in CatalogQueryInput) MarshalJSON() ([]byte, error) {
	if in.Cursor == nil {
		return []byte(`{"kind":"start"}`), nil
	}
	return Marshal(struct {
		Kind     string        `json:"kind"`
		Revision int64         `json:"revision"`
		Cursor   CatalogCursor `json:"cursor"`
	}{"continue", in.Revision, *in.Cursor})
}

// CatalogQueryResult is CatalogPage or CatalogRevisionChanged.
type CatalogQueryResult interface{ isCatalogQueryResult() }

// CatalogPage is one page of the flattened catalog.
type CatalogPage struct {
	Revision        int64             `json:"revision"`
	DefaultTarget   *ConnectionTarget `json:"defaultTarget"`
	ConnectionCount int64             `json:"connectionCount"`
	Items           []CatalogItem     `json:"items"`
	NextCursor      *CatalogCursor    `json:"nextCursor"`
}

// MarshalJSON adds the kind and encodes nil items as an empty array.
func (p CatalogPage) MarshalJSON() ([]byte, error) {
	type fields CatalogPage
	f := fields(p)
	if f.Items == nil {
		f.Items = []CatalogItem{}
	}
	return Marshal(struct {
		Kind string `json:"kind"`
		fields
	}{"page", f})
}

// CatalogRevisionChanged answers a continue query whose revision is stale.
type CatalogRevisionChanged struct {
	ExpectedRevision int64 `json:"expectedRevision"`
	ActualRevision   int64 `json:"actualRevision"`
}

// MarshalJSON adds the kind.
func (r CatalogRevisionChanged) MarshalJSON() ([]byte, error) {
	type fields CatalogRevisionChanged
	return Marshal(struct {
		Kind string `json:"kind"`
		fields
	}{"revision_changed", fields(r)})
}

func (CatalogPage) isCatalogQueryResult()            {}
func (CatalogRevisionChanged) isCatalogQueryResult() {}

// CatalogCreateInput is the input of connection.catalog.create.
type CatalogCreateInput struct {
	ExpectedCatalogRevision int64           `json:"expectedCatalogRevision"`
	Connection              ConnectionDraft `json:"connection"`
}

// CatalogUpdateInput is the input of connection.catalog.update.
type CatalogUpdateInput struct {
	Expected ConnectionVersionBasis `json:"expected"`
	Changes  ConnectionChanges      `json:"changes"`
}

// CatalogRemoveInput is the input of connection.catalog.remove.
type CatalogRemoveInput struct {
	Expected ConnectionVersionBasis `json:"expected"`
}

// CatalogSetDefaultTargetInput is the input of
// connection.catalog.set-default-target; a nil Target clears the default.
type CatalogSetDefaultTargetInput struct {
	ExpectedCatalogRevision int64             `json:"expectedCatalogRevision"`
	Target                  *ConnectionTarget `json:"target"`
}

// CatalogCommitted is {"kind":"committed","catalogRevision":N}.
type CatalogCommitted struct {
	CatalogRevision int64 `json:"catalogRevision"`
}

// CatalogConnectionCommitted is a committed create or update.
type CatalogConnectionCommitted struct {
	CatalogRevision int64                  `json:"catalogRevision"`
	Connection      ConnectionVersionBasis `json:"connection"`
}

// ConnectionExists answers a create whose slug is taken.
type ConnectionExists struct {
	Slug string `json:"slug"`
}

// ConnectionStale answers an update or remove whose basis is outdated;
// Actual is nil when the connection no longer exists.
type ConnectionStale struct {
	Expected ConnectionVersionBasis  `json:"expected"`
	Actual   *ConnectionVersionBasis `json:"actual"`
}

// InvalidDefaultTarget answers a mutation whose resulting default target the
// catalog rejects.
type InvalidDefaultTarget struct {
	Target ConnectionTarget `json:"target"`
}

// MarshalJSON adds the kind.
func (r CatalogCommitted) MarshalJSON() ([]byte, error) {
	type fields CatalogCommitted
	return Marshal(struct {
		Kind string `json:"kind"`
		fields
	}{"committed", fields(r)})
}

// MarshalJSON adds the kind.
func (r CatalogConnectionCommitted) MarshalJSON() ([]byte, error) {
	type fields CatalogConnectionCommitted
	return Marshal(struct {
		Kind string `json:"kind"`
		fields
	}{"committed", fields(r)})
}

// MarshalJSON adds the kind.
func (r ConnectionExists) MarshalJSON() ([]byte, error) {
	type fields ConnectionExists
	return Marshal(struct {
		Kind string `json:"kind"`
		fields
	}{"connection_exists", fields(r)})
}

// MarshalJSON adds the kind.
func (r ConnectionStale) MarshalJSON() ([]byte, error) {
	type fields ConnectionStale
	return Marshal(struct {
		Kind string `json:"kind"`
		fields
	}{"connection_stale", fields(r)})
}

// MarshalJSON adds the kind.
func (r InvalidDefaultTarget) MarshalJSON() ([]byte, error) {
	type fields InvalidDefaultTarget
	return Marshal(struct {
		Kind string `json:"kind"`
		fields
	}{"invalid_default_target", fields(r)})
}

// CatalogCreateResult is CatalogConnectionCommitted, ConnectionExists or
// RevisionConflict.
type CatalogCreateResult interface{ isCatalogCreateResult() }

// CatalogUpdateResult is CatalogConnectionCommitted, ConnectionStale or
// InvalidDefaultTarget.
type CatalogUpdateResult interface{ isCatalogUpdateResult() }

// CatalogRemoveResult is CatalogCommitted or ConnectionStale.
type CatalogRemoveResult interface{ isCatalogRemoveResult() }

// CatalogSetDefaultTargetResult is CatalogCommitted, RevisionConflict or
// InvalidDefaultTarget.
type CatalogSetDefaultTargetResult interface{ isCatalogSetDefaultTargetResult() }

func (CatalogConnectionCommitted) isCatalogCreateResult()     {}
func (ConnectionExists) isCatalogCreateResult()               {}
func (RevisionConflict) isCatalogCreateResult()               {}
func (CatalogConnectionCommitted) isCatalogUpdateResult()     {}
func (ConnectionStale) isCatalogUpdateResult()                {}
func (InvalidDefaultTarget) isCatalogUpdateResult()           {}
func (CatalogCommitted) isCatalogRemoveResult()               {}
func (ConnectionStale) isCatalogRemoveResult()                {}
func (CatalogCommitted) isCatalogSetDefaultTargetResult()     {}
func (RevisionConflict) isCatalogSetDefaultTargetResult()     {}
func (InvalidDefaultTarget) isCatalogSetDefaultTargetResult() {}

// DecodeConnectionVersionBasis decodes a ConnectionVersionBasis.
func DecodeConnectionVersionBasis(v Value) (ConnectionVersionBasis, error) {
	d := &D{}
	b := decodeConnectionVersionBasis(d, v, "connection")
	return b, d.Err()
}

// DecodeConnectionTarget decodes a ConnectionTarget.
func DecodeConnectionTarget(v Value) (ConnectionTarget, error) {
	d := &D{}
	t := decodeConnectionTarget(d, v, "target")
	return t, d.Err()
}

// DecodeConnectionModel decodes a ConnectionModel.
func DecodeConnectionModel(v Value) (ConnectionModel, error) {
	d := &D{}
	m := decodeConnectionModel(d, v, "model")
	return m, d.Err()
}

// DecodeConnectionTestSummary decodes a ConnectionTestSummary.
func DecodeConnectionTestSummary(v Value) (ConnectionTestSummary, error) {
	d := &D{}
	t := decodeConnectionTestSummary(d, v, "lastTest")
	return t, d.Err()
}

// DecodeConnectionDraft decodes and normalizes a ConnectionDraft (without the
// protocol's 64-id mutation limit; the core limit of 512 applies).
func DecodeConnectionDraft(v Value) (ConnectionDraft, error) {
	d := &D{}
	c := decodeConnectionDraft(d, v, "connection", ConnectionMaxEnabledModelIDs)
	return c, d.Err()
}

func decodeUUID(d *D, v Value, path string) string {
	s := d.String(v, path, 1, connectionBasisIDMaxLength)
	if !d.Failed() && !IsUUID(s) {
		d.Fail(path, "not a UUID")
		return ""
	}
	return s
}

func decodeConnectionVersionBasis(d *D, v Value, path string) ConnectionVersionBasis {
	o := d.Exact(v, path, "connectionId", "revision")
	cv, cp := o.Get("connectionId")
	return ConnectionVersionBasis{
		ConnectionID: decodeUUID(d, cv, cp),
		Revision:     o.PosCount("revision"),
	}
}

func decodeConnectionTarget(d *D, v Value, path string) ConnectionTarget {
	o := d.Exact(v, path, "connectionId", "modelId")
	cv, cp := o.Get("connectionId")
	return ConnectionTarget{
		ConnectionID: decodeUUID(d, cv, cp),
		ModelID:      o.String("modelId", 1, ConnectionModelIDMaxLength),
	}
}

func decodeNullableConnectionTarget(d *D, o Obj, key string) *ConnectionTarget {
	v, p := o.Get(key)
	if d.Failed() || v.Kind() == KindNull {
		return nil
	}
	t := decodeConnectionTarget(d, v, p)
	return &t
}

func decodeConnectionModel(d *D, v Value, path string) ConnectionModel {
	o := d.Closed(v, path, []string{"id"},
		[]string{"displayName", "apiProtocol", "contextWindow", "maxOutputTokens", "capabilities"})
	m := ConnectionModel{ID: o.String("id", 1, ConnectionModelIDMaxLength)}
	if o.Has("displayName") {
		s := o.String("displayName", 0, connectionModelDisplayNameMaxLen)
		m.DisplayName = &s
	}
	if o.Has("apiProtocol") {
		m.APIProtocol = o.Enum("apiProtocol", apiProtocols...)
	}
	if o.Has("contextWindow") {
		m.ContextWindow = o.PosCount("contextWindow")
	}
	if o.Has("maxOutputTokens") {
		m.MaxOutputTokens = o.PosCount("maxOutputTokens")
	}
	if o.Has("capabilities") {
		c := o.Object("capabilities", nil, modelCapabilities)
		caps := &ModelCapabilities{}
		for _, f := range []struct {
			key string
			dst **bool
		}{
			{"chat", &caps.Chat}, {"vision", &caps.Vision}, {"reasoning", &caps.Reasoning},
			{"functionCalling", &caps.FunctionCalling}, {"imageGeneration", &caps.ImageGeneration},
		} {
			if c.Has(f.key) {
				b := c.Bool(f.key)
				*f.dst = &b
			}
		}
		m.Capabilities = caps
	}
	return m
}

func decodeConnectionTestSummary(d *D, v Value, path string) ConnectionTestSummary {
	o := d.Closed(v, path, []string{"status", "checkedAt"}, []string{"errorClass"})
	t := ConnectionTestSummary{
		Status:    o.Enum("status", connTestStatuses...),
		CheckedAt: o.String("checkedAt", 1, connectionTestCheckedAtMaxLength),
	}
	if o.Has("errorClass") {
		t.ErrorClass = o.Enum("errorClass", connTestErrors...)
	}
	return t
}

func decodeConnectionSlug(d *D, v Value, path string) string {
	s := d.String(v, path, 0, 1<<20)
	if !d.Failed() && !IsConnectionSlug(s) {
		d.Fail(path, "not a connection slug")
		return ""
	}
	return s
}

func decodeProviderType(d *D, v Value, path string) string {
	s := d.String(v, path, 0, 1<<20)
	if !d.Failed() && ProviderAuth(s) == "" {
		d.Fail(path, "provider type %q is not registered", s)
		return ""
	}
	return s
}

// decodeBaseURLInput decodes an optional input baseUrl (≤2048 UTF-16 units)
// and normalizes it for providerType ("" skips the provider rules).
func decodeBaseURLInput(d *D, o Obj, providerType string) string {
	if !o.Has("baseUrl") || d.Failed() {
		return ""
	}
	raw := o.String("baseUrl", 0, ConnectionBaseURLMaxLength)
	if d.Failed() {
		return ""
	}
	u, err := NormalizeConnectionBaseURL(raw, providerType)
	switch {
	case err != nil:
		d.Fail(o.Path()+".baseUrl", "%v", err)
		return ""
	case len(u) > ConnectionBaseURLMaxLength:
		// The canonical form is ASCII; one longer than the bound could never
		// be listed back in a catalog header.
		d.Fail(o.Path()+".baseUrl", "canonical form exceeds %d characters", ConnectionBaseURLMaxLength)
		return ""
	}
	return u
}

// decodeEnabledModelIDs decodes up to max unique model ids.
func decodeEnabledModelIDs(d *D, o Obj, max int) []string {
	items, p := o.Array("enabledModelIds", 0, max)
	out := make([]string, 0, len(items))
	seen := make(map[string]struct{}, len(items))
	for i, item := range items {
		s := d.String(item, Index(p, i), 1, ConnectionModelIDMaxLength)
		if d.Failed() {
			return out
		}
		if _, dup := seen[s]; dup {
			d.Fail(Index(p, i), "duplicate model id %q", s)
			return out
		}
		seen[s] = struct{}{}
		out = append(out, s)
	}
	return out
}

func decodeConnectionDraft(d *D, v Value, path string, maxIDs int) ConnectionDraft {
	o := d.Closed(v, path, []string{"slug", "name", "providerType", "enabled", "enabledModelIds"}, []string{"baseUrl"})
	var c ConnectionDraft
	pv, pp := o.Get("providerType")
	c.ProviderType = decodeProviderType(d, pv, pp)
	c.BaseURL = decodeBaseURLInput(d, o, c.ProviderType)
	sv, sp := o.Get("slug")
	c.Slug = decodeConnectionSlug(d, sv, sp)
	c.Name = o.String("name", 0, ConnectionNameMaxLength)
	c.Enabled = o.Bool("enabled")
	c.EnabledModelIDs = decodeEnabledModelIDs(d, o, maxIDs)
	return c
}

func decodeConnectionChanges(d *D, v Value, path string) ConnectionChanges {
	o := d.Closed(v, path, []string{"name", "enabled", "enabledModelIds"}, []string{"baseUrl"})
	return ConnectionChanges{
		Name:            o.String("name", 0, ConnectionNameMaxLength),
		BaseURL:         decodeBaseURLInput(d, o, ""),
		Enabled:         o.Bool("enabled"),
		EnabledModelIDs: decodeEnabledModelIDs(d, o, ConnectionMutationMaxEnabledIDs),
	}
}

func decodeCatalogCursor(d *D, v Value, path string) CatalogCursor {
	part := unionKind(d, v, path, "part")
	var c CatalogCursor
	switch part {
	case CatalogPartConnection:
		o := d.Exact(v, path, "connectionIndex", "part")
		c.ConnectionIndex = o.SafeInt("connectionIndex", 0, catalogCursorMaxConnectionIndex)
	case CatalogPartEnabledModelID, CatalogPartModel:
		o := d.Exact(v, path, "connectionIndex", "part", "itemIndex")
		c.ConnectionIndex = o.SafeInt("connectionIndex", 0, catalogCursorMaxConnectionIndex)
		maxItem := int64(catalogCursorMaxModelIndex)
		if part == CatalogPartEnabledModelID {
			maxItem = catalogCursorMaxEnabledModelIndex
		}
		c.ItemIndex = o.SafeInt("itemIndex", 0, maxItem)
	default:
		d.Fail(path+".part", "unknown part %q", part)
	}
	c.Part = part
	return c
}

func decodeNullableCatalogCursor(d *D, o Obj, key string) *CatalogCursor {
	v, p := o.Get(key)
	if d.Failed() || v.Kind() == KindNull {
		return nil
	}
	c := decodeCatalogCursor(d, v, p)
	return &c
}

func decodeCatalogQueryInput(d *D, v Value) any {
	switch k := unionKind(d, v, "input", "kind"); k {
	case "start":
		d.Exact(v, "input", "kind")
		return CatalogQueryInput{}
	case "continue":
		o := d.Exact(v, "input", "kind", "revision", "cursor")
		in := CatalogQueryInput{Revision: o.Count("revision")}
		cv, cp := o.Get("cursor")
		c := decodeCatalogCursor(d, cv, cp)
		in.Cursor = &c
		return in
	default:
		d.Fail("input.kind", "unknown kind %q", k)
		return nil
	}
}

func decodeCatalogHeader(d *D, v Value, path string) CatalogConnectionHeader {
	o := d.Closed(v, path,
		[]string{"kind", "connectionIndex", "connectionId", "revision", "slug", "name", "providerType",
			"enabled", "enabledModelIdCount", "modelCount"},
		[]string{"baseUrl", "modelSource", "modelsFetchedAt", "lastTest"})
	if !d.Failed() && o.Has("modelSource") != o.Has("modelsFetchedAt") {
		d.Fail(path, "modelSource and modelsFetchedAt must both be present or both absent")
	}
	var h CatalogConnectionHeader
	h.ConnectionIndex = o.SafeInt("connectionIndex", 0, catalogCursorMaxConnectionIndex)
	cv, cp := o.Get("connectionId")
	h.ConnectionID = decodeUUID(d, cv, cp)
	h.Revision = o.PosCount("revision")
	sv, sp := o.Get("slug")
	h.Slug = decodeConnectionSlug(d, sv, sp)
	h.Name = o.String("name", 0, ConnectionNameMaxLength)
	pv, pp := o.Get("providerType")
	h.ProviderType = decodeProviderType(d, pv, pp)
	if o.Has("baseUrl") && !d.Failed() {
		raw := o.String("baseUrl", 0, ConnectionBaseURLMaxLength)
		if !d.Failed() {
			if u, err := NormalizeConnectionBaseURL(raw, h.ProviderType); err != nil {
				d.Fail(path+".baseUrl", "%v", err)
			} else if u == "" || u != raw {
				d.Fail(path+".baseUrl", "not a canonical provider override")
			}
		}
		h.BaseURL = raw
	}
	h.Enabled = o.Bool("enabled")
	if o.Has("modelSource") {
		h.ModelSource = o.Enum("modelSource", modelSources...)
		n := o.Count("modelsFetchedAt")
		h.ModelsFetchedAt = &n
	}
	if o.Has("lastTest") {
		tv, tp := o.Get("lastTest")
		t := decodeConnectionTestSummary(d, tv, tp)
		h.LastTest = &t
	}
	h.EnabledModelIDCount = o.SafeInt("enabledModelIdCount", 0, ConnectionMaxEnabledModelIDs)
	h.ModelCount = o.SafeInt("modelCount", 0, ConnectionMaxModels)
	if !d.Failed() && h.ModelSource == "" && h.ModelCount != 0 {
		d.Fail(path+".modelCount", "must be 0 before model discovery")
	}
	return h
}

func decodeCatalogItem(d *D, v Value, path string) CatalogItem {
	switch k := unionKind(d, v, path, "kind"); k {
	case CatalogPartConnection:
		return decodeCatalogHeader(d, v, path)
	case CatalogPartEnabledModelID:
		o := d.Exact(v, path, "kind", "connectionIndex", "itemIndex", "modelId")
		return CatalogEnabledModelIDItem{
			ConnectionIndex: o.SafeInt("connectionIndex", 0, catalogCursorMaxConnectionIndex),
			ItemIndex:       o.SafeInt("itemIndex", 0, catalogCursorMaxEnabledModelIndex),
			ModelID:         o.String("modelId", 1, ConnectionModelIDMaxLength),
		}
	case CatalogPartModel:
		o := d.Exact(v, path, "kind", "connectionIndex", "itemIndex", "model")
		item := CatalogModelItem{
			ConnectionIndex: o.SafeInt("connectionIndex", 0, catalogCursorMaxConnectionIndex),
			ItemIndex:       o.SafeInt("itemIndex", 0, catalogCursorMaxModelIndex),
		}
		mv, mp := o.Get("model")
		item.Model = decodeConnectionModel(d, mv, mp)
		return item
	default:
		d.Fail(path+".kind", "unknown kind %q", k)
		return nil
	}
}

func decodeCatalogPage(d *D, v Value, path string) CatalogPage {
	o := d.Exact(v, path, "kind", "revision", "defaultTarget", "connectionCount", "items", "nextCursor")
	p := CatalogPage{Revision: o.Count("revision")}
	p.DefaultTarget = decodeNullableConnectionTarget(d, o, "defaultTarget")
	p.ConnectionCount = o.SafeInt("connectionCount", 0, ConnectionCatalogMaxConnections)
	items, ip := o.Array("items", 0, ConnectionCatalogPageMaxItems)
	p.Items = make([]CatalogItem, 0, len(items))
	for i, item := range items {
		it := decodeCatalogItem(d, item, Index(ip, i))
		if d.Failed() {
			return p
		}
		p.Items = append(p.Items, it)
	}
	p.NextCursor = decodeNullableCatalogCursor(d, o, "nextCursor")
	d.EncodedWithin(p, path, ConnectionCatalogPageMaxBytes)
	if d.Failed() {
		return p
	}
	if len(p.Items) == 0 {
		if p.ConnectionCount != 0 || p.DefaultTarget != nil || p.NextCursor != nil {
			d.Fail(path, "an empty page must have connectionCount 0, no default target and no next cursor")
		}
		return p
	}
	for i, it := range p.Items {
		pos := it.Position()
		if pos.ConnectionIndex >= p.ConnectionCount {
			d.Fail(Index(ip, i), "connectionIndex %d not below connectionCount %d", pos.ConnectionIndex, p.ConnectionCount)
			return p
		}
		if i > 0 && CompareCatalogPositions(p.Items[i-1].Position(), pos) >= 0 {
			d.Fail(Index(ip, i), "item does not follow the previous item")
			return p
		}
	}
	if c := p.NextCursor; c != nil {
		if c.ConnectionIndex >= p.ConnectionCount {
			d.Fail(path+".nextCursor", "connectionIndex %d not below connectionCount %d", c.ConnectionIndex, p.ConnectionCount)
		} else if CompareCatalogPositions(p.Items[len(p.Items)-1].Position(), *c) >= 0 {
			d.Fail(path+".nextCursor", "not after the last item")
		}
	}
	return p
}

func decodeCatalogQueryResult(d *D, v Value) any {
	switch k := unionKind(d, v, "result", "kind"); k {
	case "page":
		return decodeCatalogPage(d, v, "result")
	case "revision_changed":
		o := d.Exact(v, "result", "kind", "expectedRevision", "actualRevision")
		return CatalogRevisionChanged{ExpectedRevision: o.Count("expectedRevision"), ActualRevision: o.Count("actualRevision")}
	default:
		d.Fail("result.kind", "unknown kind %q", k)
		return nil
	}
}

func decodeCatalogCreateInput(d *D, v Value) any {
	o := d.Exact(v, "input", "expectedCatalogRevision", "connection")
	in := CatalogCreateInput{ExpectedCatalogRevision: o.Count("expectedCatalogRevision")}
	cv, cp := o.Get("connection")
	in.Connection = decodeConnectionDraft(d, cv, cp, ConnectionMutationMaxEnabledIDs)
	return in
}

func decodeCatalogUpdateInput(d *D, v Value) any {
	o := d.Exact(v, "input", "expected", "changes")
	ev, ep := o.Get("expected")
	in := CatalogUpdateInput{Expected: decodeConnectionVersionBasis(d, ev, ep)}
	cv, cp := o.Get("changes")
	in.Changes = decodeConnectionChanges(d, cv, cp)
	return in
}

func decodeCatalogRemoveInput(d *D, v Value) any {
	o := d.Exact(v, "input", "expected")
	ev, ep := o.Get("expected")
	return CatalogRemoveInput{Expected: decodeConnectionVersionBasis(d, ev, ep)}
}

func decodeCatalogSetDefaultTargetInput(d *D, v Value) any {
	o := d.Exact(v, "input", "expectedCatalogRevision", "target")
	return CatalogSetDefaultTargetInput{
		ExpectedCatalogRevision: o.Count("expectedCatalogRevision"),
		Target:                  decodeNullableConnectionTarget(d, o, "target"),
	}
}

func decodeCatalogCommitted(d *D, v Value) CatalogCommitted {
	o := d.Exact(v, "result", "kind", "catalogRevision")
	return CatalogCommitted{CatalogRevision: o.Count("catalogRevision")}
}

func decodeCatalogConnectionCommitted(d *D, v Value) CatalogConnectionCommitted {
	o := d.Exact(v, "result", "kind", "catalogRevision", "connection")
	r := CatalogConnectionCommitted{CatalogRevision: o.Count("catalogRevision")}
	cv, cp := o.Get("connection")
	r.Connection = decodeConnectionVersionBasis(d, cv, cp)
	return r
}

func decodeConnectionStale(d *D, v Value) ConnectionStale {
	o := d.Exact(v, "result", "kind", "expected", "actual")
	ev, ep := o.Get("expected")
	r := ConnectionStale{Expected: decodeConnectionVersionBasis(d, ev, ep)}
	av, ap := o.Get("actual")
	if !d.Failed() && av.Kind() != KindNull {
		a := decodeConnectionVersionBasis(d, av, ap)
		r.Actual = &a
	}
	return r
}

func decodeInvalidDefaultTarget(d *D, v Value) InvalidDefaultTarget {
	o := d.Exact(v, "result", "kind", "target")
	tv, tp := o.Get("target")
	return InvalidDefaultTarget{Target: decodeConnectionTarget(d, tv, tp)}
}

func decodeCatalogCreateResult(d *D, v Value) any {
	switch k := unionKind(d, v, "result", "kind"); k {
	case "committed":
		return decodeCatalogConnectionCommitted(d, v)
	case "connection_exists":
		o := d.Exact(v, "result", "kind", "slug")
		sv, sp := o.Get("slug")
		return ConnectionExists{Slug: decodeConnectionSlug(d, sv, sp)}
	case "revision_conflict":
		return decodeRevisionConflict(d, v, "result")
	default:
		d.Fail("result.kind", "unknown kind %q", k)
		return nil
	}
}

func decodeCatalogUpdateResult(d *D, v Value) any {
	switch k := unionKind(d, v, "result", "kind"); k {
	case "committed":
		return decodeCatalogConnectionCommitted(d, v)
	case "connection_stale":
		return decodeConnectionStale(d, v)
	case "invalid_default_target":
		return decodeInvalidDefaultTarget(d, v)
	default:
		d.Fail("result.kind", "unknown kind %q", k)
		return nil
	}
}

func decodeCatalogRemoveResult(d *D, v Value) any {
	switch k := unionKind(d, v, "result", "kind"); k {
	case "committed":
		return decodeCatalogCommitted(d, v)
	case "connection_stale":
		return decodeConnectionStale(d, v)
	default:
		d.Fail("result.kind", "unknown kind %q", k)
		return nil
	}
}

func decodeCatalogSetDefaultTargetResult(d *D, v Value) any {
	switch k := unionKind(d, v, "result", "kind"); k {
	case "committed":
		return decodeCatalogCommitted(d, v)
	case "revision_conflict":
		return decodeRevisionConflict(d, v, "result")
	case "invalid_default_target":
		return decodeInvalidDefaultTarget(d, v)
	default:
		d.Fail("result.kind", "unknown kind %q", k)
		return nil
	}
}

func init() {
	registerCodec(OpConnectionCatalogQuery, decodeCatalogQueryInput, decodeCatalogQueryResult)
	registerCodec(OpConnectionCatalogCreate, decodeCatalogCreateInput, decodeCatalogCreateResult)
	registerCodec(OpConnectionCatalogUpdate, decodeCatalogUpdateInput, decodeCatalogUpdateResult)
	registerCodec(OpConnectionCatalogRemove, decodeCatalogRemoveInput, decodeCatalogRemoveResult)
	registerCodec(OpConnectionCatalogSetDefaultTarget, decodeCatalogSetDefaultTargetInput, decodeCatalogSetDefaultTargetResult)
}
