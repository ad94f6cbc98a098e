package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Filesystem access sets of the policy.
const (
	accessRead     landlock.AccessFSSet = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir
	accessReadFile landlock.AccessFSSet = ll.AccessFSExecute | ll.AccessFSReadFile
	accessListDir  landlock.AccessFSSet = ll.AccessFSReadDir
	accessWrite    landlock.AccessFSSet = ll.AccessFSWriteFile | ll.AccessFSTruncate |
		ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeDir | ll.AccessFSMakeReg |
		ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeSym | ll.AccessFSRefer
	accessWriteFile landlock.AccessFSSet = ll.AccessFSWriteFile | ll.AccessFSTruncate
	accessDevice    landlock.AccessFSSet = ll.AccessFSReadFile | ll.AccessFSWriteFile |
		ll.AccessFSTruncate | ll.AccessFSIoctlDev
	// accessFileOnly are the rights a rule on a non-directory may hold.
	accessFileOnly landlock.AccessFSSet = ll.AccessFSExecute | ll.AccessFSWriteFile |
		ll.AccessFSReadFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
)

// devices are the device files every confined command may read, write
// and use ioctls on.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/ptmx"}

// devTTY is the controlling terminal, which a call's shell does not have
// (it starts a session of its own): opening it fails unless the command
// made a pseudo-terminal it opened its own. It is read and written only:
// no ioctl on it, whatever terminal it names, can push input (TIOCSTI).
const devTTY = "/dev/tty"

// abiConfigs are go-landlock's configurations by ABI version (index+1).
var abiConfigs = []landlock.Config{landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5,
	landlock.V6, landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11}

// Availability is what the kernel offers the sandbox.
type Availability struct {
	// Available is true when the kernel has Landlock and a ruleset could
	// be built: only then may a confined policy be asked for.
	Available bool
	// ABI is the Landlock ABI the sandbox uses (0: none).
	ABI int
	// Reason says why the sandbox is unavailable.
	Reason string
}

// Status reports, once per process, whether the kernel can confine calls.
func Status() Availability { return status() }

var status = sync.OnceValue(probe)

// kernelABI is the Landlock ABI to use: the kernel's, lowered to 5 where
// the kernel's signal scoping has a known defect (go-landlock does the
// same).
func kernelABI() (int, error) {
	v, err := ll.LandlockGetABIVersion()
	if err != nil {
		return 0, err
	}
	if v >= 6 {
		if errata, err := ll.LandlockGetErrata(); err != nil || errata&0x2 == 0 {
			v = 5
		}
	}
	return v, nil
}

func probe() Availability {
	abi, err := kernelABI()
	switch {
	case errors.Is(err, syscall.ENOSYS):
		return Availability{Reason: "kernel has no Landlock (ABI 0)"}
	case errors.Is(err, syscall.EOPNOTSUPP):
		return Availability{Reason: "Landlock is disabled in this kernel (not in the lsm= boot list)"}
	case err != nil:
		return Availability{Reason: fmt.Sprintf("cannot query Landlock: %v", err)}
	case abi < 1:
		return Availability{Reason: fmt.Sprintf("kernel has no Landlock (ABI %d)", abi)}
	}
	// Build (without enforcing) a ruleset like a call's.
	fd, _, err := landlockConfig(abi, Policy{Mode: ReadOnly}).NewRulesetFD(
		landlock.PathAccess(accessRead, "/"))
	if err != nil {
		return Availability{ABI: abi, Reason: fmt.Sprintf("cannot build a Landlock ruleset: %v", err)}
	}
	if fd < 0 {
		return Availability{ABI: abi, Reason: "Landlock restricts nothing on this kernel"}
	}
	unix.Close(fd)
	return Availability{Available: true, ABI: abi}
}

// landlockConfig is the ruleset configuration of p at abi: every
// filesystem right of that ABI, TCP (and, from ABI 10, UDP) and pathname
// Unix socket connections unless p.Network, and both IPC scopes.
func landlockConfig(abi int, p Policy) landlock.Config {
	cfg := abiConfigs[min(abi, len(abiConfigs))-1]
	if p.Network {
		cfg.HandledAccessNet = 0
		cfg.HandledAccessFS &^= ll.AccessFSResolveUnix
	}
	return cfg
}

// grant is one Landlock rule: access to the hierarchy under path.
type grant struct {
	path   string
	access landlock.AccessFSSet
}

// hiddenSet is the hidden paths of a policy, cleaned and with their
// symlinks resolved (both spellings are kept).
type hiddenSet []string

func newHiddenSet(paths []string) hiddenSet {
	var h hiddenSet
	for _, p := range paths {
		if p == "" || !filepath.IsAbs(p) {
			continue
		}
		p = filepath.Clean(p)
		h = append(h, p)
		if r := resolvePartial(p); r != p {
			h = append(h, r)
		}
	}
	return h
}

