package storageroot

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestResolveCreatesMarker(t *testing.T) {
	base := t.TempDir()
	path := filepath.Join(base, "a", "b", "root")
	c, err := Resolve(path, KindInteractive)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind() != KindInteractive || c.Path() != path {
		t.Fatalf("capability = %s %s, want interactive %s", c.Kind(), c.Path(), path)
	}
	if !regexp.MustCompile(`^[a-f0-9]{64}$`).MatchString(c.RootID()) {
		t.Fatalf("root id %q", c.RootID())
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		t.Fatalf("created root mode %v, want no group/other bits", fi.Mode())
	}
	dev, ino := dirIdentity(t, path)
	want := fmt.Sprintf(`{"schemaVersion":1,"kind":"interactive","rootId":"%s","rootIdentity":{"dev":"%d","ino":"%d"}}`+"\n", c.RootID(), dev, ino)
	if got := string(readFile(t, filepath.Join(path, MarkerFile))); got != want {
		t.Fatalf("marker = %q, want %q", got, want)
	}
	mfi, err := os.Lstat(filepath.Join(path, MarkerFile))
	if err != nil {
		t.Fatal(err)
	}
	if mfi.Mode().Perm()&0o077 != 0 {
		t.Fatalf("marker mode %v", mfi.Mode())
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != MarkerFile {
		t.Fatalf("root holds %v, want only the marker", entries)
	}

	again, err := Resolve(path, KindInteractive)
	if err != nil {
		t.Fatal(err)
	}
	if again.RootID() != c.RootID() {
		t.Fatalf("second resolve id %s, want %s", again.RootID(), c.RootID())
	}
	d, err := Discover(path)
	if err != nil {
		t.Fatal(err)
	}
	if d.RootID() != c.RootID() || d.Kind() != KindInteractive {
		t.Fatalf("discover = %s %s", d.RootID(), d.Kind())
	}
	e, err := ResolveExisting(path, KindInteractive, c.RootID())
	if err != nil {
		t.Fatal(err)
	}
	if e.RootID() != c.RootID() {
		t.Fatal("resolve existing returned another id")
	}
}

func TestResolveExistingDirectoryKeepsMode(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(dir, KindHeadless); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Fatalf("existing root mode changed to %v", fi.Mode().Perm())
	}
}

func TestSymlinkAliasesResolveToOneRoot(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	alias := filepath.Join(base, "alias")
	if err := os.Symlink("real", alias); err != nil {
		t.Fatal(err)
	}
	alias2 := filepath.Join(base, "alias2")
	if err := os.Symlink(alias+"/", alias2); err != nil {
		t.Fatal(err)
	}
	a, err := Resolve(alias, KindInteractive)
	if err != nil {
		t.Fatal(err)
	}
	canonical, err := filepath.EvalSymlinks(real)
	if err != nil {
		t.Fatal(err)
	}
	if a.Path() != canonical {
		t.Fatalf("path %s, want %s", a.Path(), canonical)
	}
	for _, p := range []string{real, alias2, alias + "/", filepath.Join(base, "real", ".", "..", "alias")} {
		b, err := Resolve(p, KindInteractive)
		if err != nil {
			t.Fatal(err)
		}
		if b.RootID() != a.RootID() || b.Path() != a.Path() {
			t.Fatalf("%s resolved to %s %s, want %s %s", p, b.RootID(), b.Path(), a.RootID(), a.Path())
		}
		d, err := Discover(p)
		if err != nil {
			t.Fatal(err)
		}
		if d.RootID() != a.RootID() {
			t.Fatalf("discover %s gave %s", p, d.RootID())
		}
	}
}

func TestInvalidRootKind(t *testing.T) {
	base := t.TempDir()
	path := filepath.Join(base, "root")
	_, err := Resolve(path, "bogus")
	wantCode(t, err, CodeInvalidRootKind)
	_, err = Resolve(path, "")
	wantCode(t, err, CodeInvalidRootKind)
	_, err = ResolveExisting(path, "Interactive", strings.Repeat("a", 64))
	wantCode(t, err, CodeInvalidRootKind)
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("invalid kind created the root: %v", err)
	}
}

func TestInvalidRoot(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	writeFile(t, file, []byte("x"))
	link := filepath.Join(base, "link")
	if err := os.Symlink("file", link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, link} {
		_, err := Resolve(p, KindInteractive)
		wantCode(t, err, CodeInvalidRoot)
		_, err = Discover(p)
		wantCode(t, err, CodeInvalidRoot)
		_, err = ResolveExisting(p, KindInteractive, strings.Repeat("a", 64))
		wantCode(t, err, CodeInvalidRoot)
	}
}

