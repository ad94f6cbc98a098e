package config

import (
	"context"
	"fmt"
	"slices"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/protocol"
)

// Connection is one stored model-provider connection.
type Connection struct {
	ConnectionID    string                          `json:"connectionId"`
	Revision        int64                           `json:"revision"`
	Slug            string                          `json:"slug"`
	Name            string                          `json:"name"`
	ProviderType    string                          `json:"providerType"`
	BaseURL         string                          `json:"baseUrl,omitempty"` // "" = provider default
	Enabled         bool                            `json:"enabled"`
	EnabledModelIDs []string                        `json:"enabledModelIds"`
	Models          []protocol.ConnectionModel      `json:"models"`
	ModelSource     string                          `json:"modelSource,omitempty"` // "" before model discovery
	ModelsFetchedAt *int64                          `json:"modelsFetchedAt,omitempty"`
	LastTest        *protocol.ConnectionTestSummary `json:"lastTest,omitempty"`
	// ContextWindow is the declared context window of the connection's
	// models in tokens (0: none), for a model discovery did not describe.
	ContextWindow int64 `json:"contextWindow,omitempty"`
}

// MarshalJSON encodes nil lists as empty arrays.
func (c Connection) MarshalJSON() ([]byte, error) {
	type fields Connection
	f := fields(c)
	if f.EnabledModelIDs == nil {
		f.EnabledModelIDs = []string{}
	}
	if f.Models == nil {
		f.Models = []protocol.ConnectionModel{}
	}
	return protocol.Marshal(f)
}

// Catalog is a snapshot of the connection catalog; Revision 0 is the empty
// catalog that was never written.
type Catalog struct {
	Revision      int64
	DefaultTarget *protocol.ConnectionTarget
	Connections   []Connection
}

// find returns the index of a connection, or -1.
func (c *Catalog) find(connectionID string) int {
	return slices.IndexFunc(c.Connections, func(x Connection) bool { return x.ConnectionID == connectionID })
}

// catalogDocument is the stored form of the catalog (without its revision,
// which is the document revision).
type catalogDocument struct {
	SchemaVersion int                        `json:"schemaVersion"`
	DefaultTarget *protocol.ConnectionTarget `json:"defaultTarget"`
	Connections   []Connection               `json:"connections"`
}

func encodeCatalog(c Catalog) ([]byte, error) {
	conns := c.Connections
	if conns == nil {
		conns = []Connection{}
	}
	return protocol.Marshal(catalogDocument{SchemaVersion: documentSchemaVersion, DefaultTarget: c.DefaultTarget, Connections: conns})
}

// decodeCatalog strictly decodes a stored catalog.
func decodeCatalog(body []byte) (Catalog, error) {
	return parseDocument(DocConnectionCatalog, body, func(d *protocol.D, v protocol.Value) Catalog {
		var c Catalog
		o := d.Exact(v, "catalog", "schemaVersion", "defaultTarget", "connections")
		o.SafeInt("schemaVersion", documentSchemaVersion, documentSchemaVersion)
		tv, tp := o.Get("defaultTarget")
		if !d.Failed() && tv.Kind() != protocol.KindNull {
			t, err := protocol.DecodeConnectionTarget(tv)
			if err != nil {
				d.Fail(tp, "%v", err)
			}
			c.DefaultTarget = &t
		}
		items, p := o.Array("connections", 0, protocol.ConnectionCatalogMaxConnections)
		c.Connections = make([]Connection, 0, len(items))
		ids := make(map[string]struct{}, len(items))
		slugs := make(map[string]struct{}, len(items))
		for i, item := range items {
			path := protocol.Index(p, i)
			conn := decodeConnection(d, item, path)
			if d.Failed() {
				return c
			}
			if _, dup := ids[conn.ConnectionID]; dup {
				d.Fail(path, "duplicate connectionId")
				return c
			}
			if _, dup := slugs[conn.Slug]; dup {
				d.Fail(path, "duplicate slug")
				return c
			}
			ids[conn.ConnectionID], slugs[conn.Slug] = struct{}{}, struct{}{}
			c.Connections = append(c.Connections, conn)
		}
		return c
	})
}

