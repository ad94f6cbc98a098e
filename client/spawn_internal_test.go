package client

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// long is a sleep no test waits for: returning before it is the event.
const long = 30 * time.Second

func TestDirWatchWakesOnRename(t *testing.T) {
	dir := t.TempDir()
	w := watchRegistrations(dir)
	if w == nil {
		t.Skip("inotify unavailable")
	}
	defer w.close()
	tmp := filepath.Join(dir, "r.tmp")
	if err := os.WriteFile(tmp, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	begin := time.Now()
	go func() { done <- w.sleep(context.Background(), long) }()
	if err := os.Rename(tmp, filepath.Join(dir, "registration.json")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(long / 2):
		t.Fatal("a rename into the directory did not end the sleep")
	}
	if time.Since(begin) >= long {
		t.Fatal("slept the whole duration")
	}
	// Without events the sleep lasts its duration.
	begin = time.Now()
	if err := w.sleep(context.Background(), 30*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d < 30*time.Millisecond {
		t.Fatalf("slept %v, want 30ms", d)
	}
}

func TestDirWatchSleepEndsWithItsContext(t *testing.T) {
	w := watchRegistrations(t.TempDir())
	defer w.close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.sleep(ctx, long) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("sleep returned %v, want context.Canceled", err)
		}
	case <-time.After(long / 2):
		t.Fatal("cancelling the context did not end the sleep")
	}
	// A nil watch (no inotify) sleeps plainly.
	var none *dirWatch
	if err := none.sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	none.close()
}
