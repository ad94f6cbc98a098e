package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// apiKey is the key every client sends the fake model.
const apiKey = "bench-fake-key"

// peer is one client under measurement: how to start a new session with
// a prompt, how to continue the last one, and its daemon, if it has one.
type peer struct {
	name    string
	version string
	home    string // its own HOME, under the run's temporary directory
	work    string // the workspace the client runs in
	env     []string
	first   func(prompt string) []string
	cont    func(prompt string) []string
	// daemon starts the peer's long-lived process, waits until it is up
	// and returns its pid and a stop function; nil: the peer has none.
	daemon func(ctx context.Context) (pid int, stop func(), err error)
	// idleKiB, for maka, is its host's idle RSS, measured when it started.
	idleKiB int64
	// counted says what the client's rusage covers.
	counted string
	// hostPID, for maka, is the warm host whose CPU each turn also uses.
	hostPID int
	// cold, for maka, starts a new session on a root without a host (the
	// client starts it); stopCold stops that host again.
	cold     func(prompt string) []string
	stopCold []string
}

// newPeerDirs makes the peer's HOME (with XDG directories inside it) and
// workspace under base, and returns an environment that points at them
// and keeps PATH.
func newPeerDirs(base, name string) (home, work string, env []string, err error) {
	home = filepath.Join(base, name, "home")
	work = filepath.Join(base, name, "work")
	for _, d := range []string{home, work, filepath.Join(home, ".config"), filepath.Join(home, ".local", "share"),
		filepath.Join(home, ".cache"), filepath.Join(home, ".local", "state")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", "", nil, err
		}
	}
	env = []string{
		"HOME=" + home,
		"PATH=" + os.Getenv("PATH"),
		"USER=" + os.Getenv("USER"),
		"LANG=C.UTF-8",
		"TERM=dumb",
		"TMPDIR=" + os.TempDir(),
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"),
		"NO_COLOR=1",
	}
	return home, work, env, nil
}

func writeFile(path, body string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(body), 0o600)
}

// codexPeer runs the native Codex binary of the npm package (the npm
// launcher only execs it) against the fake's Responses endpoint.
func codexPeer(base string, inst *install, modelURL string) (*peer, error) {
	bin, err := inst.codexBinary()
	if err != nil {
		return nil, err
	}
	home, work, env, err := newPeerDirs(base, "codex")
	if err != nil {
		return nil, err
	}
	codexHome := filepath.Join(home, ".codex")
	cfg := fmt.Sprintf(`model = "m1"
model_provider = "fake"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = %q
env_key = "FAKE_API_KEY"
wire_api = "responses"
`, modelURL+"/v1")
	if err := writeFile(filepath.Join(codexHome, "config.toml"), cfg); err != nil {
		return nil, err
	}
	env = append(env, "CODEX_HOME="+codexHome, "FAKE_API_KEY="+apiKey, "CODEX_MANAGED_BY_NPM=1",
		"CODEX_MANAGED_PACKAGE_ROOT="+inst.packageDir("@openai/codex"),
		"PATH="+filepath.Join(filepath.Dir(filepath.Dir(bin)), "codex-path")+":"+os.Getenv("PATH"))
	flags := []string{"--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check"}
	return &peer{
		name: "codex", version: inst.version("@openai/codex"), home: home, work: work, env: env,
		first: func(p string) []string { return append(append([]string{bin, "exec"}, flags...), p) },
		cont:  func(p string) []string { return append(append([]string{bin, "exec", "resume", "--last"}, flags...), p) },
		daemon: func(ctx context.Context) (int, func(), error) {
			return stdioDaemon(ctx, work, env, []string{bin, "app-server"},
				`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"bench","version":"0"}}}`)
		},
		counted: "the codex process (its shell commands are its children)",
	}, nil
}

// claudePeer runs Claude Code's native binary against the fake's
// Messages endpoint.
func claudePeer(base string, inst *install, modelURL string) (*peer, error) {
	bin := inst.bin("claude")
	if _, err := os.Stat(bin); err != nil {
		return nil, err
	}
	home, work, env, err := newPeerDirs(base, "claude")
	if err != nil {
		return nil, err
	}
	env = append(env,
		"CLAUDE_CONFIG_DIR="+filepath.Join(home, ".claude"),
		"ANTHROPIC_BASE_URL="+modelURL,
		"ANTHROPIC_API_KEY="+apiKey,
		"ANTHROPIC_MODEL=m1",
		"ANTHROPIC_SMALL_FAST_MODEL=m1",
		"ANTHROPIC_DEFAULT_HAIKU_MODEL=m1",
		"ANTHROPIC_DEFAULT_SONNET_MODEL=m1",
		"ANTHROPIC_DEFAULT_OPUS_MODEL=m1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		// --dangerously-skip-permissions refuses to run as root
		// outside a declared sandbox; the benchmark's machine is one.
		"IS_SANDBOX=1",
	)
	flags := []string{"-p", "--dangerously-skip-permissions", "--model", "m1"}
	return &peer{
		name: "claude", version: inst.version("@anthropic-ai/claude-code"), home: home, work: work, env: env,
		first:   func(p string) []string { return append(append([]string{bin}, flags...), p) },
		cont:    func(p string) []string { return append(append([]string{bin, "--continue"}, flags...), p) },
		counted: "the claude process and its children (shell commands)",
	}, nil
}