func decodeConnection(d *protocol.D, v protocol.Value, path string) Connection {
	o := d.Closed(v, path,
		[]string{"connectionId", "revision", "slug", "name", "providerType", "enabled", "enabledModelIds", "models"},
		[]string{"baseUrl", "modelSource", "modelsFetchedAt", "lastTest", "contextWindow"})
	var c Connection
	if o.Has("contextWindow") {
		c.ContextWindow = o.PosCount("contextWindow")
	}
	c.ConnectionID = o.String("connectionId", 36, 36)
	if !d.Failed() && !protocol.IsUUID(c.ConnectionID) {
		d.Fail(path+".connectionId", "not a UUID")
	}
	c.Revision = o.PosCount("revision")
	c.Slug = o.String("slug", 2, protocol.ConnectionSlugMaxLength)
	if !d.Failed() && !protocol.IsConnectionSlug(c.Slug) {
		d.Fail(path+".slug", "not a connection slug")
	}
	c.Name = o.String("name", 0, protocol.ConnectionNameMaxLength)
	c.ProviderType = o.String("providerType", 1, 64)
	if !d.Failed() && protocol.ProviderAuth(c.ProviderType) == "" {
		d.Fail(path+".providerType", "not a registered provider type")
	}
	if o.Has("baseUrl") {
		c.BaseURL = o.String("baseUrl", 1, protocol.ConnectionBaseURLMaxLength)
		if !d.Failed() {
			if u, err := protocol.NormalizeConnectionBaseURL(c.BaseURL, c.ProviderType); err != nil || u != c.BaseURL {
				d.Fail(path+".baseUrl", "not a canonical provider override")
			}
		}
	}
	c.Enabled = o.Bool("enabled")
	idItems, ip := o.Array("enabledModelIds", 0, protocol.ConnectionMaxEnabledModelIDs)
	c.EnabledModelIDs = make([]string, 0, len(idItems))
	for i, item := range idItems {
		id := d.String(item, protocol.Index(ip, i), 1, protocol.ConnectionModelIDMaxLength)
		if !d.Failed() && slices.Contains(c.EnabledModelIDs, id) {
			d.Fail(protocol.Index(ip, i), "duplicate model id")
		}
		if d.Failed() {
			return c
		}
		c.EnabledModelIDs = append(c.EnabledModelIDs, id)
	}
	modelItems, mp := o.Array("models", 0, protocol.ConnectionMaxModels)
	c.Models = make([]protocol.ConnectionModel, 0, len(modelItems))
	for i, item := range modelItems {
		if d.Failed() {
			return c
		}
		m, err := protocol.DecodeConnectionModel(item)
		if err != nil {
			d.Fail(protocol.Index(mp, i), "%v", err)
			return c
		}
		c.Models = append(c.Models, m)
	}
	if !d.Failed() && o.Has("modelSource") != o.Has("modelsFetchedAt") {
		d.Fail(path, "modelSource and modelsFetchedAt must both be present or both absent")
	}
	if o.Has("modelSource") {
		c.ModelSource = o.Enum("modelSource", protocol.ModelSourceFetched, protocol.ModelSourceFallback)
		at := o.Count("modelsFetchedAt")
		c.ModelsFetchedAt = &at
	} else if !d.Failed() && len(c.Models) != 0 {
		d.Fail(path+".models", "must be empty before model discovery")
	}
	if o.Has("lastTest") && !d.Failed() {
		tv, tp := o.Get("lastTest")
		t, err := protocol.DecodeConnectionTestSummary(tv)
		if err != nil {
			d.Fail(tp, "%v", err)
		}
		c.LastTest = &t
	}
	return c
}

