package config

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/protocol"
)

// VaultMaxEntries bounds the credentials of the vault.
const VaultMaxEntries = 2048

// vaultEntry is the stored status of one configured credential; its secret
// lives in the SecretFile under LocatorKey(Locator).
type vaultEntry struct {
	Locator      protocol.CredentialLocator `json:"locator"`
	CredentialID string                     `json:"credentialId"`
	Revision     int64                      `json:"revision"`
	UpdatedAt    int64                      `json:"updatedAt"`
}

func (e vaultEntry) status() protocol.CredentialStatus {
	return protocol.ConfiguredCredential(e.Locator, e.CredentialID, e.Revision, e.UpdatedAt)
}

func (e vaultEntry) basis() *protocol.CredentialVersionBasis {
	return &protocol.CredentialVersionBasis{Locator: e.Locator, CredentialID: e.CredentialID, Revision: e.Revision}
}

// vault is the credential vault document at a revision.
type vault struct {
	revision int64
	entries  []vaultEntry
}

func (v *vault) find(l protocol.CredentialLocator) int {
	return slices.IndexFunc(v.entries, func(e vaultEntry) bool { return e.Locator == l })
}

type vaultDocument struct {
	SchemaVersion int          `json:"schemaVersion"`
	Entries       []vaultEntry `json:"entries"`
}

func encodeVault(entries []vaultEntry) ([]byte, error) {
	if entries == nil {
		entries = []vaultEntry{}
	}
	return protocol.Marshal(vaultDocument{SchemaVersion: documentSchemaVersion, Entries: entries})
}

func decodeVault(body []byte) ([]vaultEntry, error) {
	return parseDocument(DocCredentialVault, body, func(d *protocol.D, v protocol.Value) []vaultEntry {
		o := d.Exact(v, "vault", "schemaVersion", "entries")
		o.SafeInt("schemaVersion", documentSchemaVersion, documentSchemaVersion)
		items, p := o.Array("entries", 0, VaultMaxEntries)
		out := make([]vaultEntry, 0, len(items))
		seen := make(map[protocol.CredentialLocator]struct{}, len(items))
		for i, item := range items {
			path := protocol.Index(p, i)
			eo := d.Exact(item, path, "locator", "credentialId", "revision", "updatedAt")
			lv, lp := eo.Get("locator")
			if d.Failed() {
				return out
			}
			l, err := protocol.DecodeCredentialLocator(lv)
			if err != nil {
				d.Fail(lp, "%v", err)
				return out
			}
			e := vaultEntry{Locator: l, CredentialID: eo.String("credentialId", 36, 36),
				Revision: eo.PosCount("revision"), UpdatedAt: eo.Count("updatedAt")}
			if !d.Failed() && !protocol.IsUUID(e.CredentialID) {
				d.Fail(path+".credentialId", "not a UUID")
			}
			if _, dup := seen[l]; dup && !d.Failed() {
				d.Fail(path, "duplicate locator")
			}
			if d.Failed() {
				return out
			}
			seen[l] = struct{}{}
			out = append(out, e)
		}
		return out
	})
}

func (c *Settings) loadVault(ctx context.Context) (vault, error) {
	rev, body, found, err := c.load(ctx, DocCredentialVault)
	if err != nil || !found {
		return vault{}, err
	}
	entries, err := decodeVault(body)
	if err != nil {
		return vault{}, err
	}
	return vault{revision: rev, entries: entries}, nil
}

// LocatorKey names a locator's secret in the SecretFile.
func LocatorKey(l protocol.CredentialLocator) string {
	switch l.Scope {
	case protocol.CredentialScopeConnection:
		return l.Scope + "/" + l.ConnectionID + "/" + l.Kind
	case protocol.CredentialScopeWebSearch:
		return l.Scope + "/" + l.Provider + "/" + l.Kind
	}
	return l.Scope + "/" + l.Kind
}

