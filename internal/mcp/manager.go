package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/maka-agent/maka/internal/config"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/protocol"
)

// Restart policy: a server that failed to start, or died, is started again
// on its next use after a backoff (restartBase doubling, at most
// restartMax); after maxFailures consecutive failures (a server that ran
// for healthyAfter resets the count) it stays failed until it is set again
// or the host restarts.
const (
	restartBase  = 200 * time.Millisecond
	restartMax   = 10 * time.Second
	maxFailures  = 5
	healthyAfter = time.Minute
)

// DefaultStartTimeout bounds one start of a server: the process or the
// HTTP session, the initialize handshake and the tool listing.
const DefaultStartTimeout = 20 * time.Second

// ErrClosed refuses use of a closed manager.
var ErrClosed = errors.New("mcp: the host is shutting down")

// Options configures a Manager.
type Options struct {
	Store   *store.Store
	Secrets *config.SecretFile
	Log     *slog.Logger
	// StartTimeout bounds one start (0: DefaultStartTimeout).
	StartTimeout time.Duration
	// Version is the client version the host announces.
	Version string
	// RestartBase is the first restart backoff (0: restartBase; tests).
	RestartBase time.Duration
}

// Manager owns the root's MCP servers for one host epoch: their
// configuration, and one client connection per server, started on first
// use and shared by every session and client of the host.
type Manager struct {
	opts    Options
	log     *slog.Logger
	ctx     context.Context // the manager's lifetime
	cancel  context.CancelFunc
	client  *mcpsdk.Client
	writeMu sync.Mutex // serialises configuration changes
	wg      sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	rev     int64
	servers []*server // in configuration order
}

// New loads the configured servers; none is started.
func New(ctx context.Context, opts Options) (*Manager, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.RestartBase <= 0 {
		opts.RestartBase = restartBase
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	cfgs, rev, undecodable, err := loadServers(ctx, opts.Store)
	if err != nil {
		return nil, err
	}
	if undecodable != nil {
		opts.Log.Error("the MCP server configuration does not decode; no server is configured until one is set", "err", undecodable)
	}
	mctx, cancel := context.WithCancel(context.Background())
	m := &Manager{opts: opts, log: opts.Log, ctx: mctx, cancel: cancel, rev: rev,
		client: mcpsdk.NewClient(&mcpsdk.Implementation{Name: "maka", Version: opts.Version},
			&mcpsdk.ClientOptions{Logger: slog.New(slog.DiscardHandler)})}
	for _, c := range cfgs {
		m.servers = append(m.servers, m.newServer(c))
	}
	return m, nil
}

// Close stops every server (its process group is killed) and waits for
// what the manager started.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	servers := m.servers
	m.mu.Unlock()
	m.cancel()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(s.shutdown)
	}
	wg.Wait()
	m.wg.Wait()
	return nil
}

func (m *Manager) lookup(name string) *server {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.servers {
		if s.cfg.Name == name {
			return s
		}
	}
	return nil
}

// Tools returns the tools of every configured server for one turn: a
// server not started yet is started now (first use, concurrently, each
// within the start timeout); a failed one contributes the tools it listed
// when it last ran, whose calls start it again or fail with the reason.
func (m *Manager) Tools(ctx context.Context) []tools.Tool {
	m.mu.Lock()
	servers := append([]*server(nil), m.servers...)
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil
	}
	// The starts belong to the manager (each bounded by the start
	// timeout): a turn stopped meanwhile goes on without waiting for them.
	var pending []chan struct{}
	for _, s := range servers {
		if !s.needsFirstStart() {
			continue
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil
		}
		m.wg.Add(1) // under mu: Close waits only once closed is set
		m.mu.Unlock()
		done := make(chan struct{})
		pending = append(pending, done)
		go func() {
			defer m.wg.Done()
			defer close(done)
			_, _ = s.connect(m.ctx)
		}()
	}
	for _, done := range pending {
		select {
		case <-done:
		case <-ctx.Done():
			return nil
		}
	}
	var out []tools.Tool
	for _, s := range servers {
		out = append(out, s.modelTools()...)
	}
	return out
}

// Status lists every configured server with its state and tools.
func (m *Manager) Status() []protocol.MCPServer {
	m.mu.Lock()
	servers := append([]*server(nil), m.servers...)
	m.mu.Unlock()
	out := make([]protocol.MCPServer, 0, len(servers))
	for _, s := range servers {
		out = append(out, s.status())
	}
	return out
}