// resolvePartial resolves the symlinks of the longest existing prefix of p.
func resolvePartial(p string) string {
	rest := ""
	for q := p; ; q = filepath.Dir(q) {
		if r, err := filepath.EvalSymlinks(q); err == nil {
			return filepath.Join(r, rest)
		}
		if q == "/" || q == "." {
			return p
		}
		rest = filepath.Join(filepath.Base(q), rest)
	}
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// hides reports whether p is a hidden path or below one.
func (h hiddenSet) hides(p string) bool {
	for _, x := range h {
		if within(p, x) {
			return true
		}
	}
	return false
}

// above reports whether a hidden path lies strictly below p.
func (h hiddenSet) above(p string) bool {
	for _, x := range h {
		if x != p && within(x, p) {
			return true
		}
	}
	return false
}

// carve grants dirAccess on the hierarchy under root (fileAccess if root
// is not a directory) without granting anything on a hidden path. Landlock
// grants by hierarchy, so a directory with a hidden path below it gets
// ancestorAccess only, and its children are carved in turn; in such a
// directory, regular files get ancestorFileAccess and other
// non-directories nothing more. Symlinks are skipped: Landlock checks the
// object a path resolves to, which is carved where it lives.
func carve(root string, dirAccess, fileAccess, ancestorAccess, ancestorFileAccess landlock.AccessFSSet, h hiddenSet, out *[]grant) {
	var walk func(p string, fi os.FileInfo)
	walk = func(p string, fi os.FileInfo) {
		switch {
		case h.hides(p):
			return
		case fi.Mode()&os.ModeSymlink != 0:
			return
		case !fi.IsDir():
			*out = append(*out, grant{p, fileAccess})
			return
		case !h.above(p):
			*out = append(*out, grant{p, dirAccess})
			return
		}
		if ancestorAccess != 0 {
			*out = append(*out, grant{p, ancestorAccess})
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			// An unreadable ancestor: nothing below it is granted.
			return
		}
		for _, e := range entries {
			child := filepath.Join(p, e.Name())
			cfi, err := os.Lstat(child)
			if err != nil {
				continue
			}
			switch {
			case cfi.IsDir():
				walk(child, cfi)
			case cfi.Mode().IsRegular():
				if !h.hides(child) && ancestorFileAccess != 0 {
					*out = append(*out, grant{child, ancestorFileAccess})
				}
			case cfi.Mode()&os.ModeSymlink != 0:
			default:
				// Devices, sockets and fifos are read where reading is
				// granted, and written in such a directory never.
				if a := ancestorFileAccess &^ accessWriteFile; a != 0 && !h.hides(child) {
					*out = append(*out, grant{child, a})
				}
			}
		}
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return
	}
	walk(root, fi)
}

// grants are the rules of a confined policy.
func grants(p Policy) []grant {
	h := newHiddenSet(p.Hidden)
	var out []grant
	// Read: the whole system, the workspace with it.
	carve("/", accessRead, accessReadFile, accessListDir, accessReadFile, h, &out)
	if p.Mode == WorkspaceWrite {
		for _, dir := range []string{p.Workspace, p.TempDir, "/dev/shm"} {
			if dir == "" {
				continue
			}
			if r, err := filepath.EvalSymlinks(dir); err == nil {
				dir = r
			}
			carve(dir, accessWrite, accessWriteFile, 0, accessWriteFile, h, &out)
		}
	}
	for _, d := range devices {
		if !h.hides(d) {
			out = append(out, grant{d, accessDevice})
		}
	}
	if !h.hides(devTTY) {
		out = append(out, grant{devTTY, accessDevice &^ ll.AccessFSIoctlDev})
	}
	if !h.hides("/dev/pts") {
		out = append(out, grant{"/dev/pts", accessDevice | ll.AccessFSReadDir})
	}
	return out
}

// rules turns grants into go-landlock rules for cfg: each grant keeps the
// rights cfg handles (and, on a non-directory, the rights a file rule may
// hold); paths that vanished since the walk are skipped.
func rules(cfg landlock.Config, gs []grant) []landlock.Rule {
	var out []landlock.Rule
	for _, g := range gs {
		a := g.access & cfg.HandledAccessFS
		if fi, err := os.Stat(g.path); err != nil {
			continue
		} else if !fi.IsDir() {
			a &= accessFileOnly
		}
		if a == 0 {
			continue
		}
		out = append(out, landlock.PathAccess(a, g.path).IgnoreIfMissing())
	}
	return out
}

// confineThread restricts the calling OS thread (locked by the caller,
// which execs next) to p with the kernel's Landlock ABI. It fails, and
// the command does not run, when the kernel cannot enforce it.
func confineThread(p Policy) error {
	st := Status()
	if !st.Available {
		return fmt.Errorf("sandbox unavailable: %s", st.Reason)
	}
	cfg := landlockConfig(st.ABI, p)
	fd, flags, err := cfg.NewRulesetFD(rules(cfg, grants(p))...)
	if err != nil {
		return fmt.Errorf("landlock ruleset: %w", err)
	}
	if fd < 0 {
		return errors.New("landlock ruleset: nothing to enforce")
	}
	defer unix.Close(fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return nil
}
