package config

import (
	"path/filepath"
	"testing"

	"github.com/maka-agent/maka/protocol"
)

// The vault's rewrites keep the secrets another package keeps under its
// prefix, and a prefixed write keeps the vault's.
func TestPrefixedSecretsSurviveVaultRewrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "credentials.json")
	s, err := OpenSecretFile(path)
	if err != nil {
		t.Fatal(err)
	}
	loc := protocol.ConnectionCredential("c1", protocol.CredentialKindAPIKey)
	if err := s.replace(map[string]string{LocatorKey(loc): "vault-secret"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPrefixed("ext/mcp/", map[string]string{"ext/mcp/a/env/T": "mcp-secret"}); err != nil {
		t.Fatal(err)
	}
	if err := s.replace(map[string]string{}); err != nil { // the vault drops its credential
		t.Fatal(err)
	}
	again, err := OpenSecretFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := again.GetKey("ext/mcp/a/env/T"); !ok || v != "mcp-secret" {
		t.Fatalf("prefixed secret after a vault rewrite: %q %v", v, ok)
	}
	if _, ok := again.Get(loc); ok {
		t.Fatal("the vault's removal was not written")
	}
	if err := s.SetPrefixed("ext/mcp/", nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.GetKey("ext/mcp/a/env/T"); ok {
		t.Fatal("prefixed secret kept after its prefix was cleared")
	}
	if err := s.SetPrefixed("mcp/", nil); err == nil {
		t.Fatal("a prefix outside ext/ was accepted")
	}
}
