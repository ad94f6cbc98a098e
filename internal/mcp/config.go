// Package mcp owns the storage root's MCP servers: their configuration
// (a document of the store, their environment and header values in the
// credentials file), the one client connection per server that every
// session of the host shares, its restarts, and the tools each server
// offers the model as mcp__<server>__<tool> (docs/security.md, MCP servers).
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/maka-agent/maka/internal/config"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// DocServers is the store document of the configured servers.
const DocServers = "mcp_servers"

// secretPrefix begins the credentials-file keys of server values:
// ext/mcp/<server>/env/<NAME> and ext/mcp/<server>/header/<Name>.
const secretPrefix = config.ExternalPrefix + "mcp/"

// Server is one configured server as stored: the names of its environment
// variables and headers, never their values.
type Server struct {
	Name        string   `json:"name"`
	Transport   string   `json:"transport"`
	Command     string   `json:"command,omitempty"`
	Args        []string `json:"args,omitempty"`
	Cwd         string   `json:"cwd,omitempty"`
	URL         string   `json:"url,omitempty"`
	EnvNames    []string `json:"envNames,omitempty"`
	HeaderNames []string `json:"headerNames,omitempty"`
}

// document is the body of DocServers.
type document struct {
	Servers []Server `json:"servers"`
}

func secretKey(server, kind, name string) string {
	return secretPrefix + server + "/" + kind + "/" + name
}

// loadServers reads the configured servers and the document's revision.
func loadServers(ctx context.Context, st *store.Store) (servers []Server, rev int64, undecodable error, err error) {
	var doc document
	err = st.Read(ctx, func(q store.Querier) error {
		r, body, found, err := store.ReadDocument(q, DocServers)
		if err != nil || !found {
			return err
		}
		rev = r
		if err := json.Unmarshal(body, &doc); err != nil {
			// The host still starts: without servers, until the next set
			// replaces the document.
			undecodable = err
			doc = document{}
		}
		return nil
	})
	if err != nil {
		return nil, 0, nil, err
	}
	// A stored server that no longer validates is left out, not trusted.
	doc.Servers = slices.DeleteFunc(doc.Servers, func(s Server) bool { return s.validate() != nil })
	return doc.Servers, rev, undecodable, nil
}

// validate checks a stored server the way the wire decoder checks input.
func (s Server) validate() error {
	if !protocol.ValidMCPServerName(s.Name) {
		return fmt.Errorf("invalid server name %q", s.Name)
	}
	switch s.Transport {
	case protocol.MCPTransportStdio:
		if s.Command == "" || strings.ContainsRune(s.Command, 0) {
			return errors.New("a stdio server needs a command")
		}
	case protocol.MCPTransportHTTP:
		if !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://") {
			return errors.New("an http server needs an http or https URL")
		}
	default:
		return fmt.Errorf("unknown transport %q", s.Transport)
	}
	return nil
}

// fromInput is the stored form of a set input and its secrets by key.
func fromInput(in protocol.MCPServersSetInput) (Server, map[string]string) {
	s := Server{Name: in.Name, Transport: in.Transport, Command: in.Command, Args: in.Args, Cwd: in.Cwd, URL: in.URL}
	secrets := map[string]string{}
	for _, p := range in.Env {
		s.EnvNames = append(s.EnvNames, p.Name)
		secrets[secretKey(in.Name, "env", p.Name)] = p.Value
	}
	for _, p := range in.Headers {
		s.HeaderNames = append(s.HeaderNames, p.Name)
		secrets[secretKey(in.Name, "header", p.Name)] = p.Value
	}
	return s, secrets
}

// writeServers stores servers as the next revision after rev.
func writeServers(ctx context.Context, st *store.Store, servers []Server, rev int64) (int64, error) {
	body, err := json.Marshal(document{Servers: servers})
	if err != nil {
		return 0, err
	}
	var next int64
	err = st.Write(ctx, func(tx *store.Tx) error {
		var err error
		next, err = store.WriteDocument(tx, DocServers, body, rev)
		return err
	})
	return next, err
}

// allSecrets is every server value under secretPrefix for servers, read
// from the credentials file, with overrides for one server.
func allSecrets(secrets *config.SecretFile, servers []Server, override string, values map[string]string) map[string]string {
	out := map[string]string{}
	for _, s := range servers {
		if s.Name == override {
			continue
		}
		for _, n := range s.EnvNames {
			if v, ok := secrets.GetKey(secretKey(s.Name, "env", n)); ok {
				out[secretKey(s.Name, "env", n)] = v
			}
		}
		for _, n := range s.HeaderNames {
			if v, ok := secrets.GetKey(secretKey(s.Name, "header", n)); ok {
				out[secretKey(s.Name, "header", n)] = v
			}
		}
	}
	for k, v := range values {
		out[k] = v
	}
	return out
}