// opencodePeer runs opencode's native binary with a config declaring an
// OpenAI-compatible provider at the fake's Chat Completions endpoint.
func opencodePeer(base string, inst *install, modelURL string) (*peer, error) {
	bin := inst.bin("opencode")
	if _, err := os.Stat(bin); err != nil {
		return nil, err
	}
	home, work, env, err := newPeerDirs(base, "opencode")
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{
		"$schema": "https://opencode.ai/config.json",
		"provider": map[string]any{"fake": map[string]any{
			"npm": "@ai-sdk/openai-compatible", "name": "Fake model",
			"options": map[string]any{"baseURL": modelURL + "/v1", "apiKey": apiKey},
			"models":  map[string]any{"m1": map[string]any{"name": "m1", "tool_call": true}},
		}},
		"model": "fake/m1", "small_model": "fake/m1",
		"enabled_providers": []string{"fake"},
		"permission":        map[string]any{"edit": "allow", "bash": "allow", "webfetch": "allow"},
		"autoupdate":        false,
		"share":             "disabled",
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	cfgPath := filepath.Join(home, ".config", "opencode", "opencode.json")
	if err := writeFile(cfgPath, string(b)); err != nil {
		return nil, err
	}
	env = append(env, "OPENCODE_CONFIG="+cfgPath, "OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD=1", "OPENCODE_DISABLE_SHARE=1")
	flags := []string{"run", "--auto", "-m", "fake/m1"}
	return &peer{
		name: "opencode", version: inst.version("opencode-ai"), home: home, work: work, env: env,
		first: func(p string) []string { return append(append([]string{bin}, flags...), p) },
		cont:  func(p string) []string { return append(append([]string{bin}, flags...), "--continue", p) },
		daemon: func(ctx context.Context) (int, func(), error) {
			return lineDaemon(ctx, work, env, []string{bin, "serve", "--hostname", "127.0.0.1", "--port", "0"}, "listening")
		},
		counted: "the opencode process (it runs its server in-process) and its children",
	}, nil
}

// startDaemon starts argv in its own process group and returns a stop
// function that kills the group and waits.
func startDaemon(dir string, env, argv []string, stdin io.Reader) (*exec.Cmd, io.ReadCloser, func(), error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env, cmd.Stdin = dir, env, stdin
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, err
	}
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	return cmd, out, stop, nil
}

// lineDaemon starts a daemon and waits for a line of its output that
// contains ready.
func lineDaemon(ctx context.Context, dir string, env, argv []string, ready string) (int, func(), error) {
	cmd, out, stop, err := startDaemon(dir, env, argv, nil)
	if err != nil {
		return 0, nil, err
	}
	if err := waitLine(ctx, out, func(l string) bool { return strings.Contains(l, ready) }); err != nil {
		stop()
		return 0, nil, err
	}
	return cmd.Process.Pid, stop, nil
}

// stdioDaemon starts a JSON-RPC daemon on stdio, sends it request and
// waits for the answer to it (a line with "id":1).
func stdioDaemon(ctx context.Context, dir string, env, argv []string, request string) (int, func(), error) {
	pr, pw := io.Pipe()
	cmd, out, stop, err := startDaemon(dir, env, argv, pr)
	if err != nil {
		return 0, nil, err
	}
	stopAll := func() { pw.Close(); stop() }
	go func() { _, _ = io.WriteString(pw, request+"\n") }()
	if err := waitLine(ctx, out, func(l string) bool { return strings.Contains(l, `"id":1`) }); err != nil {
		stopAll()
		return 0, nil, err
	}
	return cmd.Process.Pid, stopAll, nil
}

// waitLine reads r until a line satisfies ok, ctx ends or r ends; the
// rest of r is drained in the background until the process exits.
func waitLine(ctx context.Context, r io.Reader, ok func(string) bool) error {
	found := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		sent := false
		var last []string
		for sc.Scan() {
			if !sent && ok(sc.Text()) {
				found <- nil
				sent = true
			}
			if !sent {
				last = append(last, sc.Text())
				if len(last) > 5 {
					last = last[1:]
				}
			}
		}
		if !sent {
			found <- fmt.Errorf("exited before it was ready: %s", strings.Join(last, " | "))
		}
	}()
	select {
	case err := <-found:
		return err
	case <-ctx.Done():
		return errors.New("not ready in time")
	}
}