// loadCatalog returns the stored catalog (empty at revision 0 when absent).
func (c *Settings) loadCatalog(ctx context.Context) (Catalog, error) {
	rev, body, found, err := c.load(ctx, DocConnectionCatalog)
	if err != nil {
		return Catalog{}, err
	}
	if !found {
		return Catalog{Connections: []Connection{}}, nil
	}
	cat, err := decodeCatalog(body)
	if err != nil {
		return Catalog{}, err
	}
	cat.Revision = rev
	return cat, nil
}

// storeCatalog writes next as the revision after prev and returns the new
// revision. next must be a valid catalog: it is checked as a read would.
func (c *Settings) storeCatalog(ctx context.Context, prev int64, next Catalog) (int64, error) {
	body, err := encodeCatalog(next)
	if err != nil {
		return 0, err
	}
	if _, err := decodeCatalog(body); err != nil {
		return 0, invalidInput("catalog would not be valid: %v", err)
	}
	return c.store(ctx, DocConnectionCatalog, prev, body)
}

// ---- paging ----

// catalogStart is the position of the first item.
var catalogStart = protocol.CatalogCursor{ConnectionIndex: 0, Part: protocol.CatalogPartConnection}

// validPosition reports whether p names an item of the catalog.
func (c *Catalog) validPosition(p protocol.CatalogCursor) bool {
	if p.ConnectionIndex < 0 || p.ConnectionIndex >= int64(len(c.Connections)) {
		return false
	}
	conn := &c.Connections[p.ConnectionIndex]
	switch p.Part {
	case protocol.CatalogPartConnection:
		return true
	case protocol.CatalogPartEnabledModelID:
		return p.ItemIndex >= 0 && p.ItemIndex < int64(len(conn.EnabledModelIDs))
	case protocol.CatalogPartModel:
		return p.ItemIndex >= 0 && p.ItemIndex < int64(len(conn.Models))
	}
	return false
}

// nextPosition returns the position after a valid p, and false after the
// last item.
func (c *Catalog) nextPosition(p protocol.CatalogCursor) (protocol.CatalogCursor, bool) {
	conn := &c.Connections[p.ConnectionIndex]
	switch p.Part {
	case protocol.CatalogPartConnection:
		if len(conn.EnabledModelIDs) > 0 {
			return protocol.CatalogCursor{ConnectionIndex: p.ConnectionIndex, Part: protocol.CatalogPartEnabledModelID}, true
		}
		if len(conn.Models) > 0 {
			return protocol.CatalogCursor{ConnectionIndex: p.ConnectionIndex, Part: protocol.CatalogPartModel}, true
		}
	case protocol.CatalogPartEnabledModelID:
		if p.ItemIndex+1 < int64(len(conn.EnabledModelIDs)) {
			return protocol.CatalogCursor{ConnectionIndex: p.ConnectionIndex, Part: p.Part, ItemIndex: p.ItemIndex + 1}, true
		}
		if len(conn.Models) > 0 {
			return protocol.CatalogCursor{ConnectionIndex: p.ConnectionIndex, Part: protocol.CatalogPartModel}, true
		}
	case protocol.CatalogPartModel:
		if p.ItemIndex+1 < int64(len(conn.Models)) {
			return protocol.CatalogCursor{ConnectionIndex: p.ConnectionIndex, Part: p.Part, ItemIndex: p.ItemIndex + 1}, true
		}
	}
	if p.ConnectionIndex+1 < int64(len(c.Connections)) {
		return protocol.CatalogCursor{ConnectionIndex: p.ConnectionIndex + 1, Part: protocol.CatalogPartConnection}, true
	}
	return protocol.CatalogCursor{}, false
}