// Set adds or replaces a server and its secrets; a replaced server is
// stopped and starts again with the new configuration on its next use.
func (m *Manager) Set(ctx context.Context, in protocol.MCPServersSetInput) (protocol.MCPServer, error) {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	cfg, values := fromInput(in)
	if err := cfg.validate(); err != nil {
		return protocol.MCPServer{}, &InputError{err.Error()}
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return protocol.MCPServer{}, ErrClosed
	}
	var cfgs []Server
	replaced := -1
	for i, s := range m.servers {
		cfgs = append(cfgs, s.cfg)
		if s.cfg.Name == cfg.Name {
			replaced = i
		}
	}
	rev := m.rev
	m.mu.Unlock()
	if replaced >= 0 {
		cfgs[replaced] = cfg
	} else {
		if len(cfgs) >= protocol.MCPServersMax {
			return protocol.MCPServer{}, &InputError{fmt.Sprintf("at most %d MCP servers can be configured", protocol.MCPServersMax)}
		}
		cfgs = append(cfgs, cfg)
	}
	m.mu.Lock()
	var before []Server
	for _, s := range m.servers {
		before = append(before, s.cfg)
	}
	m.mu.Unlock()
	prev := allSecrets(m.opts.Secrets, before, "", nil)
	if err := m.opts.Secrets.SetPrefixed(secretPrefix, allSecrets(m.opts.Secrets, cfgs, cfg.Name, values)); err != nil {
		return protocol.MCPServer{}, fmt.Errorf("mcp: write the credentials file: %w", err)
	}
	next, err := writeServers(ctx, m.opts.Store, cfgs, rev)
	if err != nil {
		if !errors.Is(err, store.ErrCommitOutcomeUnknown) {
			if rerr := m.opts.Secrets.SetPrefixed(secretPrefix, prev); rerr != nil {
				m.log.Error("mcp server secrets not restored after a failed write", "server", cfg.Name, "err", rerr)
			}
		}
		return protocol.MCPServer{}, err
	}
	s := m.newServer(cfg)
	var old *server
	m.mu.Lock()
	m.rev = next
	if replaced >= 0 {
		old, m.servers[replaced] = m.servers[replaced], s
	} else {
		m.servers = append(m.servers, s)
	}
	m.mu.Unlock()
	if old != nil {
		old.shutdown()
	}
	return s.status(), nil
}

// Remove removes a server and its secrets and stops it.
func (m *Manager) Remove(ctx context.Context, name string) (bool, error) {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return false, ErrClosed
	}
	var cfgs []Server
	at := -1
	for i, s := range m.servers {
		if s.cfg.Name == name {
			at = i
			continue
		}
		cfgs = append(cfgs, s.cfg)
	}
	rev := m.rev
	m.mu.Unlock()
	if at < 0 {
		return false, nil
	}
	next, err := writeServers(ctx, m.opts.Store, cfgs, rev)
	if err != nil {
		return false, err
	}
	m.mu.Lock()
	m.rev = next
	old := m.servers[at]
	m.servers = append(m.servers[:at:at], m.servers[at+1:]...)
	m.mu.Unlock()
	old.shutdown()
	// The values go after the configuration that names them; a failure
	// leaves orphans that the next Set drops.
	if err := m.opts.Secrets.SetPrefixed(secretPrefix, allSecrets(m.opts.Secrets, cfgs, "", nil)); err != nil {
		m.log.Warn("mcp server secrets not removed from the credentials file", "server", name, "err", err)
	}
	return true, nil
}

// InputError is a configuration the host refuses.
type InputError struct{ msg string }

func (e *InputError) Error() string { return e.msg }

// env is the environment of a stdio server: baseEnv from the host, then
// its configured variables.
func (m *Manager) env(cfg Server) ([]string, error) {
	var env []string
	for _, k := range baseEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for _, n := range cfg.EnvNames {
		v, ok := m.opts.Secrets.GetKey(secretKey(cfg.Name, "env", n))
		if !ok {
			return nil, fmt.Errorf("the value of %s is missing from the credentials file; set the server again", n)
		}
		env = append(env, n+"="+v)
	}
	return env, nil
}

// headers are the configured headers of an http server.
func (m *Manager) headers(cfg Server) (http.Header, error) {
	h := http.Header{}
	for _, n := range cfg.HeaderNames {
		v, ok := m.opts.Secrets.GetKey(secretKey(cfg.Name, "header", n))
		if !ok {
			return nil, fmt.Errorf("the value of header %s is missing from the credentials file; set the server again", n)
		}
		h.Set(n, v)
	}
	return h, nil
}

// httpClient is the client of an http server at endpoint: headers go to
// its origin only, and it follows no redirect to another origin.
func httpClient(endpoint string, headers http.Header) *http.Client {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.Proxy = nil
	return &http.Client{Transport: headerTransport{base: base, headers: headers, origin: originOf(endpoint)}, CheckRedirect: sameOrigin}
}

// headerTransport adds a server's headers (its secrets) to each request to
// the server's own origin, and to no other.
type headerTransport struct {
	base    http.RoundTripper
	headers http.Header
	origin  string
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if originOf(r.URL.String()) != t.origin {
		return nil, fmt.Errorf("mcp: request to %s, not the server's origin %s", r.URL.Redacted(), t.origin)
	}
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header[k] = v
	}
	return t.base.RoundTrip(r)
}

// sameOrigin refuses a redirect away from the server's origin: the
// configured headers must not reach a third party.
func sameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("mcp: too many redirects")
	}
	if originOf(req.URL.String()) != originOf(via[0].URL.String()) {
		return fmt.Errorf("mcp: the server redirected to another origin (%s)", req.URL.Redacted())
	}
	return nil
}

// originOf is scheme://host[:port] of a URL ("" when it does not parse).
func originOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host)
}
