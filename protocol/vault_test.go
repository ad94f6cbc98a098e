package protocol

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

const (
	cfgConnLocator  = `{"scope":"connection","connectionId":"` + cfgUUID1 + `","kind":"api_key"}`
	cfgOAuthLocator = `{"scope":"connection","connectionId":"` + cfgUUID2 + `","kind":"oauth_token"}`
	cfgWebLocator   = `{"scope":"web_search","provider":"tavily","kind":"api_key"}`
	cfgProxyLocator = `{"scope":"network_proxy","kind":"password"}`
	cfgCredBasis    = `{"locator":` + cfgConnLocator + `,"credentialId":"` + cfgUUID2 + `","revision":2}`
	cfgUnconfigured = `{"locator":` + cfgWebLocator + `,"configured":false,"credentialId":null,"revision":null,"updatedAt":null}`
	cfgConfigured   = `{"locator":` + cfgConnLocator + `,"configured":true,"credentialId":"` + cfgUUID2 + `","revision":2,"updatedAt":1700000000000}`
)

func vaultValidCases(t testing.TB) []cfgCase {
	q, s, d := OpCredentialVaultQuery, OpCredentialVaultSet, OpCredentialVaultDelete
	secret := strings.Repeat("€", 3413) + "a" // 10240 UTF-8 bytes
	return []cfgCase{
		{name: "query connection locator", op: q, in: `{"locator":` + cfgConnLocator + `}`},
		{name: "query oauth locator", op: q, in: `{"locator":` + cfgOAuthLocator + `}`},
		{name: "query web search locator", op: q, in: `{"locator":` + cfgWebLocator + `}`},
		{name: "query proxy locator", op: q, in: `{"locator":` + cfgProxyLocator + `}`},
		{name: "query locator key order", op: q, in: `{"locator":{"kind":"password","scope":"network_proxy"}}`,
			want: `{"locator":` + cfgProxyLocator + `}`},

		{name: "set without expectation", op: s, in: `{"locator":` + cfgConnLocator + `,"expected":null,"secret":"sk-x"}`},
		{name: "set with expectation", op: s,
			in: `{"locator":` + cfgProxyLocator + `,"expected":{"credentialId":"` + cfgUUID1 + `","revision":9007199254740991},"secret":"p"}`},
		{name: "set secret of 10240 bytes", op: s, in: `{"locator":` + cfgWebLocator + `,"expected":null,"secret":` + cfgStr(secret) + `}`},
		{name: "delete", op: d, in: `{"expected":` + cfgCredBasis + `}`},

		{name: "query status unconfigured", op: q, out: true, in: `{"kind":"status","status":` + cfgUnconfigured + `}`},
		{name: "query status configured", op: q, out: true, in: `{"kind":"status","status":` + cfgConfigured + `}`},
		{name: "query status updated at 0", op: q, out: true,
			in: `{"kind":"status","status":` + cfgEdit(t, cfgConfigured, "updatedAt=0") + `}`},
		{name: "query connection not found", op: q, out: true, in: `{"kind":"connection_not_found"}`},

		{name: "set committed", op: s, out: true, in: `{"kind":"committed","vaultRevision":0,"status":` + cfgConfigured + `}`},
		{name: "set connection not found", op: s, out: true, in: `{"kind":"connection_not_found"}`},
		{name: "set stale none expected", op: s, out: true, in: `{"kind":"credential_stale","expected":null,"actual":` + cfgCredBasis + `}`},
		{name: "set stale both null", op: s, out: true, in: `{"kind":"credential_stale","expected":null,"actual":null}`},
		{name: "delete committed", op: d, out: true, in: `{"kind":"committed","vaultRevision":12,"status":` + cfgUnconfigured + `}`},
		{name: "delete connection not found", op: d, out: true, in: `{"kind":"connection_not_found"}`},
		{name: "delete stale", op: d, out: true, in: `{"kind":"credential_stale","expected":` + cfgCredBasis + `,"actual":null}`},
	}
}

func TestVaultValid(t *testing.T) { cfgCheckValid(t, vaultValidCases(t)) }