func TestResolveUnderFileFailsAsIO(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	writeFile(t, file, []byte("x"))
	_, err := Resolve(filepath.Join(file, "root"), KindInteractive)
	wantCode(t, err, CodeRootIOFailed)
	if !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("cause not attached: %v", err)
	}
}

func TestRootNotFound(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	writeFile(t, file, []byte("x"))
	dangling := filepath.Join(base, "dangling")
	if err := os.Symlink("nowhere", dangling); err != nil {
		t.Fatal(err)
	}
	id := strings.Repeat("a", 64)
	for _, p := range []string{filepath.Join(base, "missing"), filepath.Join(file, "sub"), dangling} {
		_, err := Discover(p)
		wantCode(t, err, CodeRootNotFound)
		_, err = ResolveExisting(p, KindHeadless, id)
		wantCode(t, err, CodeRootNotFound)
	}
}

func TestRootUnmarked(t *testing.T) {
	dir := t.TempDir()
	_, err := Discover(dir)
	wantCode(t, err, CodeRootUnmarked)
	_, err = ResolveExisting(dir, KindInteractive, strings.Repeat("a", 64))
	wantCode(t, err, CodeRootUnmarked)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("read-only operations wrote %v", entries)
	}
}

// markerFields builds marker JSON for dir with some fields overridden.
func markerJSON(t *testing.T, dir string, override map[string]string) []byte {
	t.Helper()
	dev, ino := dirIdentity(t, dir)
	fields := map[string]string{
		"schemaVersion": "1",
		"kind":          `"interactive"`,
		"rootId":        `"` + strings.Repeat("ab", 32) + `"`,
		"dev":           fmt.Sprintf(`"%d"`, dev),
		"ino":           fmt.Sprintf(`"%d"`, ino),
	}
	for k, v := range override {
		fields[k] = v
	}
	s := `{`
	for _, k := range []string{"schemaVersion", "kind", "rootId"} {
		if v := fields[k]; v != "-" {
			s += `"` + k + `":` + v + `,`
		}
	}
	identity := fields["rootIdentity"]
	if identity == "" {
		identity = `{`
		sep := ""
		for _, k := range []string{"dev", "ino"} {
			if v := fields[k]; v != "-" {
				identity += sep + `"` + k + `":` + v
				sep = ","
			}
		}
		identity += `}`
	}
	if identity != "-" {
		s += `"rootIdentity":` + identity
	}
	s = strings.TrimSuffix(s, ",") + "}\n"
	return []byte(s)
}

func TestMarkerExtraKeysTolerated(t *testing.T) {
	dir := t.TempDir()
	m := markerJSON(t, dir, nil)
	m = []byte(strings.Replace(string(m), `{"schemaVersion"`, `{"extra":[1,{"x":null}],"schemaVersion"`, 1))
	m = []byte(strings.Replace(string(m), `"rootIdentity":{`, `"rootIdentity":{"note":"copied",`, 1))
	writeFile(t, filepath.Join(dir, MarkerFile), m)
	c, err := Discover(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.RootID() != strings.Repeat("ab", 32) || c.Kind() != KindInteractive {
		t.Fatalf("discover = %s %s", c.RootID(), c.Kind())
	}
	if _, err := Resolve(dir, KindInteractive); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, MarkerFile)); string(got) != string(m) {
		t.Fatal("resolve rewrote an existing marker")
	}
	// 1.0 is the number 1
	writeFile(t, filepath.Join(dir, MarkerFile), markerJSON(t, dir, map[string]string{"schemaVersion": "1.0"}))
	if _, err := Discover(dir); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidMarker(t *testing.T) {
	cases := map[string]map[string]string{
		"schema version 2":        {"schemaVersion": "2"},
		"schema version string":   {"schemaVersion": `"1"`},
		"schema version missing":  {"schemaVersion": "-"},
		"kind unknown":            {"kind": `"batch"`},
		"kind missing":            {"kind": "-"},
		"root id upper case":      {"rootId": `"` + strings.Repeat("AB", 32) + `"`},
		"root id short":           {"rootId": `"` + strings.Repeat("a", 63) + `"`},
		"root id number":          {"rootId": "1"},
		"root id missing":         {"rootId": "-"},
		"identity null":           {"rootIdentity": "null"},
		"identity array":          {"rootIdentity": `["1","2"]`},
		"identity missing":        {"rootIdentity": "-"},
		"dev not decimal":         {"dev": `"0x10"`},
		"dev negative":            {"dev": `"-1"`},
		"dev empty":               {"dev": `""`},
		"ino number":              {"ino": "12"},
		"ino missing":             {"ino": "-"},
		"ino non-ascii digit":     {"ino": `"١٢"`},
		"dev with trailing space": {"dev": `"1 "`},
	}
	for name, override := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, MarkerFile), markerJSON(t, dir, override))
			_, err := Discover(dir)
			wantCode(t, err, CodeInvalidMarker)
			_, err = Resolve(dir, KindInteractive)
			wantCode(t, err, CodeInvalidMarker)
		})
	}
	raw := map[string]string{
		"not json":        "{",
		"empty":           "",
		"array":           "[]",
		"null":            "null",
		"trailing data":   `{} {}`,
		"invalid utf-8":   "{\"x\":\"\xff\"}",
		"byte order mark": "\ufeff{}",
	}
	for name, content := range raw {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, MarkerFile), []byte(content))
			_, err := Discover(dir)
			wantCode(t, err, CodeInvalidMarker)
		})
	}
}

