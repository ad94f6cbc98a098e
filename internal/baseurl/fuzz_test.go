package baseurl

import (
	"errors"
	"strings"
	"testing"
)

// FuzzCanonicalBaseURL checks that Canonical never panics, yields
// ASCII http(s) URLs without query or fragment, and is idempotent.
func FuzzCanonicalBaseURL(f *testing.F) {
	for _, c := range baseURLValid {
		f.Add(c.in)
	}
	for _, s := range baseURLInvalid {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := Canonical(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if got == "" {
			if trimSpace(raw) != "" {
				t.Fatalf("non-blank %q canonicalized to nothing", raw)
			}
			return
		}
		if !strings.HasPrefix(got, "http://") && !strings.HasPrefix(got, "https://") {
			t.Fatalf("%q canonicalized to %q", raw, got)
		}
		for i := 0; i < len(got); i++ {
			if c := got[i]; c <= 0x20 || c >= 0x7f || c == '?' || c == '#' || c == '\\' {
				t.Fatalf("%q canonicalized to %q with byte %q", raw, got, c)
			}
		}
		again, err := Canonical(got)
		if err != nil || again != got {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", raw, got, again, err)
		}
	})
}