func TestVaultInvalid(t *testing.T) {
	q, s, d := OpCredentialVaultQuery, OpCredentialVaultSet, OpCredentialVaultDelete
	loc := func(l string) string { return `{"locator":` + l + `}` }
	set := func(edits ...string) string {
		return cfgEdit(t, `{"locator":`+cfgConnLocator+`,"expected":{"credentialId":"`+cfgUUID1+`","revision":1},"secret":"s"}`, edits...)
	}
	status := func(st string) string { return `{"kind":"status","status":` + st + `}` }
	cases := []cfgCase{
		{name: "query missing locator", op: q, in: `{}`},
		{name: "query extra key", op: q, in: `{"locator":` + cfgProxyLocator + `,"x":1}`},
		{name: "locator null", op: q, in: loc("null")},
		{name: "locator unknown scope", op: q, in: loc(`{"scope":"global","kind":"api_key"}`)},
		{name: "locator scope missing", op: q, in: loc(`{"kind":"password"}`)},
		{name: "locator scope number", op: q, in: loc(`{"scope":1,"kind":"password"}`)},
		{name: "connection locator password", op: q, in: loc(cfgEdit(t, cfgConnLocator, `kind="password"`))},
		{name: "connection locator missing id", op: q, in: loc(`{"scope":"connection","kind":"api_key"}`)},
		{name: "connection locator bad id", op: q, in: loc(cfgEdit(t, cfgConnLocator, `connectionId="my-openai"`))},
		{name: "connection locator extra provider", op: q, in: loc(cfgEdit(t, cfgConnLocator, `provider="tavily"`))},
		{name: "web locator provider", op: q, in: loc(cfgEdit(t, cfgWebLocator, `provider="google"`))},
		{name: "web locator kind", op: q, in: loc(cfgEdit(t, cfgWebLocator, `kind="oauth_token"`))},
		{name: "web locator missing provider", op: q, in: loc(`{"scope":"web_search","kind":"api_key"}`)},
		{name: "proxy locator kind", op: q, in: loc(`{"scope":"network_proxy","kind":"api_key"}`)},
		{name: "proxy locator extra id", op: q, in: loc(`{"scope":"network_proxy","connectionId":"` + cfgUUID1 + `","kind":"password"}`)},

		{name: "set missing secret", op: s, in: set("-secret")},
		{name: "set missing expected", op: s, in: set("-expected")},
		{name: "set extra key", op: s, in: set("x=1")},
		{name: "set empty secret", op: s, in: set(`secret=""`)},
		{name: "set secret number", op: s, in: set("secret=1")},
		{name: "set secret 10241 bytes", op: s, in: set("secret=" + cfgStr(strings.Repeat("€", 3413)+"ab"))},
		{name: "set expected revision 0", op: s, in: set("expected/revision=0")},
		{name: "set expected bad id", op: s, in: set(`expected/credentialId="x"`)},
		{name: "set expected extra key", op: s, in: set("expected/locator=" + cfgConnLocator)},
		{name: "set expected array", op: s, in: set("expected=[]")},
		{name: "set bad locator", op: s, in: set(`locator={"scope":"network_proxy","kind":"api_key"}`)},

		{name: "delete missing expected", op: d, in: `{}`},
		{name: "delete expected null", op: d, in: `{"expected":null}`},
		{name: "delete basis missing locator", op: d, in: `{"expected":{"credentialId":"` + cfgUUID2 + `","revision":2}}`},
		{name: "delete basis revision 0", op: d, in: `{"expected":` + cfgEdit(t, cfgCredBasis, "revision=0") + `}`},
		{name: "delete basis extra key", op: d, in: `{"expected":` + cfgEdit(t, cfgCredBasis, "x=1") + `}`},

		{name: "query result unknown kind", op: q, out: true, in: `{"kind":"missing"}`},
		{name: "query result no kind", op: q, out: true, in: `{"status":` + cfgUnconfigured + `}`},
		{name: "status missing", op: q, out: true, in: `{"kind":"status"}`},
		{name: "status extra key", op: q, out: true, in: status(cfgEdit(t, cfgConfigured, `secret="s"`))},
		{name: "status missing updatedAt", op: q, out: true, in: status(cfgEdit(t, cfgUnconfigured, "-updatedAt"))},
		{name: "unconfigured with id", op: q, out: true, in: status(cfgEdit(t, cfgUnconfigured, `credentialId="`+cfgUUID1+`"`))},
		{name: "unconfigured with revision", op: q, out: true, in: status(cfgEdit(t, cfgUnconfigured, "revision=1"))},
		{name: "unconfigured with updatedAt", op: q, out: true, in: status(cfgEdit(t, cfgUnconfigured, "updatedAt=0"))},
		{name: "configured with null id", op: q, out: true, in: status(cfgEdit(t, cfgConfigured, "credentialId=null"))},
		{name: "configured revision 0", op: q, out: true, in: status(cfgEdit(t, cfgConfigured, "revision=0"))},
		{name: "configured updatedAt negative", op: q, out: true, in: status(cfgEdit(t, cfgConfigured, "updatedAt=-1"))},
		{name: "configured updatedAt null", op: q, out: true, in: status(cfgEdit(t, cfgConfigured, "updatedAt=null"))},
		{name: "configured string", op: q, out: true, in: status(cfgEdit(t, cfgConfigured, `configured="yes"`))},
		{name: "status bad locator", op: q, out: true, in: status(cfgEdit(t, cfgConfigured, `locator={"scope":"web_search","kind":"api_key"}`))},
		{name: "not found extra key", op: q, out: true, in: `{"kind":"connection_not_found","connectionId":"` + cfgUUID1 + `"}`},

		{name: "set committed unconfigured", op: s, out: true, in: `{"kind":"committed","vaultRevision":1,"status":` + cfgUnconfigured + `}`},
		{name: "set committed missing status", op: s, out: true, in: `{"kind":"committed","vaultRevision":1}`},
		{name: "set committed negative revision", op: s, out: true, in: `{"kind":"committed","vaultRevision":-1,"status":` + cfgConfigured + `}`},
		{name: "set status kind", op: s, out: true, in: `{"kind":"status","status":` + cfgConfigured + `}`},
		{name: "set stale missing actual", op: s, out: true, in: `{"kind":"credential_stale","expected":null}`},
		{name: "set stale bad basis", op: s, out: true, in: `{"kind":"credential_stale","expected":{"credentialId":"` + cfgUUID1 + `","revision":1},"actual":null}`},
		{name: "delete committed configured", op: d, out: true, in: `{"kind":"committed","vaultRevision":1,"status":` + cfgConfigured + `}`},
		{name: "delete not found extra key", op: d, out: true, in: `{"kind":"connection_not_found","x":1}`},
		{name: "delete unknown kind", op: d, out: true, in: `{"kind":"revision_conflict","expectedRevision":1,"actualRevision":2}`},
	}
	cfgCheckInvalid(t, cases)
}