// checkLocator checks a locator against the catalog. It reports false when
// the locator names a connection that does not exist, and an inputError when
// the connection's provider takes no credential of the locator's kind. cat
// is loaded only for connection locators and returned (nil otherwise).
func (c *Settings) checkLocator(ctx context.Context, l protocol.CredentialLocator) (*Catalog, bool, error) {
	if l.Scope != protocol.CredentialScopeConnection {
		return nil, true, nil
	}
	cat, err := c.loadCatalog(ctx)
	if err != nil {
		return nil, false, err
	}
	i := cat.find(l.ConnectionID)
	if i < 0 {
		return &cat, false, nil
	}
	want := ""
	switch protocol.ProviderAuth(cat.Connections[i].ProviderType) {
	case protocol.AuthAPIKey, protocol.AuthOptionalAPIKey:
		want = protocol.CredentialKindAPIKey
	case protocol.AuthOAuthToken:
		want = protocol.CredentialKindOAuthToken
	}
	if l.Kind != want {
		return &cat, true, invalidCredential("provider %s takes no %s credential", cat.Connections[i].ProviderType, l.Kind)
	}
	return &cat, true, nil
}

// withoutOrphans drops the connection credentials whose connection is not in
// cat (left behind when a cleanup after a removal failed).
func withoutOrphans(entries []vaultEntry, cat *Catalog) []vaultEntry {
	if cat == nil {
		return entries
	}
	return slices.DeleteFunc(entries, func(e vaultEntry) bool {
		return e.Locator.Scope == protocol.CredentialScopeConnection && cat.find(e.Locator.ConnectionID) < 0
	})
}

// writeVault stores entries as the vault revision after prev, together with
// a secret file holding exactly the secrets of entries (the secret of set,
// if any, replacing its locator's). The secret file is written first and
// restored if the document write fails for certain; after an unknown commit
// outcome it keeps the new secrets.
func (c *Settings) writeVault(ctx context.Context, prev int64, entries []vaultEntry, set *protocol.CredentialLocator, secret string) (int64, error) {
	if len(entries) > VaultMaxEntries {
		return 0, invalidCredential("vault holds more than %d credentials", VaultMaxEntries)
	}
	body, err := encodeVault(entries)
	if err != nil {
		return 0, err
	}
	old := c.secrets.snapshot()
	next := make(map[string]string, len(entries))
	for _, e := range entries {
		k := LocatorKey(e.Locator)
		if s, ok := old[k]; ok {
			next[k] = s
		}
	}
	if set != nil {
		next[LocatorKey(*set)] = secret
	}
	changed := !maps.Equal(old, next)
	if changed {
		if err := c.secrets.replace(next); err != nil {
			return 0, &storeError{op: "write", name: "secret file", err: err}
		}
	}
	rev, err := c.store(ctx, DocCredentialVault, prev, body)
	if err == nil || errors.Is(err, ErrCommitOutcomeUnknown) || !changed {
		return rev, err
	}
	if rerr := c.secrets.replace(old); rerr != nil {
		return 0, &rollbackError{cause: err, rollback: rerr}
	}
	return 0, err
}

// dropConnectionCredentials removes, best effort, the credentials of the
// connections missing from cat after a committed removal. A failure leaves
// orphans that the next vault write drops.
func (c *Settings) dropConnectionCredentials(ctx context.Context, cat *Catalog) {
	v, err := c.loadVault(ctx)
	if err != nil {
		return
	}
	n := len(v.entries)
	entries := withoutOrphans(slices.Clone(v.entries), cat)
	if len(entries) == n {
		return
	}
	_, _ = c.writeVault(ctx, v.revision, entries, nil, "")
}

// ---- handlers ----

