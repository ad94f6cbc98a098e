package tools

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/maka-agent/maka/internal/permsyntax"
)

// FuzzWebFetchURL: the URL check never panics; a URL it accepts is http or
// https without userinfo, its host is in the stable normHost form (so a
// domain rule compares what is requested), checking it again changes
// nothing, and an IP host is refused before any dial exactly when the
// connection check would refuse it. An IPv4 address and its IPv4-mapped
// IPv6 form are judged alike.
func FuzzWebFetchURL(f *testing.F) {
	for _, s := range []string{
		"https://example.org/a?b=c#d", "http://LOCALHOST.:8080/", "http://127.0.0.1/", "http://[::ffff:127.0.0.1]/",
		"http://[::1]:1/", "http://2130706433/", "http://0x7f.1/", "http://user:pw@example.org/", "file:///etc/passwd",
		"http://bücher.de/", "http://xn--bcher-kva.de/", "http://１２７.０.０.１/", "http://[fe80::1%25eth0]/",
		"http://169.254.169.254/latest", "http://100.64.0.1/", "http://[64:ff9b::a00:1]/", "http://[2002:a00:1::]/",
		"HTTP://Example.COM:443/x", "http://a..b/", "http://.a/", "http://a:/", "http:/x", "//example.org/", "http://%31%32%37.0.0.1/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := parseWebURL(raw)
		if err != nil {
			return
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.User != nil || u.Fragment != "" || u.Opaque != "" {
			t.Fatalf("%q accepted as %#v", raw, u)
		}
		host := u.Hostname()
		again, err := normHost(host)
		if err != nil || again != host {
			t.Fatalf("%q: host %q normalises to %q (%v)", raw, host, again, err)
		}
		if host != strings.ToLower(host) || strings.ContainsAny(host, "[]%@/\\ ") {
			t.Fatalf("%q: host %q is not in normal form", raw, host)
		}
		u2, err := parseWebURL(u.String())
		if err != nil || u2.String() != u.String() {
			t.Fatalf("%q: %q checks again to %v (%v)", raw, u, u2, err)
		}
		if a, err := netip.ParseAddr(host); err == nil {
			refused := blockedLiteral(host) != nil
			dialRefused := dialControl(false)("tcp6", netip.AddrPortFrom(a, 80).String(), nil) != nil
			if refused != dialRefused {
				t.Fatalf("%q: refused before the dial %v, at the dial %v", raw, refused, dialRefused)
			}
			if a.Is4() && (blockedAddr(a) == "") != (blockedAddr(netip.AddrFrom16(a.As16())) == "") {
				t.Fatalf("%q: %s and its IPv4-mapped form are judged apart", raw, a)
			}
		} else if labels := strings.Split(host, "."); permsyntax.NumericLabel(labels[len(labels)-1]) {
			t.Fatalf("%q: the host %q could be read as an IPv4 address", raw, host)
		}
	})
}

// FuzzWebFetchHTML: converting any page returns (a panic of the converter
// is an error, not a crash), and the Markdown is valid UTF-8 without the
// page's scripts.
func FuzzWebFetchHTML(f *testing.F) {
	for _, s := range []string{samplePage, "<a href='javascript:x'>x</a>", "<pre><code>a\n</code>", "<table><tr><td>1</table>",
		"<h1>\xff</h1>", "<script>secret()</script>text", "<base href='http://evil/'><a href='/x'>x</a>", strings.Repeat("<div>", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, page string) {
		md, _, err := convertHTML(context.Background(), page, "http://example.org")
		if err != nil {
			return
		}
		if !utf8.ValidString(md) {
			t.Fatalf("%q converted to invalid UTF-8 %q", page, md)
		}
		if strings.Contains(page, "<script>secret()</script>") && strings.Contains(md, "secret()") {
			t.Fatalf("%q: the script survived in %q", page, md)
		}
	})
}