func TestInvalidMarkerFileShapes(t *testing.T) {
	t.Run("oversize", func(t *testing.T) {
		dir := t.TempDir()
		m := markerJSON(t, dir, nil)
		pad := strings.Repeat(" ", MaxMarkerBytes-len(m))
		writeFile(t, filepath.Join(dir, MarkerFile), append(m, pad...))
		if _, err := Discover(dir); err != nil {
			t.Fatalf("marker of exactly %d bytes: %v", MaxMarkerBytes, err)
		}
		writeFile(t, filepath.Join(dir, MarkerFile), append(m, pad+" "...))
		_, err := Discover(dir)
		wantCode(t, err, CodeInvalidMarker)
		_, err = Resolve(dir, KindInteractive)
		wantCode(t, err, CodeInvalidMarker)
	})
	t.Run("fifo", func(t *testing.T) {
		dir := t.TempDir()
		if err := unix.Mkfifo(filepath.Join(dir, MarkerFile), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Discover(dir)
		wantCode(t, err, CodeInvalidMarker)
		_, err = Resolve(dir, KindInteractive)
		wantCode(t, err, CodeInvalidMarker)
	})
	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		target := filepath.Join(dir, "target.json")
		writeFile(t, target, markerJSON(t, dir, nil))
		if err := os.Symlink("target.json", filepath.Join(dir, MarkerFile)); err != nil {
			t.Fatal(err)
		}
		_, err := Discover(dir)
		wantCode(t, err, CodeInvalidMarker)
		_, err = Resolve(dir, KindInteractive)
		wantCode(t, err, CodeInvalidMarker)
	})
	t.Run("dangling symlink", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Symlink("nowhere", filepath.Join(dir, MarkerFile)); err != nil {
			t.Fatal(err)
		}
		_, err := Resolve(dir, KindInteractive)
		wantCode(t, err, CodeInvalidMarker)
		if _, err := os.Lstat(filepath.Join(dir, "nowhere")); !os.IsNotExist(err) {
			t.Fatal("resolve wrote through a dangling symlink")
		}
	})
	t.Run("directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, MarkerFile), 0o700); err != nil {
			t.Fatal(err)
		}
		_, err := Discover(dir)
		wantCode(t, err, CodeInvalidMarker)
	})
	t.Run("socket", func(t *testing.T) {
		dir := t.TempDir()
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: filepath.Join(dir, MarkerFile)}); err != nil {
			t.Skipf("cannot bind a socket in %s: %v", dir, err)
		}
		_, err = Discover(dir)
		wantCode(t, err, CodeInvalidMarker)
	})
}

func TestKindMismatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	c, err := Resolve(dir, KindInteractive)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Resolve(dir, KindHeadless)
	wantCode(t, err, CodeRootKindMismatch)
	_, err = ResolveExisting(dir, KindHeadless, c.RootID())
	wantCode(t, err, CodeRootKindMismatch)
	d, err := Discover(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind() != KindInteractive {
		t.Fatalf("discovered kind %s", d.Kind())
	}
}

// copyRoot creates a new directory holding a byte copy of src's marker.
func copyRoot(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dst, MarkerFile), readFile(t, filepath.Join(src, MarkerFile)))
	return dst
}

func TestCopiedRootIsRejected(t *testing.T) {
	src := filepath.Join(t.TempDir(), "root")
	c, err := Resolve(src, KindInteractive)
	if err != nil {
		t.Fatal(err)
	}
	dst := copyRoot(t, src)
	_, err = Resolve(dst, KindInteractive)
	wantCode(t, err, CodeRootIdentityCollision)
	_, err = Discover(dst)
	wantCode(t, err, CodeRootIdentityCollision)
	_, err = ResolveExisting(dst, KindInteractive, c.RootID())
	wantCode(t, err, CodeRootIdentityChanged)
	if _, err := Discover(src); err != nil {
		t.Fatalf("the original root must stay valid: %v", err)
	}
}

