package control

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func newRootID(t *testing.T) string {
	t.Helper()
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func wantEndpointCode(t *testing.T, err error, code string) {
	t.Helper()
	var e *EndpointError
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("error = %v, want endpoint error %s", err, code)
	}
}

func TestEndpointPrefix(t *testing.T) {
	rootID := "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1eff"
	got, err := EndpointPrefix(rootID, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if want := "m-1000-AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHv8-"; got != want {
		t.Fatalf("prefix %s, want %s", got, want)
	}
	for _, bad := range []string{"", strings.Repeat("A", 64), strings.Repeat("a", 63), strings.Repeat("a", 65), strings.Repeat("g", 64)} {
		_, err := EndpointPrefix(bad, 1000)
		wantEndpointCode(t, err, CodeInsecureEndpointDirectory)
	}
	_, err = EndpointPrefix(rootID, -1)
	wantEndpointCode(t, err, CodeInsecureEndpointDirectory)
}

func TestPrepareEndpoint(t *testing.T) {
	rootID := newRootID(t)
	e, err := PrepareEndpoint(rootID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(e.Dir()) })
	prefix, err := EndpointPrefix(rootID, os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^/tmp/` + regexp.QuoteMeta(prefix) + `[A-Za-z0-9]{6}/h\.sock$`)
	if !re.MatchString(e.Path()) {
		t.Fatalf("endpoint path %s does not match %s", e.Path(), re)
	}
	if filepath.Dir(e.Path()) != e.Dir() {
		t.Fatalf("dir %s, path %s", e.Dir(), e.Path())
	}
	if want := 5 + len(prefix) + 6 + 7; len(e.Path()) != want {
		t.Fatalf("path length %d, want %d", len(e.Path()), want)
	}
	var st unix.Stat_t
	if err := unix.Lstat(e.Dir(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o777 != 0o700 || int(st.Uid) != os.Getuid() {
		t.Fatalf("endpoint dir mode %#o uid %d", st.Mode, st.Uid)
	}

	l, err := e.Listen()
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Lstat(e.Path(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Mode&0o777 != 0o600 || int(st.Uid) != os.Getuid() {
		t.Fatalf("socket mode %#o uid %d", st.Mode, st.Uid)
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			_, err = c.Write([]byte("x"))
			_ = c.Close()
		}
		accepted <- err
	}()
	c, err := net.Dial("unix", e.Path())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := c.Read(buf); err != nil || buf[0] != 'x' {
		t.Fatalf("read %q, %v", buf, err)
	}
	_ = c.Close()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(e.Path()); err != nil {
		t.Fatalf("closing the listener removed the socket: %v", err)
	}
	if err := e.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(e.Dir()); !os.IsNotExist(err) {
		t.Fatalf("endpoint dir survives cleanup: %v", err)
	}
	if err := e.Cleanup(); err != nil {
		t.Fatalf("second cleanup: %v", err)
	}
}

func TestPrepareEndpointCreatesDistinctDirectories(t *testing.T) {
	rootID := newRootID(t)
	// t.TempDir is too deep for the socket path limit
	base, err := os.MkdirTemp(EndpointRoot, "ep")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	seen := map[string]bool{}
	for i := 0; i < 20; i++ {
		e, err := prepareEndpointIn(base, rootID, os.Getuid())
		if err != nil {
			t.Fatal(err)
		}
		if seen[e.Dir()] {
			t.Fatalf("directory %s reused", e.Dir())
		}
		seen[e.Dir()] = true
		// the sweep of the next round removes this one
		entries, err := os.ReadDir(base)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 {
			t.Fatalf("round %d: %d endpoint directories, want 1", i, len(entries))
		}
	}
}

func TestStaleEndpointSweep(t *testing.T) {
	rootID := newRootID(t)
	uid := os.Getuid()
	prefix, err := EndpointPrefix(rootID, uid)
	if err != nil {
		t.Fatal(err)
	}
	otherPrefix, err := EndpointPrefix(rootID, uid+1)
	if err != nil {
		t.Fatal(err)
	}
	var created []string
	t.Cleanup(func() {
		for _, p := range created {
			_ = os.RemoveAll(p)
		}
	})
	mk := func(name string) string {
		p := filepath.Join(EndpointRoot, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		created = append(created, p)
		return p
	}
	stale := mk(prefix + "Ab12Cd")
	if err := os.WriteFile(filepath.Join(stale, SocketName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(stale, "nested"), 0o700); err != nil {
		t.Fatal(err)
	}
	stale2 := mk(prefix + "zzzzzz")
	tooLong := mk(prefix + "Ab12Cd7")
	tooShort := mk(prefix + "Ab12C")
	otherUser := mk(otherPrefix + "Ab12Cd")
	otherRootPrefix, err := EndpointPrefix(newRootID(t), uid)
	if err != nil {
		t.Fatal(err)
	}
	otherRoot := mk(otherRootPrefix + "Ab12Cd")

	target := t.TempDir()
	link := filepath.Join(EndpointRoot, prefix+"LiNk00")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	created = append(created, link)
	file := filepath.Join(EndpointRoot, prefix+"FiLe00")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	created = append(created, file)

	var foreign string
	if os.Geteuid() == 0 {
		foreign = mk(prefix + "FoReIg")
		if err := os.Chown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}

	e, err := PrepareEndpoint(rootID)
	if err != nil {
		t.Fatal(err)
	}
	created = append(created, e.Dir())

	for _, gone := range []string{stale, stale2} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("stale endpoint %s survives: %v", gone, err)
		}
	}
	kept := []string{tooLong, tooShort, otherUser, otherRoot, link, file, target, e.Dir()}
	if foreign != "" {
		kept = append(kept, foreign)
	}
	for _, p := range kept {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("symlink %s changed: %v", link, err)
	}
}

func TestEndpointPathTooLong(t *testing.T) {
	rootID := newRootID(t)
	prefix, err := endpointPrefix(rootID, strings.Repeat("9", 40))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(EndpointRoot, prefix+"Ab12Cd", SocketName)
	wantEndpointCode(t, checkEndpointPathLength(path), CodeEndpointPathTooLong)
	ok := "/" + strings.Repeat("x", MaxEndpointPathBytes-1)
	if err := checkEndpointPathLength(ok); err != nil {
		t.Fatalf("%d bytes rejected: %v", len(ok), err)
	}
	wantEndpointCode(t, checkEndpointPathLength(ok+"x"), CodeEndpointPathTooLong)
	// The length is counted in bytes, not characters.
	wantEndpointCode(t, checkEndpointPathLength("/"+strings.Repeat("é", 50)), CodeEndpointPathTooLong)

	// A base directory deep enough to exceed the limit fails and leaves
	// nothing behind.
	base := filepath.Join(t.TempDir(), strings.Repeat("d", 60))
	if err := os.Mkdir(base, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err = prepareEndpointIn(base, rootID, os.Getuid())
	wantEndpointCode(t, err, CodeEndpointPathTooLong)
	entries, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("failed preparation left %v", entries)
	}
}

func TestEndpointRejectsForeignOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a directory for another uid")
	}
	dir := filepath.Join(t.TempDir(), "ep")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	wantEndpointCode(t, securePrivateDir(dir, os.Getuid()), CodeInsecureEndpointDirectory)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	wantEndpointCode(t, checkPrivate(link, os.Getuid(), unix.S_IFDIR, "directory"), CodeInsecureEndpointDirectory)
	e := &Endpoint{dir: t.TempDir(), uid: os.Getuid()}
	e.path = filepath.Join(e.dir, SocketName)
	if err := os.WriteFile(e.path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantEndpointCode(t, e.prepareAfterListen(), CodeInsecureEndpointDirectory)
	e.uid = 65534
	if err := os.Remove(e.path); err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: e.path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wantEndpointCode(t, e.prepareAfterListen(), CodeInsecureEndpointDirectory)
	e.uid = os.Getuid()
	if err := e.prepareAfterListen(); err != nil {
		t.Fatal(err)
	}
}

func TestRandomSuffix(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9]{6}$`)
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		s := randomSuffix()
		if !re.MatchString(s) {
			t.Fatalf("suffix %q", s)
		}
		seen[s] = true
	}
	if len(seen) < 190 {
		t.Fatalf("only %d distinct suffixes of 200", len(seen))
	}
}