// item returns the item at a valid position.
func (c *Catalog) item(p protocol.CatalogCursor) protocol.CatalogItem {
	conn := &c.Connections[p.ConnectionIndex]
	switch p.Part {
	case protocol.CatalogPartEnabledModelID:
		return protocol.CatalogEnabledModelIDItem{ConnectionIndex: p.ConnectionIndex, ItemIndex: p.ItemIndex,
			ModelID: conn.EnabledModelIDs[p.ItemIndex]}
	case protocol.CatalogPartModel:
		return protocol.CatalogModelItem{ConnectionIndex: p.ConnectionIndex, ItemIndex: p.ItemIndex,
			Model: conn.Models[p.ItemIndex]}
	}
	return protocol.CatalogConnectionHeader{
		ConnectionIndex:     p.ConnectionIndex,
		ConnectionID:        conn.ConnectionID,
		Revision:            conn.Revision,
		Slug:                conn.Slug,
		Name:                conn.Name,
		ProviderType:        conn.ProviderType,
		BaseURL:             conn.BaseURL,
		Enabled:             conn.Enabled,
		ModelSource:         conn.ModelSource,
		ModelsFetchedAt:     conn.ModelsFetchedAt,
		LastTest:            conn.LastTest,
		EnabledModelIDCount: int64(len(conn.EnabledModelIDs)),
		ModelCount:          int64(len(conn.Models)),
	}
}

// page fills a page greedily from the valid position start: items are added
// while the page holds at most 128 items and encodes, together with the
// cursor of the next unsent item, to at most 48 KiB.
func (c *Catalog) page(start protocol.CatalogCursor) (protocol.CatalogPage, error) {
	page := protocol.CatalogPage{
		Revision:        c.Revision,
		DefaultTarget:   c.DefaultTarget,
		ConnectionCount: int64(len(c.Connections)),
		Items:           []protocol.CatalogItem{},
	}
	if len(c.Connections) == 0 {
		page.DefaultTarget = nil
		return page, nil
	}
	base, err := protocol.EncodedSize(page) // items [] and nextCursor null
	if err != nil {
		return page, err
	}
	const nullLen = len("null")
	pos, more := start, true
	itemBytes := 0
	for more && len(page.Items) < protocol.ConnectionCatalogPageMaxItems {
		item := c.item(pos)
		size, err := protocol.EncodedSize(item)
		if err != nil {
			return page, err
		}
		next, nextMore := c.nextPosition(pos)
		cursorLen := nullLen
		if nextMore {
			if cursorLen, err = protocol.EncodedSize(next); err != nil {
				return page, err
			}
		}
		// One comma separates each item from the previous one.
		total := base - nullLen + cursorLen + itemBytes + size + len(page.Items)
		if total > protocol.ConnectionCatalogPageMaxBytes {
			break
		}
		page.Items = append(page.Items, item)
		itemBytes += size
		pos, more = next, nextMore
	}
	if len(page.Items) == 0 {
		return page, fmt.Errorf("config: catalog item at %+v does not fit in a page", start)
	}
	if more {
		p := pos
		page.NextCursor = &p
	}
	if n, err := protocol.EncodedSize(page); err != nil || n > protocol.ConnectionCatalogPageMaxBytes {
		return page, fmt.Errorf("config: catalog page of %d bytes exceeds its bound (%v)", n, err)
	}
	return page, nil
}

// ---- handlers ----

func (c *Settings) catalogQuery(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.CatalogQueryInput)
	if !ok {
		return internalFailure
	}
	cat, err := c.loadCatalog(ctx)
	if err != nil {
		return failure(err, classQuery)
	}
	start := catalogStart
	if in.Cursor != nil {
		if in.Revision != cat.Revision {
			return host.OK(protocol.CatalogRevisionChanged{ExpectedRevision: in.Revision, ActualRevision: cat.Revision})
		}
		if !cat.validPosition(*in.Cursor) {
			return host.Fail(protocol.ErrInvalidRequest, MessageInvalidCatalogCursor)
		}
		start = *in.Cursor
	}
	page, err := cat.page(start)
	if err != nil {
		return failure(err, classQuery)
	}
	return host.OK(page)
}