func (c *Settings) vaultQuery(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.CredentialVaultQueryInput)
	if !ok {
		return internalFailure
	}
	_, exists, err := c.checkLocator(ctx, in.Locator)
	if err != nil {
		return failure(err, classCredentialQuery)
	}
	if !exists {
		return host.OK(protocol.CredentialConnectionNotFound{})
	}
	v, err := c.loadVault(ctx)
	if err != nil {
		return failure(err, classCredentialQuery)
	}
	status := protocol.UnconfiguredCredential(in.Locator)
	if i := v.find(in.Locator); i >= 0 {
		status = v.entries[i].status()
	}
	return host.OK(protocol.CredentialStatusResult{Status: status})
}

func (c *Settings) vaultSet(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.CredentialVaultSetInput)
	if !ok {
		return internalFailure
	}
	return c.mutate(ctx, func(ctx context.Context) (any, bool, error) {
		cat, exists, err := c.checkLocator(ctx, in.Locator)
		if err != nil {
			return nil, false, err
		}
		if !exists {
			return protocol.CredentialConnectionNotFound{}, false, nil
		}
		v, err := c.loadVault(ctx)
		if err != nil {
			return nil, false, err
		}
		i := v.find(in.Locator)
		var expected, actual *protocol.CredentialVersionBasis
		if in.Expected != nil {
			expected = &protocol.CredentialVersionBasis{Locator: in.Locator, CredentialID: in.Expected.CredentialID, Revision: in.Expected.Revision}
		}
		if i >= 0 {
			actual = v.entries[i].basis()
		}
		if !sameBasis(expected, actual) {
			return protocol.CredentialStale{Expected: expected, Actual: actual}, false, nil
		}
		entries := slices.Clone(v.entries)
		entry := vaultEntry{Locator: in.Locator, Revision: 1, UpdatedAt: max(c.opts.Now().UnixMilli(), 0)}
		if i >= 0 {
			entry.CredentialID, entry.Revision = actual.CredentialID, actual.Revision+1
			entries[i] = entry
		} else {
			entry.CredentialID = newID(func(id string) bool {
				return slices.ContainsFunc(v.entries, func(e vaultEntry) bool { return e.CredentialID == id })
			})
			entries = append(entries, entry)
		}
		if entry.Revision > protocol.MaxSafeInteger {
			return nil, false, invalidCredential("credential revision exhausted")
		}
		rev, err := c.writeVault(ctx, v.revision, withoutOrphans(entries, cat), &in.Locator, in.Secret)
		if err != nil {
			return nil, false, err
		}
		return protocol.CredentialCommitted{VaultRevision: rev, Status: entry.status()}, true, nil
	})
}

func (c *Settings) vaultDelete(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.CredentialVaultDeleteInput)
	if !ok {
		return internalFailure
	}
	l := in.Expected.Locator
	return c.mutate(ctx, func(ctx context.Context) (any, bool, error) {
		cat, exists, err := c.checkLocator(ctx, l)
		if err != nil {
			return nil, false, err
		}
		if !exists {
			return protocol.CredentialConnectionNotFound{}, false, nil
		}
		v, err := c.loadVault(ctx)
		if err != nil {
			return nil, false, err
		}
		expected := in.Expected
		i := v.find(l)
		var actual *protocol.CredentialVersionBasis
		if i >= 0 {
			actual = v.entries[i].basis()
		}
		if !sameBasis(&expected, actual) {
			return protocol.CredentialStale{Expected: &expected, Actual: actual}, false, nil
		}
		entries := slices.Delete(slices.Clone(v.entries), i, i+1)
		rev, err := c.writeVault(ctx, v.revision, withoutOrphans(entries, cat), nil, "")
		if err != nil {
			return nil, false, err
		}
		return protocol.CredentialCommitted{VaultRevision: rev, Status: protocol.UnconfiguredCredential(l)}, true, nil
	})
}

// sameBasis reports whether two optional bases name the same credential
// version.
func sameBasis(a, b *protocol.CredentialVersionBasis) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Locator == b.Locator && a.CredentialID == b.CredentialID && a.Revision == b.Revision
}
