package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// install is the npm prefix the peers are installed into.
type install struct{ dir string }

// npmInstall installs pkg@version into the prefix, with npm's cache
// inside it too, so nothing is written to the real home.
func (in *install) npmInstall(ctx context.Context, pkg, version string) error {
	if err := os.MkdirAll(in.dir, 0o755); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "npm", "install", "--prefix", in.dir, "--no-audit", "--no-fund",
		"--loglevel=error", pkg+"@"+version)
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(in.dir, ".npm-cache"), "npm_config_update_notifier=false")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("npm install %s@%s: %v: %s", pkg, version, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// packageDir is where pkg is installed.
func (in *install) packageDir(pkg string) string {
	return filepath.Join(in.dir, "node_modules", filepath.FromSlash(pkg))
}

// version is the installed version of pkg ("" when it is not there).
func (in *install) version(pkg string) string {
	b, err := os.ReadFile(filepath.Join(in.packageDir(pkg), "package.json"))
	if err != nil {
		return ""
	}
	var p struct {
		Version string `json:"version"`
	}
	_ = json.Unmarshal(b, &p)
	return p.Version
}

// bin is the path of an executable npm linked into the prefix.
func (in *install) bin(name string) string {
	return filepath.Join(in.dir, "node_modules", ".bin", name)
}

// codexBinary finds the native Codex executable of the platform package
// (the npm launcher, a Node script, execs it).
func (in *install) codexBinary() (string, error) {
	matches, _ := filepath.Glob(filepath.Join(in.dir, "node_modules", "@openai", "codex-*", "vendor", "*", "bin", "codex"))
	if len(matches) == 0 {
		matches, _ = filepath.Glob(filepath.Join(in.dir, "node_modules", "@openai", "codex", "vendor", "*", "bin", "codex"))
	}
	if len(matches) == 0 {
		return "", errors.New("no native codex binary in the package (platform package missing?)")
	}
	return matches[0], nil
}
