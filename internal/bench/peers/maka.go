package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/protocol"
)

// buildMaka builds the executables of the module the benchmark runs in
// (./cmd/...: maka, and maka-host which it starts) into dir/bin and
// returns maka.
func buildMaka(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		return "", fmt.Errorf("not inside the module (go env GOMOD: %v)", err)
	}
	bindir := filepath.Join(dir, "bin")
	bin := filepath.Join(bindir, "maka")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bindir+string(filepath.Separator), "./cmd/...")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/...: %v: %s", err, b)
	}
	// an installed executable is written back to disk; one just built
	// may not be, and its dirty pages cannot be paged out (see
	// docs/benchmarks.md, Memory)
	for _, name := range []string{"maka", "maka-host"} {
		if f, err := os.Open(filepath.Join(bindir, name)); err == nil {
			_ = f.Sync()
			f.Close()
		}
	}
	return bin, nil
}

// makaPeer runs `maka run` against a warm host on a fresh root with a
// connection at the fake's Chat Completions endpoint. The host is started
// here and stopped by cleanup; the root's control directory under the
// real home is removed then too.
func makaPeer(ctx context.Context, base, bin, modelURL string, cleanup *cleanups) (*peer, error) {
	home, work, env, err := newPeerDirs(base, "maka")
	if err != nil {
		return nil, err
	}
	root := filepath.Join(base, "maka", "root")
	capability, err := storageroot.Resolve(root, storageroot.KindInteractive)
	if err != nil {
		return nil, err
	}
	cleanup.Cleanup(func() {
		if ns, err := storageroot.ControlNamespace(); err == nil {
			os.RemoveAll(filepath.Join(ns, capability.RootID()))
		}
	})
	env = append(env, "MAKA_ROOT="+root, "FAKE_API_KEY="+apiKey)
	var stderr bytes.Buffer
	host := exec.Command(bin, "host", "serve", "--root", root, "--idle-grace", "0", "--log-level", "error")
	host.Env, host.Stderr = env, &stderr
	if err := host.Start(); err != nil {
		return nil, err
	}
	cleanup.Cleanup(func() {
		_ = host.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = host.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = host.Process.Kill()
			<-done
		}
	})
	if err := waitReady(ctx, root); err != nil {
		return nil, fmt.Errorf("maka host: %v: %s", err, stderr.String())
	}
	// idle memory now, before any other maka process runs: the host's
	// page-out of its startup (200 ms after it starts) skips the
	// executable's pages that another process maps at that moment
	time.Sleep(time.Second)
	idle := treeRSS(host.Process.Pid)
	add := func(root string) []string {
		return []string{bin, "connection", "add", "fake", "--root", root, "--provider", "openai-compatible",
			"--base-url", modelURL + "/v1", "--model", "m1", "--key-env", "FAKE_API_KEY", "--default"}
	}
	if _, out, err := run(ctx, work, env, add(root)); err != nil {
		return nil, fmt.Errorf("maka connection add: %v: %s", err, out)
	}
	// a second root for the cold figure: each of its turns starts
	// without a host, so the client starts one, stopped after the turn
	cold := filepath.Join(base, "maka", "cold-root")
	coldCap, err := storageroot.Resolve(cold, storageroot.KindInteractive)
	if err != nil {
		return nil, err
	}
	stopCold := []string{bin, "host", "stop", "--root", cold}
	cleanup.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _, _ = run(c, work, env, stopCold)
		if ns, err := storageroot.ControlNamespace(); err == nil {
			os.RemoveAll(filepath.Join(ns, coldCap.RootID()))
		}
	})
	if _, out, err := run(ctx, work, env, add(cold)); err != nil {
		return nil, fmt.Errorf("maka connection add (cold root): %v: %s", err, out)
	}
	if _, out, err := run(ctx, work, env, stopCold); err != nil {
		return nil, fmt.Errorf("maka host stop (cold root): %v: %s", err, out)
	}
	flags := []string{"run", "--root", root, "--permission-mode", "bypass", "--cwd", work}
	return &peer{
		name: "maka", version: versionOf(ctx, bin), home: home, work: work, env: env,
		first:   func(p string) []string { return append(append([]string{bin}, flags...), p) },
		cont:    func(p string) []string { return append(append([]string{bin}, flags...), "--continue", p) },
		idleKiB: idle,
		cold: func(p string) []string {
			return []string{bin, "run", "--root", cold, "--permission-mode", "bypass", "--cwd", work, p}
		},
		stopCold: stopCold,
		counted:  "the `maka run` client only; the warm host's CPU per turn is its own row",
		hostPID:  host.Process.Pid,
	}, nil
}

// waitReady polls the root until its host answers ready.
func waitReady(ctx context.Context, root string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		res, err := client.Connect(ctx, client.Options{RootPath: root, Surface: protocol.SurfaceInspect})
		if err == nil && res.Kind == client.Connected {
			st, err := res.Conn.Status(ctx)
			res.Conn.Close()
			if err == nil && st.State == protocol.StateReady {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return errors.New("not ready in 20s")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func versionOf(ctx context.Context, bin string) string {
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimPrefix(strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]), "maka ")
}
