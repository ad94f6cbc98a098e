package storageroot

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func mustOwner(t *testing.T, c *Capability) *Owner {
	t.Helper()
	o, err := TryAcquireOwner(c)
	if err != nil {
		t.Fatal(err)
	}
	if o == nil {
		t.Fatal("owner lock not granted")
	}
	t.Cleanup(func() { _ = o.Close() })
	return o
}

// mustShared takes a shared lock of c's owner.lock and returns its release
// (which the test's cleanup calls too).
func mustShared(t *testing.T, c *Capability) (release func()) {
	t.Helper()
	release, err := trySharedLock(c)
	if err != nil {
		t.Fatal(err)
	}
	if release == nil {
		t.Fatal("shared lock not granted")
	}
	t.Cleanup(release)
	return release
}

func wantOwnerContended(t *testing.T, c *Capability) {
	t.Helper()
	o, err := TryAcquireOwner(c)
	if err != nil {
		t.Fatal(err)
	}
	if o != nil {
		_ = o.Close()
		t.Fatal("owner lock granted while contended")
	}
}

func wantSharedContended(t *testing.T, c *Capability) {
	t.Helper()
	release, err := trySharedLock(c)
	if err != nil {
		t.Fatal(err)
	}
	if release != nil {
		release()
		t.Fatal("shared lock granted while contended")
	}
}

func TestControlNamespaceUsesAccountHome(t *testing.T) {
	before, err := ControlNamespace()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	after, err := ControlNamespace()
	if err != nil {
		t.Fatal(err)
	}
	if before != after {
		t.Fatalf("namespace moved with HOME: %s -> %s", before, after)
	}
	if runtime.GOOS == "linux" && !strings.HasSuffix(after, "/.cache/maka/runtime-hosts") {
		t.Fatalf("namespace %s", after)
	}
	if !filepath.IsAbs(after) {
		t.Fatalf("namespace %s is not absolute", after)
	}
}

func TestPrepareControlDirectory(t *testing.T) {
	c := resolveInteractive(t)
	ns, err := ControlNamespace()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(ns, c.RootID())
	if err := os.MkdirAll(want, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(want, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := PrepareControlDirectory(c)
	if err != nil {
		t.Fatal(err)
	}
	if dir != want {
		t.Fatalf("control directory %s, want %s", dir, want)
	}
	for _, p := range []string{ns, dir} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s mode %v, want drwx------", p, fi.Mode())
		}
	}
	headless, err := Resolve(filepath.Join(t.TempDir(), "h"), KindHeadless)
	if err != nil {
		t.Fatal(err)
	}
	cleanupControl(t, headless.RootID())
	if _, err := PrepareControlDirectory(headless); err != nil {
		t.Fatalf("headless roots have control directories too: %v", err)
	}
}

func TestPrepareControlDirectoryInsecure(t *testing.T) {
	ns, err := ControlNamespace()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("foreign owner", func(t *testing.T) {
		requireRoot(t)
		c := resolveInteractive(t)
		dir := filepath.Join(ns, c.RootID())
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, err := PrepareControlDirectory(c)
		wantCode(t, err, CodeInsecureControlDirectory)
		_, err = TryAcquireOwner(c)
		wantCode(t, err, CodeInsecureControlDirectory)
	})
	t.Run("symlink", func(t *testing.T) {
		c := resolveInteractive(t)
		if err := os.MkdirAll(ns, 0o700); err != nil {
			t.Fatal(err)
		}
		target := t.TempDir()
		if err := os.Symlink(target, filepath.Join(ns, c.RootID())); err != nil {
			t.Fatal(err)
		}
		_, err := PrepareControlDirectory(c)
		wantCode(t, err, CodeInsecureControlDirectory)
	})
	t.Run("regular file", func(t *testing.T) {
		c := resolveInteractive(t)
		if err := os.MkdirAll(ns, 0o700); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(ns, c.RootID()), nil)
		_, err := PrepareControlDirectory(c)
		wantCode(t, err, CodeControlIOFailed)
		_, err = TryAcquireOwner(c)
		wantCode(t, err, CodeControlIOFailed)
	})
}

