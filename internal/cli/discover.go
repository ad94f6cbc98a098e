package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/protocol"
)

// Model discovery: 'maka connection add' asks the server which models it
// serves, and with no connection configured a run looks for a local model
// server on loopback. Both read a bounded JSON listing and never send a key
// anywhere but the connection's own base URL.

const (
	listModelsTimeout = 3 * time.Second
	probeTimeout      = 400 * time.Millisecond
	listingMaxBytes   = 1 << 20
)

// listModels returns the model ids the server of a connection lists:
// Ollama's /api/tags for the ollama type, else the OpenAI-style /models
// under the base URL (Anthropic's with its headers). key may be empty.
func listModels(ctx context.Context, providerType, baseURL, key string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, listModelsTimeout)
	defer cancel()
	base := strings.TrimSuffix(baseURL, "/")
	if providerType == "ollama" {
		return getModelIDs(ctx, strings.TrimSuffix(base, "/v1")+"/api/tags", nil)
	}
	headers := map[string]string{}
	switch {
	case providerType == "anthropic" || providerType == "anthropic-compatible":
		if !strings.HasSuffix(base, "/v1") {
			base += "/v1"
		}
		headers["anthropic-version"] = "2023-06-01"
		if key != "" {
			headers["x-api-key"] = key
		}
	case key != "":
		headers["Authorization"] = "Bearer " + key
	}
	return getModelIDs(ctx, base+"/models", headers)
}

// getModelIDs reads a model listing: {"data":[{"id":...}]} (OpenAI,
// Anthropic) or {"models":[{"name":...}]} (Ollama).
func getModelIDs(ctx context.Context, url string, headers map[string]string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	var listing struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
		Models []struct {
			Name string `json:"name"`
		} `json:"models"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, listingMaxBytes)).Decode(&listing); err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	var ids []string
	for _, m := range listing.Data {
		if usableModelID(m.ID) && len(ids) < maxListedModels {
			ids = append(ids, m.ID)
		}
	}
	for _, m := range listing.Models {
		if usableModelID(m.Name) && len(ids) < maxListedModels {
			ids = append(ids, m.Name)
		}
	}
	return ids, nil
}

// maxListedModels bounds the model ids kept from one listing.
const maxListedModels = 256

// maxModelIDBytes bounds a listed model id; real ones ("llama3.1:8b",
// "hf.co/org/model:Q4_K_M") are far shorter.
const maxModelIDBytes = 200

// usableModelID reports whether a listed id may be offered, named in a
// hint or stored as a connection's model: a server's listing is untrusted,
// so an id with a control character (a terminal escape sequence), a space
// or invalid UTF-8, or longer than maxModelIDBytes, is left out.
func usableModelID(id string) bool {
	if id == "" || len(id) > maxModelIDBytes || !utf8.ValidString(id) {
		return false
	}
	for _, r := range id {
		if !unicode.IsGraphic(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// localServer is a model server found on loopback.
type localServer struct {
	Name, Provider, BaseURL string
	Models                  []string
}

// localCandidates are the servers a run looks for with no connection:
// Ollama, LM Studio and a llama.cpp server at their default ports.
var localCandidates = []localServer{
	{Name: "Ollama", Provider: "ollama", BaseURL: "http://127.0.0.1:11434/v1"},
	{Name: "LM Studio", Provider: "lm-studio", BaseURL: "http://127.0.0.1:1234/v1"},
	{Name: "a llama.cpp server", Provider: "openai-compatible", BaseURL: "http://127.0.0.1:8080/v1"},
}

// discoverLocal probes localCandidates at once, each within probeTimeout,
// and returns those that list at least one model, in candidate order.
func discoverLocal(ctx context.Context, candidates []localServer) []localServer {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	found := make([]*localServer, len(candidates))
	var wg sync.WaitGroup
	for i, c := range candidates {
		wg.Go(func() {
			if ids, err := listModels(ctx, c.Provider, c.BaseURL, ""); err == nil && len(ids) > 0 {
				c.Models = ids
				found[i] = &c
			}
		})
	}
	wg.Wait()
	var out []localServer
	for _, f := range found {
		if f != nil {
			out = append(out, *f)
		}
	}
	return out
}

// slug is the connection name a found server is added as.
func (s localServer) slug() string {
	if s.Provider == "openai-compatible" {
		return "local"
	}
	return s.Provider
}

// addCommand is the exact 'maka connection add' line for a found server.
func (s localServer) addCommand(rootHint string) string {
	line := "maka connection add " + s.slug() + rootHint + " --provider " + s.Provider
	if s.Provider == "openai-compatible" {
		line += " --base-url " + s.BaseURL
	}
	return line + " --model " + s.Models[0] + " --no-key"
}

// addLocalServer adds a found server as a keyless connection with modelID,
// as its addCommand line would, and makes modelID the default target when
// none is set.
func addLocalServer(ctx context.Context, conn *client.Conn, s localServer, modelID, rootHint string) error {
	baseURL, err := protocol.NormalizeConnectionBaseURL(s.BaseURL, s.Provider)
	if err != nil {
		return err
	}
	if s.Provider != "openai-compatible" {
		baseURL = "" // the provider's default, as the add line leaves it
	}
	created, hadDefault, err := createConnection(ctx, conn, protocol.ConnectionDraft{Slug: s.slug(), Name: s.slug(),
		ProviderType: s.Provider, BaseURL: baseURL, Enabled: true, EnabledModelIDs: []string{modelID}}, rootHint)
	if err != nil {
		return err
	}
	if !hadDefault {
		return setDefault(ctx, conn, created.Connection.ConnectionID, modelID)
	}
	return nil
}

// tuiLocalServers adapts discovery to the terminal UI's offer.
func tuiLocalServers(rootHint string) (func(context.Context) []LocalServer, func(context.Context, *client.Conn, LocalServer, string) error) {
	find := func(ctx context.Context) []LocalServer {
		var out []LocalServer
		for _, s := range discoverLocal(ctx, localCandidates) {
			out = append(out, LocalServer{Name: s.Name, Slug: s.slug(), Provider: s.Provider, BaseURL: s.BaseURL,
				Models: s.Models, AddCommand: s.addCommand(rootHint)})
		}
		return out
	}
	add := func(ctx context.Context, conn *client.Conn, s LocalServer, modelID string) error {
		return addLocalServer(ctx, conn, localServer{Name: s.Name, Provider: s.Provider, BaseURL: s.BaseURL, Models: s.Models}, modelID, rootHint)
	}
	return find, add
}

// modelNote says how model relates to the ids a server lists ("" when it
// is listed or the listing is empty).
func modelNote(model string, listed []string) string {
	if len(listed) == 0 || slices.Contains(listed, model) {
		return ""
	}
	shown := listed
	if len(shown) > 8 {
		shown = shown[:8]
	}
	more := ""
	if len(listed) > len(shown) {
		more = fmt.Sprintf(" and %d more", len(listed)-len(shown))
	}
	return fmt.Sprintf("model %s is not among the models the server lists: %s%s", model, strings.Join(shown, ", "), more)
}