func TestResolveExistingRequiresRootID(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	c, err := Resolve(dir, KindHeadless)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ResolveExisting(dir, KindHeadless, strings.Repeat("0", 64))
	wantCode(t, err, CodeRootIdentityChanged)
	_, err = ResolveExisting(dir, KindHeadless, "")
	wantCode(t, err, CodeRootIdentityChanged)
	if _, err := ResolveExisting(dir, KindHeadless, c.RootID()); err != nil {
		t.Fatal(err)
	}
}

func TestReplacedRootDirectory(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "root")
	c, err := Resolve(dir, KindHeadless)
	if err != nil {
		t.Fatal(err)
	}
	if err := assertRoot(c); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, filepath.Join(base, "moved")); err != nil {
		t.Fatal(err)
	}
	wantCode(t, assertRoot(c), CodeRootIdentityChanged)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err = ResolveExisting(dir, KindHeadless, c.RootID())
	wantCode(t, err, CodeRootUnmarked)
	wantCode(t, assertRoot(c), CodeRootIdentityChanged)
	writeFile(t, filepath.Join(dir, MarkerFile), readFile(t, filepath.Join(base, "moved", MarkerFile)))
	_, err = ResolveExisting(dir, KindHeadless, c.RootID())
	wantCode(t, err, CodeRootIdentityChanged)
	wantCode(t, assertRoot(c), CodeRootIdentityChanged)
}

func TestAssertRootDetectsMarkerChanges(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	c, err := Resolve(dir, KindHeadless)
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, MarkerFile)
	original := readFile(t, marker)
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	wantCode(t, assertRoot(c), CodeRootUnmarked)
	writeFile(t, marker, []byte(strings.Replace(string(original), c.RootID(), strings.Repeat("0", 64), 1)))
	wantCode(t, assertRoot(c), CodeRootIdentityChanged)
	writeFile(t, marker, []byte(strings.Replace(string(original), "headless", "interactive", 1)))
	wantCode(t, assertRoot(c), CodeRootKindMismatch)
	writeFile(t, marker, original)
	if err := assertRoot(c); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentResolveAgreesOnRootID(t *testing.T) {
	for round := 0; round < 3; round++ {
		path := filepath.Join(t.TempDir(), "fresh", "root")
		const n = 8
		start := make(chan struct{})
		ids := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				c, err := Resolve(path, KindInteractive)
				if err == nil {
					ids[i] = c.RootID()
				}
				errs[i] = err
			}()
		}
		close(start)
		wg.Wait()
		for i := 0; i < n; i++ {
			if errs[i] != nil {
				t.Fatalf("resolver %d: %v", i, errs[i])
			}
			if ids[i] != ids[0] {
				t.Fatalf("resolvers disagree: %s vs %s", ids[i], ids[0])
			}
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 {
			t.Fatalf("root holds %v after concurrent creation", entries)
		}
	}
}

func TestConcurrentKindRace(t *testing.T) {
	for round := 0; round < 5; round++ {
		path := filepath.Join(t.TempDir(), "root")
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(map[Kind]error)
		var mu sync.Mutex
		for _, k := range []Kind{KindInteractive, KindHeadless} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := Resolve(path, k)
				mu.Lock()
				errs[k] = err
				mu.Unlock()
			}()
		}
		close(start)
		wg.Wait()
		d, err := Discover(path)
		if err != nil {
			t.Fatal(err)
		}
		winner, loser := d.Kind(), KindHeadless
		if winner == KindHeadless {
			loser = KindInteractive
		}
		if errs[winner] != nil {
			t.Fatalf("winner %s failed: %v", winner, errs[winner])
		}
		wantCode(t, errs[loser], CodeRootKindMismatch)
	}
}

func TestPublishMarker(t *testing.T) {
	dir := t.TempDir()
	_, err := publishMarker(dir, make([]byte, MaxMarkerBytes+1), nil)
	wantCode(t, err, CodeInvalidMarker)
	published, err := publishMarker(dir, []byte("first\n"), nil)
	if err != nil || !published {
		t.Fatalf("first publish: %v %v", published, err)
	}
	published, err = publishMarker(dir, []byte("second\n"), nil)
	if err != nil || published {
		t.Fatalf("create over an existing marker: %v %v", published, err)
	}
	if got := string(readFile(t, filepath.Join(dir, MarkerFile))); got != "first\n" {
		t.Fatalf("marker %q", got)
	}
	refused := fmt.Errorf("refused")
	fresh := t.TempDir()
	if _, err := publishMarker(fresh, []byte("third\n"), func() error { return refused }); err != refused {
		t.Fatalf("pre-publish error = %v", err)
	}
	if entries, err := os.ReadDir(fresh); err != nil || len(entries) != 0 {
		t.Fatalf("a refused publish left %v (%v)", entries, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("publishing left %v", entries)
	}
}
