package store

import (
	"errors"
	"testing"
)

func TestDocuments(t *testing.T) {
	s := openStore(t, tempDB(t), Options{})
	ctx := testCtx(t)

	read := func(name string) (int64, string, bool) {
		t.Helper()
		var (
			rev   int64
			body  []byte
			found bool
		)
		if err := s.Read(ctx, func(q Querier) (err error) {
			rev, body, found, err = ReadDocument(q, name)
			return err
		}); err != nil {
			t.Fatalf("ReadDocument(%s): %v", name, err)
		}
		return rev, string(body), found
	}
	write := func(name, body string, expected int64) (int64, error) {
		t.Helper()
		var rev int64
		err := s.Write(ctx, func(tx *Tx) (err error) {
			rev, err = WriteDocument(tx, name, []byte(body), expected)
			return err
		})
		return rev, err
	}

	if rev, body, found := read("a"); found || rev != 0 || body != "" {
		t.Fatalf("absent document = %d %q %v, want 0 \"\" false", rev, body, found)
	}
	if _, err := write("a", `{"v":1}`, 1); !errors.Is(err, ErrRevisionMismatch) {
		t.Fatalf("write of an absent document expecting revision 1: %v, want ErrRevisionMismatch", err)
	}
	if _, _, found := read("a"); found {
		t.Fatal("a mismatched write created the document")
	}
	if rev, err := write("a", `{"v":1}`, 0); err != nil || rev != 1 {
		t.Fatalf("first write = %d, %v, want 1, nil", rev, err)
	}
	if rev, err := write("a", `{"v":2}`, 1); err != nil || rev != 2 {
		t.Fatalf("second write = %d, %v, want 2, nil", rev, err)
	}
	if _, err := write("a", `{"v":3}`, 1); !errors.Is(err, ErrRevisionMismatch) {
		t.Fatalf("stale write: %v, want ErrRevisionMismatch", err)
	}
	if rev, body, found := read("a"); !found || rev != 2 || body != `{"v":2}` {
		t.Fatalf("document a = %d %q %v, want 2 {\"v\":2} true", rev, body, found)
	}

	// AdvanceDocument creates a counter document and keeps the body of an
	// existing one.
	for i := range 3 {
		if err := s.Write(ctx, func(tx *Tx) error { return AdvanceDocument(tx, "counter") }); err != nil {
			t.Fatal(err)
		}
		if rev, body, found := read("counter"); !found || rev != int64(i+1) || body != "{}" {
			t.Fatalf("counter after %d advances = %d %q %v, want %d {} true", i+1, rev, body, found, i+1)
		}
	}
	if err := s.Write(ctx, func(tx *Tx) error { return AdvanceDocument(tx, "a") }); err != nil {
		t.Fatal(err)
	}
	if rev, body, _ := read("a"); rev != 3 || body != `{"v":2}` {
		t.Fatalf("document a after an advance = %d %q, want 3 {\"v\":2}", rev, body)
	}
	if _, _, found := read("b"); found {
		t.Fatal("writes of a and counter created b")
	}
}
