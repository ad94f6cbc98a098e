package protocol

import (
	"fmt"

	"github.com/maka-agent/maka/internal/wireredact"
)

// This file owns the credential vault shapes of protocol v0 and the codecs
// of credential.vault.query / set / delete.

// CredentialSecretMaxBytes bounds a secret in UTF-8 bytes.
const CredentialSecretMaxBytes = 10 * 1024

// Credential locator scopes and kinds.
const (
	CredentialScopeConnection   = "connection"
	CredentialScopeWebSearch    = "web_search"
	CredentialScopeNetworkProxy = "network_proxy"

	CredentialKindAPIKey     = "api_key"
	CredentialKindOAuthToken = "oauth_token"
	CredentialKindPassword   = "password"
)

// CredentialLocator addresses one secret. It is a union on Scope:
// connection (ConnectionID, Kind api_key|oauth_token), web_search (Provider
// tavily, Kind api_key) and network_proxy (Kind password). Fields a scope
// does not use are empty. The struct is comparable and usable as a map key.
type CredentialLocator struct {
	Scope        string
	ConnectionID string
	Provider     string
	Kind         string
}

// ConnectionCredential locates a connection's secret.
func ConnectionCredential(connectionID, kind string) CredentialLocator {
	return CredentialLocator{Scope: CredentialScopeConnection, ConnectionID: connectionID, Kind: kind}
}

// WebSearchCredential locates the API key of a web search provider.
func WebSearchCredential(provider string) CredentialLocator {
	return CredentialLocator{Scope: CredentialScopeWebSearch, Provider: provider, Kind: CredentialKindAPIKey}
}

// NetworkProxyCredential locates the network proxy password.
func NetworkProxyCredential() CredentialLocator {
	return CredentialLocator{Scope: CredentialScopeNetworkProxy, Kind: CredentialKindPassword}
}

// MarshalJSON encodes the exact key set of the locator's scope.
func (l CredentialLocator) MarshalJSON() ([]byte, error) {
	switch l.Scope {
	case CredentialScopeConnection:
		return Marshal(struct {
			Scope        string `json:"scope"`
			ConnectionID string `json:"connectionId"`
			Kind         string `json:"kind"`
		}{l.Scope, l.ConnectionID, l.Kind})
	case CredentialScopeWebSearch:
		return Marshal(struct {
			Scope    string `json:"scope"`
			Provider string `json:"provider"`
			Kind     string `json:"kind"`
		}{l.Scope, l.Provider, l.Kind})
	case CredentialScopeNetworkProxy:
		return Marshal(struct {
			Scope string `json:"scope"`
			Kind  string `json:"kind"`
		}{l.Scope, l.Kind})
	}
	return nil, fmt.Errorf("credential locator with unknown scope %q", l.Scope)
}

// CredentialVersionBasis names one revision of a stored credential.
type CredentialVersionBasis struct {
	Locator      CredentialLocator `json:"locator"`
	CredentialID string            `json:"credentialId"`
	Revision     int64             `json:"revision"`
}

// CredentialStatus describes a credential without its secret. Unconfigured
// statuses have nil CredentialID, Revision and UpdatedAt (encoded as null).
type CredentialStatus struct {
	Locator      CredentialLocator `json:"locator"`
	Configured   bool              `json:"configured"`
	CredentialID *string           `json:"credentialId"`
	Revision     *int64            `json:"revision"`
	UpdatedAt    *int64            `json:"updatedAt"`
}

// UnconfiguredCredential returns the status of a locator without a secret.
func UnconfiguredCredential(l CredentialLocator) CredentialStatus {
	return CredentialStatus{Locator: l}
}

// ConfiguredCredential returns the status of a stored secret.
func ConfiguredCredential(l CredentialLocator, credentialID string, revision, updatedAt int64) CredentialStatus {
	return CredentialStatus{Locator: l, Configured: true, CredentialID: &credentialID, Revision: &revision, UpdatedAt: &updatedAt}
}

// CredentialExpectation is the expected basis of credential.vault.set.
type CredentialExpectation struct {
	CredentialID string `json:"credentialId"`
	Revision     int64  `json:"revision"`
}

// CredentialVaultQueryInput is the input of credential.vault.query.
type CredentialVaultQueryInput struct {
	Locator CredentialLocator `json:"locator"`
}

// CredentialVaultSetInput is the input of credential.vault.set; a nil
// Expected means no credential is expected to exist.
type CredentialVaultSetInput struct {
	Locator  CredentialLocator      `json:"locator"`
	Expected *CredentialExpectation `json:"expected"`
	Secret   string                 `json:"secret"`
}

// String describes the input with the secret redacted.
func (in CredentialVaultSetInput) String() string {
	exp := "null"
	if in.Expected != nil {
		exp = fmt.Sprintf("{%s %d}", in.Expected.CredentialID, in.Expected.Revision)
	}
	return fmt.Sprintf("{locator:%+v expected:%s secret:%s}", in.Locator, exp, wireredact.Marker)
}

