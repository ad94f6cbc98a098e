package storageroot

import (
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// LockFile is the owner lock's name inside a per-root control directory.
const LockFile = "owner.lock"

// ControlNamespace returns the directory that holds one control directory
// per root id. It lives under the home directory of the current user's
// account (from the user database, not $HOME).
func ControlNamespace() (string, error) {
	u, err := user.LookupId(strconv.Itoa(os.Getuid()))
	if err != nil {
		return "", &Error{Code: CodeControlIOFailed, Err: err}
	}
	home := u.HomeDir
	if !filepath.IsAbs(home) {
		return "", newError(CodeControlIOFailed, "home directory %q of uid %s is not absolute", home, u.Uid)
	}
	switch runtime.GOOS {
	case "darwin":
		return filepath.Join(home, "Library", "Caches", "Maka", "runtime-hosts"), nil
	case "windows":
		return filepath.Join(home, "AppData", "Local", "Maka", "runtime-hosts"), nil
	default:
		return filepath.Join(home, ".cache", "maka", "runtime-hosts"), nil
	}
}

// PrepareControlDirectory re-validates the capability and creates (or
// re-secures) its private control directory <namespace>/<rootId>, returning
// its path.
func PrepareControlDirectory(c *Capability) (controlDir string, err error) {
	if err := requireCapability(c, ""); err != nil {
		return "", err
	}
	return prepareControlDirectory(c)
}

func prepareControlDirectory(c *Capability) (string, error) {
	if err := assertRoot(c); err != nil {
		return "", err
	}
	ns, err := ControlNamespace()
	if err != nil {
		return "", err
	}
	if err := ensurePrivateDirectory(ns); err != nil {
		return "", wrap(CodeControlIOFailed, err)
	}
	dir := filepath.Join(ns, c.rootID)
	if err := ensurePrivateDirectory(dir); err != nil {
		return "", wrap(CodeControlIOFailed, err)
	}
	return dir, nil
}

// ensurePrivateDirectory creates path if needed and requires it to be a
// real directory owned by the effective uid with mode 0700.
func ensurePrivateDirectory(path string) error {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := lstat(path, &st); err != nil {
		return err
	}
	if !isDir(&st) {
		return newError(CodeInsecureControlDirectory, "%s is not a directory", path)
	}
	if int(st.Uid) != os.Geteuid() {
		return newError(CodeInsecureControlDirectory, "%s is owned by uid %d, not %d", path, st.Uid, os.Geteuid())
	}
	if err := os.Chmod(path, 0o700); err != nil {
		return err
	}
	if err := lstat(path, &st); err != nil {
		return err
	}
	if !isDir(&st) || st.Mode&0o077 != 0 {
		return newError(CodeInsecureControlDirectory, "%s is not private (mode %#o)", path, st.Mode&0o777)
	}
	return nil
}