func TestPrepareControlDirectoryRevalidatesRoot(t *testing.T) {
	c := resolveInteractive(t)
	if err := os.Rename(c.Path(), c.Path()+".moved"); err != nil {
		t.Fatal(err)
	}
	_, err := PrepareControlDirectory(c)
	wantCode(t, err, CodeRootIdentityChanged)
	_, err = TryAcquireOwner(c)
	wantCode(t, err, CodeRootIdentityChanged)
}

func TestCapabilityAuthenticity(t *testing.T) {
	c := resolveInteractive(t)
	copied := *c
	for name, forged := range map[string]*Capability{"nil": nil, "zero": {}, "copy": &copied} {
		t.Run(name, func(t *testing.T) {
			_, err := TryAcquireOwner(forged)
			wantCode(t, err, CodeInvalidCapability)
			_, err = PrepareControlDirectory(forged)
			wantCode(t, err, CodeInvalidCapability)
		})
	}
	headless, err := Resolve(filepath.Join(t.TempDir(), "h"), KindHeadless)
	if err != nil {
		t.Fatal(err)
	}
	_, err = TryAcquireOwner(headless)
	wantCode(t, err, CodeInvalidCapability)
}

func TestOwnerLockInProcess(t *testing.T) {
	c := resolveInteractive(t)
	o := mustOwner(t, c)
	if o.Capability() != c {
		t.Fatal("owner capability differs")
	}
	ns, _ := ControlNamespace()
	if o.ControlDirectory() != filepath.Join(ns, c.RootID()) || o.LockPath() != filepath.Join(o.ControlDirectory(), LockFile) {
		t.Fatalf("paths %s %s", o.ControlDirectory(), o.LockPath())
	}
	fi, err := os.Lstat(o.LockPath())
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Size() != 0 {
		t.Fatalf("lock file %v size %d", fi.Mode(), fi.Size())
	}
	if err := o.Assert(); err != nil {
		t.Fatal(err)
	}
	// A second capability for the same root conflicts too.
	c2, err := Resolve(c.Path(), KindInteractive)
	if err != nil {
		t.Fatal(err)
	}
	wantOwnerContended(t, c2)
	wantSharedContended(t, c2)
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if !o.Closed() {
		t.Fatal("owner not closed")
	}
	wantCode(t, o.Assert(), CodeInvalidLease)
	release1 := mustShared(t, c)
	release2 := mustShared(t, c2)
	wantOwnerContended(t, c)
	release1()
	wantOwnerContended(t, c)
	release2()
	o2 := mustOwner(t, c)
	if err := o2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(o.LockPath()); err != nil {
		t.Fatalf("lock file must stay: %v", err)
	}
}

func TestOwnerAuthenticity(t *testing.T) {
	var nilOwner *Owner
	wantCode(t, nilOwner.Assert(), CodeInvalidOwner)
	wantCode(t, (&Owner{}).Assert(), CodeInvalidOwner)
	wantCode(t, (&Owner{}).Close(), CodeInvalidOwner)
	wantCode(t, (&Owner{}).RunWithLease(func(string) error { return nil }), CodeInvalidOwner)
}