// GoString is String, so %#v never prints the secret either.
func (in CredentialVaultSetInput) GoString() string { return in.String() }

// CredentialVaultDeleteInput is the input of credential.vault.delete.
type CredentialVaultDeleteInput struct {
	Expected CredentialVersionBasis `json:"expected"`
}

// CredentialVaultQueryResult is CredentialStatusResult or
// CredentialConnectionNotFound.
type CredentialVaultQueryResult interface{ isCredentialVaultQueryResult() }

// CredentialVaultMutateResult (set and delete) is CredentialCommitted,
// CredentialConnectionNotFound or CredentialStale.
type CredentialVaultMutateResult interface{ isCredentialVaultMutateResult() }

// CredentialStatusResult is {"kind":"status","status":...}.
type CredentialStatusResult struct {
	Status CredentialStatus `json:"status"`
}

// CredentialConnectionNotFound is {"kind":"connection_not_found"}.
type CredentialConnectionNotFound struct{}

// CredentialCommitted is a committed set (configured status) or delete
// (unconfigured status).
type CredentialCommitted struct {
	VaultRevision int64            `json:"vaultRevision"`
	Status        CredentialStatus `json:"status"`
}

// CredentialStale answers a set or delete whose expectation is outdated.
type CredentialStale struct {
	Expected *CredentialVersionBasis `json:"expected"`
	Actual   *CredentialVersionBasis `json:"actual"`
}

// MarshalJSON adds the kind.
func (r CredentialStatusResult) MarshalJSON() ([]byte, error) {
	type fields CredentialStatusResult
	return Marshal(struct {
		Kind string `json:"kind"`
		fields
	}{"status", fields(r)})
}

// MarshalJSON encodes {"kind":"connection_not_found"}.
func (CredentialConnectionNotFound) MarshalJSON() ([]byte, error) {
	return []byte(`{"kind":"connection_not_found"}`), nil
}

// MarshalJSON adds the kind.
func (r CredentialCommitted) MarshalJSON() ([]byte, error) {
	type fields CredentialCommitted
	return Marshal(struct {
		Kind string `json:"kind"`
		fields
	}{"committed", fields(r)})
}

// MarshalJSON adds the kind.
func (r CredentialStale) MarshalJSON() ([]byte, error) {
	type fields CredentialStale
	return Marshal(struct {
		Kind string `json:"kind"`
		fields
	}{"credential_stale", fields(r)})
}

func (CredentialStatusResult) isCredentialVaultQueryResult()        {}
func (CredentialConnectionNotFound) isCredentialVaultQueryResult()  {}
func (CredentialCommitted) isCredentialVaultMutateResult()          {}
func (CredentialConnectionNotFound) isCredentialVaultMutateResult() {}
func (CredentialStale) isCredentialVaultMutateResult()              {}

// DecodeCredentialLocator decodes a CredentialLocator.
func DecodeCredentialLocator(v Value) (CredentialLocator, error) {
	d := &D{}
	l := decodeCredentialLocator(d, v, "locator")
	return l, d.Err()
}

// DecodeCredentialVersionBasis decodes a CredentialVersionBasis.
func DecodeCredentialVersionBasis(v Value) (CredentialVersionBasis, error) {
	d := &D{}
	b := decodeCredentialVersionBasis(d, v, "expected")
	return b, d.Err()
}

// DecodeCredentialStatus decodes a CredentialStatus.
func DecodeCredentialStatus(v Value) (CredentialStatus, error) {
	d := &D{}
	s := decodeCredentialStatus(d, v, "status")
	return s, d.Err()
}

func decodeCredentialLocator(d *D, v Value, path string) CredentialLocator {
	var l CredentialLocator
	switch scope := unionKind(d, v, path, "scope"); scope {
	case CredentialScopeConnection:
		o := d.Exact(v, path, "scope", "connectionId", "kind")
		cv, cp := o.Get("connectionId")
		l = CredentialLocator{Scope: scope, ConnectionID: decodeUUID(d, cv, cp),
			Kind: o.Enum("kind", CredentialKindAPIKey, CredentialKindOAuthToken)}
	case CredentialScopeWebSearch:
		o := d.Exact(v, path, "scope", "provider", "kind")
		l = CredentialLocator{Scope: scope, Provider: o.Enum("provider", webSearchVendors...),
			Kind: o.Enum("kind", CredentialKindAPIKey)}
	case CredentialScopeNetworkProxy:
		o := d.Exact(v, path, "scope", "kind")
		l = CredentialLocator{Scope: scope, Kind: o.Enum("kind", CredentialKindPassword)}
	default:
		d.Fail(path+".scope", "unknown scope %q", scope)
	}
	return l
}