func (c *Settings) catalogCreate(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.CatalogCreateInput)
	if !ok {
		return internalFailure
	}
	return c.mutateCatalogAt(ctx, in.ExpectedCatalogRevision, func(ctx context.Context, cat Catalog) (any, bool, error) {
		draft := in.Connection
		if slices.ContainsFunc(cat.Connections, func(x Connection) bool { return x.Slug == draft.Slug }) {
			return protocol.ConnectionExists{Slug: draft.Slug}, false, nil
		}
		if len(cat.Connections) >= protocol.ConnectionCatalogMaxConnections {
			return nil, false, invalidInput("catalog holds %d connections", len(cat.Connections))
		}
		baseURL, err := protocol.NormalizeConnectionBaseURL(draft.BaseURL, draft.ProviderType)
		if err != nil {
			return nil, false, invalidInput("base URL: %v", err)
		}
		conn := Connection{
			ConnectionID:    newID(func(id string) bool { return cat.find(id) >= 0 }),
			Revision:        1,
			Slug:            draft.Slug,
			Name:            draft.Name,
			ProviderType:    draft.ProviderType,
			BaseURL:         baseURL,
			Enabled:         draft.Enabled,
			EnabledModelIDs: append([]string{}, draft.EnabledModelIDs...),
			Models:          []protocol.ConnectionModel{},
		}
		next := cat
		next.Connections = append(slices.Clip(cat.Connections), conn)
		rev, err := c.storeCatalog(ctx, cat.Revision, next)
		if err != nil {
			return nil, false, err
		}
		return protocol.CatalogConnectionCommitted{CatalogRevision: rev,
			Connection: protocol.ConnectionVersionBasis{ConnectionID: conn.ConnectionID, Revision: conn.Revision}}, true, nil
	})
}

// staleConnection checks a connection basis; it returns the index of the
// connection, or a connection_stale result.
func staleConnection(cat *Catalog, expected protocol.ConnectionVersionBasis) (int, *protocol.ConnectionStale) {
	i := cat.find(expected.ConnectionID)
	if i < 0 {
		return -1, &protocol.ConnectionStale{Expected: expected}
	}
	if cur := cat.Connections[i]; cur.Revision != expected.Revision {
		return -1, &protocol.ConnectionStale{Expected: expected,
			Actual: &protocol.ConnectionVersionBasis{ConnectionID: cur.ConnectionID, Revision: cur.Revision}}
	}
	return i, nil
}

// mutateCatalogAt runs fn in a catalog mutation if the catalog is still at
// expected, answering revision_conflict otherwise.
func (c *Settings) mutateCatalogAt(ctx context.Context, expected int64,
	fn func(ctx context.Context, cat Catalog) (any, bool, error)) host.Outcome {
	return c.mutate(ctx, func(ctx context.Context) (any, bool, error) {
		cat, err := c.loadCatalog(ctx)
		if err != nil {
			return nil, false, err
		}
		if cat.Revision != expected {
			return protocol.RevisionConflict{ExpectedRevision: expected, ActualRevision: cat.Revision}, false, nil
		}
		return fn(ctx, cat)
	})
}

// mutateConnection runs fn in a catalog mutation on the connection named by
// expected, answering connection_stale when it is gone or has moved on.
func (c *Settings) mutateConnection(ctx context.Context, expected protocol.ConnectionVersionBasis,
	fn func(ctx context.Context, cat Catalog, i int) (any, bool, error)) host.Outcome {
	return c.mutate(ctx, func(ctx context.Context) (any, bool, error) {
		cat, err := c.loadCatalog(ctx)
		if err != nil {
			return nil, false, err
		}
		i, stale := staleConnection(&cat, expected)
		if stale != nil {
			return *stale, false, nil
		}
		return fn(ctx, cat, i)
	})
}