func TestLockArtifactErrors(t *testing.T) {
	ns, err := ControlNamespace()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("directory", func(t *testing.T) {
		c := resolveInteractive(t)
		if err := os.MkdirAll(filepath.Join(ns, c.RootID(), LockFile), 0o700); err != nil {
			t.Fatal(err)
		}
		_, err := TryAcquireOwner(c)
		wantCode(t, err, CodeLockFailed)
	})
	t.Run("symlink", func(t *testing.T) {
		c := resolveInteractive(t)
		dir := filepath.Join(ns, c.RootID())
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(t.TempDir(), "elsewhere.lock")
		writeFile(t, target, nil)
		if err := os.Symlink(target, filepath.Join(dir, LockFile)); err != nil {
			t.Fatal(err)
		}
		_, err := TryAcquireOwner(c)
		wantCode(t, err, CodeInvalidLockArtifact)
	})
	t.Run("hard link is the same file", func(t *testing.T) {
		c := resolveInteractive(t)
		o := mustOwner(t, c)
		if err := o.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(o.LockPath(), o.LockPath()+".alias"); err != nil {
			t.Fatal(err)
		}
		mustOwner(t, c)
	})
}

func TestOwnerAssertDetectsChanges(t *testing.T) {
	t.Run("lock replaced", func(t *testing.T) {
		c := resolveInteractive(t)
		o := mustOwner(t, c)
		if err := o.Assert(); err != nil {
			t.Fatal(err)
		}
		replacement := o.LockPath() + ".new"
		writeFile(t, replacement, nil)
		if err := os.Rename(replacement, o.LockPath()); err != nil {
			t.Fatal(err)
		}
		wantCode(t, o.Assert(), CodeInvalidLockArtifact)
	})
	t.Run("lock removed", func(t *testing.T) {
		c := resolveInteractive(t)
		o := mustOwner(t, c)
		if err := o.Assert(); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(o.LockPath()); err != nil {
			t.Fatal(err)
		}
		wantCode(t, o.Assert(), CodeInvalidLockArtifact)
	})
	t.Run("root moved", func(t *testing.T) {
		c := resolveInteractive(t)
		o := mustOwner(t, c)
		if err := o.Assert(); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(c.Path(), c.Path()+".moved"); err != nil {
			t.Fatal(err)
		}
		wantCode(t, o.Assert(), CodeRootIdentityChanged)
		if err := os.Mkdir(c.Path(), 0o700); err != nil {
			t.Fatal(err)
		}
		wantCode(t, o.Assert(), CodeRootIdentityChanged)
		wantCode(t, o.RunWithLease(func(string) error { return nil }), CodeRootIdentityChanged)
	})
	t.Run("marker removed", func(t *testing.T) {
		c := resolveInteractive(t)
		o := mustOwner(t, c)
		if err := o.Assert(); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(c.Path(), MarkerFile)); err != nil {
			t.Fatal(err)
		}
		wantCode(t, o.Assert(), CodeRootUnmarked)
	})
	t.Run("marker rewritten with another id", func(t *testing.T) {
		c := resolveInteractive(t)
		o := mustOwner(t, c)
		if err := o.Assert(); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(c.Path(), MarkerFile)
		writeFile(t, p, []byte(strings.Replace(string(readFile(t, p)), c.RootID(), strings.Repeat("1", 64), 1)))
		wantCode(t, o.Assert(), CodeRootIdentityChanged)
	})
	t.Run("marker rewritten with another kind", func(t *testing.T) {
		c := resolveInteractive(t)
		o := mustOwner(t, c)
		if err := o.Assert(); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(c.Path(), MarkerFile)
		original := readFile(t, p)
		writeFile(t, p, []byte(strings.Replace(string(original), "interactive", "headless", 1)))
		wantCode(t, o.Assert(), CodeRootKindMismatch)
		writeFile(t, p, original)
		if err := o.Assert(); err != nil {
			t.Fatal(err)
		}
		writeFile(t, p, original[:len(original)-3])
		wantCode(t, o.Assert(), CodeInvalidMarker)
	})
}