func TestCredentialSetInputHidesSecret(t *testing.T) {
	got, err := cfgDecode(t, OpCredentialVaultSet, false,
		`{"locator":`+cfgConnLocator+`,"expected":null,"secret":"sk-hunter2hunter2hunter2"}`)
	if err != nil {
		t.Fatal(err)
	}
	in := got.(CredentialVaultSetInput)
	if in.Secret != "sk-hunter2hunter2hunter2" {
		t.Fatalf("secret = %q", in.Secret)
	}
	for _, s := range []string{fmt.Sprint(in), fmt.Sprintf("%v %+v %#v %s", in, in, in, in)} {
		if strings.Contains(s, "hunter2") {
			t.Fatalf("formatted input leaks the secret: %s", s)
		}
	}
}

func TestCredentialHelpers(t *testing.T) {
	cases := map[string]CredentialStatus{
		`{"locator":` + cfgConnLocator + `,"configured":false,"credentialId":null,"revision":null,"updatedAt":null}`: UnconfiguredCredential(
			ConnectionCredential(cfgUUID1, CredentialKindAPIKey)),
		`{"locator":` + cfgWebLocator + `,"configured":true,"credentialId":"` + cfgUUID2 + `","revision":3,"updatedAt":5}`: ConfiguredCredential(
			WebSearchCredential(WebSearchProviderTavily), cfgUUID2, 3, 5),
		`{"locator":` + cfgProxyLocator + `,"configured":false,"credentialId":null,"revision":null,"updatedAt":null}`: UnconfiguredCredential(
			NetworkProxyCredential()),
	}
	for want, st := range cases {
		b, err := Marshal(st)
		if err != nil || string(b) != want {
			t.Errorf("Marshal = %s, %v; want %s", b, err, want)
			continue
		}
		v, _ := Parse(b)
		back, err := DecodeCredentialStatus(v)
		if err != nil || !reflect.DeepEqual(back, st) {
			t.Errorf("DecodeCredentialStatus(%s) = %#v, %v", b, back, err)
		}
	}
	if _, err := Marshal(CredentialLocator{Scope: "global"}); err == nil {
		t.Error("a locator with an unknown scope encoded")
	}
	// Locators are comparable map keys.
	m := map[CredentialLocator]int{NetworkProxyCredential(): 1}
	if m[CredentialLocator{Scope: CredentialScopeNetworkProxy, Kind: CredentialKindPassword}] != 1 {
		t.Error("locator lookup failed")
	}
}