func decodeCredentialVersionBasis(d *D, v Value, path string) CredentialVersionBasis {
	o := d.Exact(v, path, "locator", "credentialId", "revision")
	lv, lp := o.Get("locator")
	b := CredentialVersionBasis{Locator: decodeCredentialLocator(d, lv, lp)}
	iv, ip := o.Get("credentialId")
	b.CredentialID = decodeUUID(d, iv, ip)
	b.Revision = o.PosCount("revision")
	return b
}

func decodeNullableCredentialBasis(d *D, o Obj, key string) *CredentialVersionBasis {
	v, p := o.Get(key)
	if d.Failed() || v.Kind() == KindNull {
		return nil
	}
	b := decodeCredentialVersionBasis(d, v, p)
	return &b
}

func decodeCredentialStatus(d *D, v Value, path string) CredentialStatus {
	o := d.Exact(v, path, "locator", "configured", "credentialId", "revision", "updatedAt")
	lv, lp := o.Get("locator")
	s := CredentialStatus{Locator: decodeCredentialLocator(d, lv, lp), Configured: o.Bool("configured")}
	if d.Failed() {
		return s
	}
	if !s.Configured {
		for _, k := range []string{"credentialId", "revision", "updatedAt"} {
			if !o.IsNull(k) {
				d.Fail(path+"."+k, "must be null when not configured")
				return s
			}
		}
		return s
	}
	iv, ip := o.Get("credentialId")
	id := decodeUUID(d, iv, ip)
	rev := o.PosCount("revision")
	at := o.Count("updatedAt")
	s.CredentialID, s.Revision, s.UpdatedAt = &id, &rev, &at
	return s
}

func decodeCredentialVaultQueryInput(d *D, v Value) any {
	o := d.Exact(v, "input", "locator")
	lv, lp := o.Get("locator")
	return CredentialVaultQueryInput{Locator: decodeCredentialLocator(d, lv, lp)}
}

func decodeCredentialVaultSetInput(d *D, v Value) any {
	o := d.Exact(v, "input", "locator", "expected", "secret")
	lv, lp := o.Get("locator")
	in := CredentialVaultSetInput{Locator: decodeCredentialLocator(d, lv, lp)}
	ev, ep := o.Get("expected")
	if !d.Failed() && ev.Kind() != KindNull {
		e := d.Exact(ev, ep, "credentialId", "revision")
		iv, ip := e.Get("credentialId")
		in.Expected = &CredentialExpectation{CredentialID: decodeUUID(d, iv, ip), Revision: e.PosCount("revision")}
	}
	in.Secret = o.StringBytes("secret", 1, CredentialSecretMaxBytes)
	return in
}

func decodeCredentialVaultDeleteInput(d *D, v Value) any {
	o := d.Exact(v, "input", "expected")
	ev, ep := o.Get("expected")
	return CredentialVaultDeleteInput{Expected: decodeCredentialVersionBasis(d, ev, ep)}
}

func decodeCredentialVaultQueryResult(d *D, v Value) any {
	switch k := unionKind(d, v, "result", "kind"); k {
	case "status":
		o := d.Exact(v, "result", "kind", "status")
		sv, sp := o.Get("status")
		return CredentialStatusResult{Status: decodeCredentialStatus(d, sv, sp)}
	case "connection_not_found":
		d.Exact(v, "result", "kind")
		return CredentialConnectionNotFound{}
	default:
		d.Fail("result.kind", "unknown kind %q", k)
		return nil
	}
}

// credentialMutateResultCodec decodes the shared result union of set
// (configured committed status) and delete (unconfigured committed status).
func credentialMutateResultCodec(configured bool) Codec {
	return func(d *D, v Value) any {
		switch k := unionKind(d, v, "result", "kind"); k {
		case "committed":
			o := d.Exact(v, "result", "kind", "vaultRevision", "status")
			r := CredentialCommitted{VaultRevision: o.Count("vaultRevision")}
			sv, sp := o.Get("status")
			r.Status = decodeCredentialStatus(d, sv, sp)
			if !d.Failed() && r.Status.Configured != configured {
				d.Fail(sp+".configured", "must be %t in a committed result of this operation", configured)
			}
			return r
		case "connection_not_found":
			d.Exact(v, "result", "kind")
			return CredentialConnectionNotFound{}
		case "credential_stale":
			o := d.Exact(v, "result", "kind", "expected", "actual")
			return CredentialStale{
				Expected: decodeNullableCredentialBasis(d, o, "expected"),
				Actual:   decodeNullableCredentialBasis(d, o, "actual"),
			}
		default:
			d.Fail("result.kind", "unknown kind %q", k)
			return nil
		}
	}
}

func init() {
	registerCodec(OpCredentialVaultQuery, decodeCredentialVaultQueryInput, decodeCredentialVaultQueryResult)
	registerCodec(OpCredentialVaultSet, decodeCredentialVaultSetInput, credentialMutateResultCodec(true))
	registerCodec(OpCredentialVaultDelete, decodeCredentialVaultDeleteInput, credentialMutateResultCodec(false))
}