func (c *Settings) catalogUpdate(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.CatalogUpdateInput)
	if !ok {
		return internalFailure
	}
	return c.mutateConnection(ctx, in.Expected, func(ctx context.Context, cat Catalog, i int) (any, bool, error) {
		conn := cat.Connections[i]
		baseURL, err := protocol.NormalizeConnectionBaseURL(in.Changes.BaseURL, conn.ProviderType)
		if err != nil {
			return nil, false, invalidInput("base URL: %v", err)
		}
		conn.Name = in.Changes.Name
		conn.BaseURL = baseURL
		conn.Enabled = in.Changes.Enabled
		conn.EnabledModelIDs = append([]string{}, in.Changes.EnabledModelIDs...)
		conn.Revision++
		if t := cat.DefaultTarget; t != nil && t.ConnectionID == conn.ConnectionID &&
			(!conn.Enabled || !slices.Contains(conn.EnabledModelIDs, t.ModelID)) {
			return protocol.InvalidDefaultTarget{Target: *t}, false, nil
		}
		next := cat
		next.Connections = slices.Clone(cat.Connections)
		next.Connections[i] = conn
		rev, err := c.storeCatalog(ctx, cat.Revision, next)
		if err != nil {
			return nil, false, err
		}
		return protocol.CatalogConnectionCommitted{CatalogRevision: rev,
			Connection: protocol.ConnectionVersionBasis{ConnectionID: conn.ConnectionID, Revision: conn.Revision}}, true, nil
	})
}

// contextWindowSet serves connection.context-window.set (an extension,
// docs/protocol.md): the connection declares the context window of its
// models; a model that discovery described keeps its own.
func (c *Settings) contextWindowSet(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.ConnectionContextWindowSetInput)
	if !ok {
		return internalFailure
	}
	return c.mutateConnection(ctx, in.Expected, func(ctx context.Context, cat Catalog, i int) (any, bool, error) {
		conn := cat.Connections[i]
		conn.ContextWindow = in.ContextWindow
		conn.Revision++
		next := cat
		next.Connections = slices.Clone(cat.Connections)
		next.Connections[i] = conn
		rev, err := c.storeCatalog(ctx, cat.Revision, next)
		if err != nil {
			return nil, false, err
		}
		return protocol.CatalogConnectionCommitted{CatalogRevision: rev,
			Connection: protocol.ConnectionVersionBasis{ConnectionID: conn.ConnectionID, Revision: conn.Revision}}, true, nil
	})
}

func (c *Settings) catalogRemove(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.CatalogRemoveInput)
	if !ok {
		return internalFailure
	}
	return c.mutateConnection(ctx, in.Expected, func(ctx context.Context, cat Catalog, i int) (any, bool, error) {
		next := cat
		next.Connections = slices.Delete(slices.Clone(cat.Connections), i, i+1)
		if t := cat.DefaultTarget; t != nil && t.ConnectionID == in.Expected.ConnectionID {
			next.DefaultTarget = nil
		}
		rev, err := c.storeCatalog(ctx, cat.Revision, next)
		if err != nil {
			return nil, false, err
		}
		next.Revision = rev
		c.dropConnectionCredentials(ctx, &next)
		return protocol.CatalogCommitted{CatalogRevision: rev}, true, nil
	})
}

func (c *Settings) catalogSetDefaultTarget(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.CatalogSetDefaultTargetInput)
	if !ok {
		return internalFailure
	}
	return c.mutateCatalogAt(ctx, in.ExpectedCatalogRevision, func(ctx context.Context, cat Catalog) (any, bool, error) {
		next := cat
		next.DefaultTarget = nil
		if t := in.Target; t != nil {
			i := cat.find(t.ConnectionID)
			if i < 0 || !cat.Connections[i].Enabled || !slices.Contains(cat.Connections[i].EnabledModelIDs, t.ModelID) {
				return protocol.InvalidDefaultTarget{Target: *t}, false, nil
			}
			target := *t
			next.DefaultTarget = &target
		}
		rev, err := c.storeCatalog(ctx, cat.Revision, next)
		if err != nil {
			return nil, false, err
		}
		return protocol.CatalogCommitted{CatalogRevision: rev}, true, nil
	})
}
