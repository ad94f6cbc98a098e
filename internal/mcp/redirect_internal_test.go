package mcp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The configured (secret) headers of an http server reach its own origin
// and never the host a redirect names.
func TestHeadersNeverFollowARedirectToAnotherOrigin(t *testing.T) {
	var got string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
	}))
	defer other.Close()
	var direct string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/mcp" {
			direct = r.Header.Get("Authorization")
			http.Redirect(w, r, strings.Replace(other.URL, "127.0.0.1", "localhost", 1)+"/mcp", http.StatusTemporaryRedirect)
		}
	}))
	defer srv.Close()
	h := http.Header{}
	h.Set("Authorization", "Bearer SECRET")
	c := httpClient(srv.URL+"/mcp", h)
	resp, err := c.Post(srv.URL+"/mcp", "application/json", strings.NewReader("{}"))
	if err == nil {
		resp.Body.Close()
		t.Fatal("a redirect to another origin was followed")
	}
	if direct != "Bearer SECRET" {
		t.Fatalf("the server itself received Authorization %q", direct)
	}
	if got != "" {
		t.Fatalf("the redirect target (another origin) received Authorization %q", got)
	}
}