func TestRunWithLeaseAndClose(t *testing.T) {
	c := resolveInteractive(t)
	o := mustOwner(t, c)
	var got string
	if err := o.RunWithLease(func(root string) error { got = root; return nil }); err != nil {
		t.Fatal(err)
	}
	if got != c.Path() {
		t.Fatalf("lease root %s, want %s", got, c.Path())
	}
	opErr := errors.New("op failed")
	if err := o.RunWithLease(func(string) error { return opErr }); !errors.Is(err, opErr) {
		t.Fatalf("op error = %v", err)
	}

	entered := make(chan struct{})
	release := make(chan struct{})
	leaseDone := make(chan error, 1)
	go func() {
		leaseDone <- o.RunWithLease(func(string) error {
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered
	closeDone := make(chan error, 2)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			closeDone <- o.Close()
		}()
	}
	for !o.Closed() {
		runtime.Gosched()
	}
	wantCode(t, o.RunWithLease(func(string) error { return nil }), CodeInvalidLease)
	wantCode(t, o.Assert(), CodeInvalidLease)
	// The lock is held until the in-flight lease drains.
	wantOwnerContended(t, c)
	select {
	case err := <-closeDone:
		t.Fatalf("close returned (%v) with a lease in flight", err)
	default:
	}
	close(release)
	if err := <-leaseDone; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i := 0; i < 2; i++ {
		if err := <-closeDone; err != nil {
			t.Fatal(err)
		}
	}
	mustOwner(t, c)
}

func TestLockArbitrationAcrossProcesses(t *testing.T) {
	t.Run("writer excludes writers and shared holders", func(t *testing.T) {
		c := resolveInteractive(t)
		owner := startHolder(t, c.Path(), "owner")
		if owner.result != "granted" {
			t.Fatalf("first owner: %s", owner.result)
		}
		if r := startHolder(t, c.Path(), "owner").result; r != "contended" {
			t.Fatalf("second owner process: %s", r)
		}
		if r := startHolder(t, c.Path(), "reader").result; r != "contended" {
			t.Fatalf("reader process: %s", r)
		}
		wantOwnerContended(t, c)
		wantSharedContended(t, c)
		owner.release(t)
		o := mustOwner(t, c)
		if r := startHolder(t, c.Path(), "reader").result; r != "contended" {
			t.Fatalf("reader process against in-process owner: %s", r)
		}
		if err := o.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("shared holders coexist and exclude writers", func(t *testing.T) {
		c := resolveInteractive(t)
		r1 := startHolder(t, c.Path(), "reader")
		r2 := startHolder(t, c.Path(), "reader")
		if r1.result != "granted" || r2.result != "granted" {
			t.Fatalf("readers: %s %s", r1.result, r2.result)
		}
		release := mustShared(t, c)
		if res := startHolder(t, c.Path(), "owner").result; res != "contended" {
			t.Fatalf("owner process against readers: %s", res)
		}
		wantOwnerContended(t, c)
		r1.release(t)
		r2.release(t)
		if res := startHolder(t, c.Path(), "owner").result; res != "contended" {
			t.Fatalf("owner process against in-process reader: %s", res)
		}
		release()
		o := startHolder(t, c.Path(), "owner")
		if o.result != "granted" {
			t.Fatalf("owner after readers left: %s", o.result)
		}
		o.release(t)
	})
	t.Run("killed holder releases the lock", func(t *testing.T) {
		c := resolveInteractive(t)
		owner := startHolder(t, c.Path(), "owner")
		if owner.result != "granted" {
			t.Fatalf("owner process: %s", owner.result)
		}
		wantOwnerContended(t, c)
		if err := owner.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = owner.cmd.Wait()
		mustOwner(t, c)
	})
}

func BenchmarkOwnerAssert(b *testing.B) {
	c, err := Resolve(filepath.Join(b.TempDir(), "root"), KindInteractive)
	if err != nil {
		b.Fatal(err)
	}
	ns, err := ControlNamespace()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(filepath.Join(ns, c.RootID())) })
	o, err := TryAcquireOwner(c)
	if err != nil || o == nil {
		b.Fatal("owner", err)
	}
	defer o.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := o.Assert(); err != nil {
			b.Fatal(err)
		}
	}
}
